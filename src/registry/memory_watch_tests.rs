//! Watches of the in-memory store: a watch misses no change and is told of none twice or out
//! of turn, whenever it starts. Under concurrent writers, threads register, renew and
//! deregister instances of a few services (some under leases left to lapse, which the expiry
//! task removes meanwhile) while watchers start at moments of their own; every watcher's view,
//! its snapshot with its events applied in order, must end as the store ends.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::tests::service_with_tools;
use super::*;
use crate::registry::instance::InstanceId;
use crate::registry::lease::LeaseId;

const TENANT: TenantId = TenantId(1);
const SERVICES: [&str; 5] = ["alpha", "beta", "gamma", "delta", "epsilon"];
const INSTANCES: [&str; 3] = ["pod-a", "pod-b", "pod-c"];
const VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "2.0.0"];
const TOOL_SETS: [&[&str]; 3] = [&["read"], &["read", "write"], &["write", "delete"]];
/// The lease of a registration left to lapse: short, so that it lapses while writers run.
const SHORT_TTL: Duration = Duration::from_millis(15);
const OPERATIONS_PER_WRITER: usize = 1_500;

/// What a watcher learns of a service: its leading version and tools, and its instances (id
/// and version) in order.
type Seen = (String, Vec<String>, Vec<(String, String)>);

fn seen(entry: &ServiceEntry) -> Seen {
    (
        entry.contract.version.clone(),
        (entry.contract.tools.iter())
            .map(|tool| tool.name.to_string())
            .collect(),
        (entry.instances.iter())
            .map(|instance| (instance.id.to_string(), instance.contract.version.clone()))
            .collect(),
    )
}

fn registration(rng: &mut StdRng) -> ValidatedService {
    let name = SERVICES[rng.random_range(0..SERVICES.len())];
    let mut service = service_with_tools(name, TOOL_SETS[rng.random_range(0..TOOL_SETS.len())]);
    service.version = VERSIONS[rng.random_range(0..VERSIONS.len())].to_owned();
    service.instance =
        InstanceId::parse(INSTANCES[rng.random_range(0..INSTANCES.len())]).expect("an instance id");
    if rng.random_ratio(1, 4) {
        service.ttl = SHORT_TTL;
    }
    service
}

/// One writer's run: registrations, renewals and deregistrations of the leases it holds (a
/// lease another writer's registration replaced is refused, which is part of the run).
fn churn(store: &MemoryStore, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held: HashMap<(ServiceName, InstanceId), LeaseId> = HashMap::new();
    for _ in 0..OPERATIONS_PER_WRITER {
        let leases: Vec<_> = held
            .iter()
            .map(|(key, lease)| (key.clone(), *lease))
            .collect();
        match (rng.random_range(0..10), leases.is_empty()) {
            (0..=5, _) | (_, true) => {
                let service = registration(&mut rng);
                let key = (service.name.clone(), service.instance.clone());
                let entry = store
                    .register(TENANT, service, &TenantQuota::UNLIMITED)
                    .expect("no quota to run into");
                let registered = entry.instances.last().expect("the new instance, last");
                held.insert(key, registered.lease.id);
            }
            (6..=8, false) => {
                let ((service, _), lease) = &leases[rng.random_range(0..leases.len())];
                let _ = store.heartbeat(TENANT, service, *lease);
            }
            (_, false) => {
                let (key, lease) = &leases[rng.random_range(0..leases.len())];
                let _ = store.deregister(TENANT, &key.0, *lease);
                held.remove(key);
            }
        }
        if rng.random_ratio(1, 50) {
            std::thread::yield_now();
        }
    }
}

