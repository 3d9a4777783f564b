//! Unit tests of the ring: its lookups answer as a scan of every record held would, whatever
//! the ids, tenants, order and evictions.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::invoke::records::InvocationStatus;

fn record(sequence: u64, tenant: u64, id: &str, tool: &str) -> Arc<InvocationRecord> {
    Arc::new(InvocationRecord {
        sequence,
        invocation_id: id.to_owned(),
        tenant_id: tenant,
        correlation_id: String::new(),
        tool_name: tool.to_owned(),
        service_name: "svc".to_owned(),
        definition_sha256: String::new(),
        input_sha256: String::new(),
        output_sha256: String::new(),
        started_at: String::new(),
        finished_at: String::new(),
        duration_us: 0,
        attempts: 1,
        status: InvocationStatus::Succeeded,
        error_reason: String::new(),
        prev_record_sha256: String::new(),
        record_sha256: String::new(),
        trace_id: String::new(),
    })
}

/// What a scan of every record held, newest first, finds for `id`.
fn scanned(ring: &RecordRing, tenant: u64, id: &str) -> Option<Arc<InvocationRecord>> {
    (ring.iter().rev())
        .find(|r| r.tenant_id == tenant && r.invocation_id == id)
        .cloned()
}

/// What a scan of every record held, newest first, lists.
fn scanned_page(
    ring: &RecordRing,
    tenant: u64,
    filter: &RecordFilter,
    before: Option<u64>,
    limit: usize,
) -> Vec<Arc<InvocationRecord>> {
    (ring.iter().rev())
        .filter(|r| {
            r.tenant_id == tenant
                && before.is_none_or(|before| r.sequence < before)
                && filter.matches(r)
        })
        .take(limit)
        .cloned()
        .collect()
}

/// A few UUIDs, spelt in several ways, and ids that are none.
fn ids() -> Vec<String> {
    let uuids = [
        "5f0c6bde-7a4e-4c1b-9a55-0f2b8c1d2e3f",
        "0b1e2d3c-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
        "ffffffff-ffff-4fff-bfff-ffffffffffff",
    ];
    let mut ids: Vec<String> = uuids.iter().map(|&id| id.to_owned()).collect();
    ids.extend(uuids.iter().map(|id| id.to_uppercase()));
    ids.extend(uuids.iter().map(|id| id.replace('-', "")));
    ids.extend(
        [
            "not-a-uuid",
            "",
            "urn:uuid:5f0c6bde-7a4e-4c1b-9a55-0f2b8c1d2e3f",
        ]
        .map(String::from),
    );
    ids
}

/// Checks every lookup of the ring against a scan.
fn check_against_a_scan(ring: &RecordRing, ids: &[String], sequences: u64) {
    let filters = [
        RecordFilter::default(),
        RecordFilter {
            tool_name: Some("a".to_owned()),
            ..RecordFilter::default()
        },
    ];
    for tenant in 0..4 {
        for id in ids {
            let found = ring.get(TenantId(tenant), id);
            let expected = scanned(ring, tenant, id);
            assert_eq!(
                found.as_ref().map(Arc::as_ptr),
                expected.as_ref().map(Arc::as_ptr),
                "tenant {tenant}, id {id:?}"
            );
        }
        for filter in &filters {
            for before in [
                None,
                Some(0),
                Some(1),
                Some(sequences / 2),
                Some(sequences + 5),
            ] {
                for limit in [1, 3, 1000] {
                    let page = ring.page(TenantId(tenant), filter, before, limit);
                    let expected = scanned_page(ring, tenant, filter, before, limit);
                    let pointers = |page: &[Arc<InvocationRecord>]| {
                        page.iter().map(Arc::as_ptr).collect::<Vec<_>>()
                    };
                    assert_eq!(
                        pointers(&page),
                        pointers(&expected),
                        "tenant {tenant}, before {before:?}, limit {limit}"
                    );
                }
            }
        }
    }
}

#[test]
fn lookups_answer_as_a_scan_would_in_order_and_out_of_it() {
    let ids = ids();
    for seed in 0..40 {
        let mut rng = StdRng::seed_from_u64(seed);
        let capacity = rng.random_range(1..12);
        let mut ring = RecordRing::new(capacity);
        // Every fourth seed writes sequences out of order, as a file edited by hand may.
        let shuffled = seed % 4 == 3;
        let count = rng.random_range(0..40);
        for n in 1..=count {
            let sequence = if shuffled { rng.random_range(1..50) } else { n };
            let id = &ids[rng.random_range(0..ids.len())];
            let tool = if rng.random_bool(0.5) { "a" } else { "b" };
            let evicted = ring.push_newest(record(sequence, rng.random_range(0..4), id, tool));
            assert_eq!(evicted.is_some(), n as usize > capacity);
            check_against_a_scan(&ring, &ids, 50);
        }
        assert_eq!(ring.iter().count(), (count as usize).min(capacity));
        if !shuffled {
            assert!(ring.in_order);
        }
    }
}

#[test]
fn records_older_than_those_held_fill_the_room_left() {
    let ids = ids();
    let mut ring = RecordRing::new(4);
    ring.push_newest(record(10, 1, &ids[0], "a"));
    ring.push_newest(record(11, 2, &ids[1], "a"));
    // The same id as the newer record of tenant 1: the newer stays the one found by it.
    ring.push_oldest(record(9, 2, &ids[0], "a"));
    ring.push_oldest(record(8, 1, &ids[2], "b"));
    ring.push_oldest(record(7, 1, &ids[3], "b"));
    assert_eq!(ring.room(), 0);
    assert_eq!(ring.oldest().map(|r| r.sequence), Some(8));
    check_against_a_scan(&ring, &ids, 12);
    assert_eq!(ring.get(TenantId(2), &ids[0]).map(|r| r.sequence), Some(9));
    assert_eq!(ring.get(TenantId(1), &ids[0]).map(|r| r.sequence), Some(10));
    // Letting the oldest go keeps the index's newer records.
    ring.push_newest(record(12, 3, &ids[4], "a"));
    check_against_a_scan(&ring, &ids, 13);
    assert_eq!(ring.get(TenantId(2), &ids[0]).map(|r| r.sequence), Some(9));
    ring.push_newest(record(13, 3, &ids[5], "a"));
    check_against_a_scan(&ring, &ids, 14);
    assert_eq!(ring.get(TenantId(2), &ids[0]), None);
    assert_eq!(ring.get(TenantId(1), &ids[0]).map(|r| r.sequence), Some(10));
}

#[test]
fn a_tenant_without_records_left_is_let_go() {
    let ids = ids();
    let mut ring = RecordRing::new(2);
    for (sequence, tenant) in (1..=10).zip(100..) {
        ring.push_newest(record(sequence, tenant, &ids[sequence as usize % 3], "a"));
    }
    assert_eq!(ring.by_tenant.len(), 2);
    assert!(ring.by_id.len() <= 2);
}