/// The services a watch started with, with every event after its snapshot applied in order.
fn view_of(mut watch: WatchStart) -> BTreeMap<String, Seen> {
    let mut view: BTreeMap<String, Seen> = (watch.services.iter())
        .map(|entry| (entry.name.to_string(), seen(entry)))
        .collect();
    let mut after = watch.after_snapshot();
    let mut last = watch.revision;
    while let Ok(event) = watch.events.try_recv() {
        let event = event.event().expect("kept");
        if !after.is_news(&event) {
            continue;
        }
        assert!(
            event.revision > last,
            "revisions go up: {} after {last}",
            event.revision
        );
        last = event.revision;
        match (&event.kind, &event.entry) {
            (ChangeKind::Added | ChangeKind::Updated(_), Some(entry)) => {
                view.insert(event.service.to_string(), seen(entry));
            }
            (ChangeKind::Removed | ChangeKind::Expired, None) => {
                let gone = view.remove(event.service.as_str());
                assert!(
                    gone.is_some(),
                    "{event:?}: a service the watcher did not hold"
                );
            }
            (kind, entry) => panic!("{kind:?} with entry {entry:?}"),
        }
    }
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_ends_as_the_store_ends_whenever_it_started() {
    let store = MemoryStore::start(1_000_000, 64);
    let writers: Vec<_> = (0..4)
        .map(|seed| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || churn(&store, seed))
        })
        .collect();
    let mut watches = vec![store.watch(TENANT)];
    while !writers.iter().all(|writer| writer.is_finished()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        watches.push(store.watch(TENANT));
    }
    for writer in writers {
        writer.join().expect("a writer finished");
    }
    // Every short lease has lapsed and been removed (within milliseconds of its deadline).
    tokio::time::sleep(SHORT_TTL * 20).await;
    let end = view_of(store.watch(TENANT));
    assert!(
        watches.len() > 2,
        "watches started while the writers ran: {}",
        watches.len()
    );
    for (index, watch) in watches.into_iter().enumerate() {
        assert_eq!(view_of(watch), end, "watch {index}");
    }
    bookkeeping_matches_the_services(&store);
}

/// The tenant's counts (for its quota) and its tool index, kept up change by change, are what
/// its services hold now.
fn bookkeeping_matches_the_services(store: &MemoryStore) {
    let snapshot = store.snapshot.load();
    let index = (snapshot.tenant(TENANT)).expect("services left: most leases are long");
    let mut recounted = Usage::default();
    let mut tools = BTreeSet::new();
    for entry in index.services.values() {
        let usage = entry.usage();
        recounted.services += 1;
        recounted.tools += usage.tools;
        recounted.tool_bytes += usage.tool_bytes;
        for tool in entry.tools() {
            tools.insert((tool.name.to_string(), entry.name.to_string()));
        }
    }
    assert_eq!(index.usage(), recounted);
    assert_eq!(index.tools.keys().cloned().collect::<BTreeSet<_>>(), tools);
}

/// A service whose lease ran out but was not removed yet is left out of a watch's snapshot,
/// and its going (by the expiry task, or by a registration that finds it lapsed) is not news
/// to that watch; what comes after it is.
#[tokio::test]
async fn the_going_of_a_service_lapsed_at_the_snapshot_is_not_news() {
    let store = MemoryStore::start(64, 16);
    let mut rng = StdRng::seed_from_u64(7);
    let lapsing = |name: &str, rng: &mut StdRng| {
        let mut service = registration(rng);
        service.name = ServiceName::parse(name).expect("a service name");
        service.ttl = SHORT_TTL;
        service
    };
    for name in ["swept", "replaced"] {
        store
            .register(TENANT, lapsing(name, &mut rng), &TenantQuota::UNLIMITED)
            .expect("registers");
    }
    // This test's runtime has one thread, so the expiry task cannot run meanwhile.
    std::thread::sleep(SHORT_TTL * 2);
    let mut watch = store.watch(TENANT);
    assert!(watch.services.is_empty());
    assert_eq!(watch.lapsed.len(), 2);
    let mut after = watch.after_snapshot();

    let again = lapsing("replaced", &mut rng);
    store
        .register(TENANT, again, &TenantQuota::UNLIMITED)
        .expect("registers again");
    tokio::time::sleep(SHORT_TTL * 10).await; // the expiry task runs
    let mut news = Vec::new();
    while let Ok(event) = watch.events.try_recv() {
        let event = event.event().expect("kept");
        if after.is_news(&event) {
            news.push((event.service.to_string(), event.kind.clone()));
        }
    }
    assert_eq!(
        news,
        [
            ("replaced".to_owned(), ChangeKind::Added),
            ("replaced".to_owned(), ChangeKind::Expired),
        ],
        "the second lease of `replaced` lapses too, and that is news"
    );
}
