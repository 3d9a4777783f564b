//! A record's canonical JSON, the form its line is written in and its hash is taken over.

use serde::Serialize;

use super::records::{InvocationRecord, InvocationStatus};
use crate::json::Sha256Writer;

/// A record's fields in canonical (sorted) order, so serde_json writes its canonical JSON
/// directly: no intermediate `serde_json::Value`, and for the hash no intermediate string. A
/// test checks it against `json::canonical_json` of the record's JSON value.
#[derive(Serialize)]
struct CanonicalRecord<'a> {
    attempts: u32,
    correlation_id: &'a str,
    definition_sha256: &'a str,
    duration_us: u64,
    error_reason: &'a str,
    finished_at: &'a str,
    input_sha256: &'a str,
    invocation_id: &'a str,
    output_sha256: &'a str,
    prev_record_sha256: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    record_sha256: Option<&'a str>,
    sequence: u64,
    service_name: &'a str,
    started_at: &'a str,
    status: InvocationStatus,
    tenant_id: u64,
    tool_name: &'a str,
    // Left out when empty, so records written before the field existed hash as they did.
    #[serde(skip_serializing_if = "str::is_empty")]
    trace_id: &'a str,
}

impl<'a> CanonicalRecord<'a> {
    fn of(record: &'a InvocationRecord, with_hash: bool) -> Self {
        Self {
            attempts: record.attempts,
            correlation_id: &record.correlation_id,
            definition_sha256: &record.definition_sha256,
            duration_us: record.duration_us,
            error_reason: &record.error_reason,
            finished_at: &record.finished_at,
            input_sha256: &record.input_sha256,
            invocation_id: &record.invocation_id,
            output_sha256: &record.output_sha256,
            prev_record_sha256: &record.prev_record_sha256,
            record_sha256: with_hash.then_some(record.record_sha256.as_str()),
            sequence: record.sequence,
            service_name: &record.service_name,
            started_at: &record.started_at,
            status: record.status,
            tenant_id: record.tenant_id,
            tool_name: &record.tool_name,
            trace_id: &record.trace_id,
        }
    }
}

/// The canonical JSON line of a record (without the newline).
pub fn record_line(record: &InvocationRecord) -> String {
    serde_json::to_string(&CanonicalRecord::of(record, true)).expect("a record always serializes")
}

/// sha256 of a record's canonical JSON without its `record_sha256` field.
pub fn content_sha256(record: &InvocationRecord) -> String {
    let mut hasher = Sha256Writer::default();
    serde_json::to_writer(&mut hasher, &CanonicalRecord::of(record, false))
        .expect("a record always serializes");
    hasher.finish_hex()
}

/// A record's time as RFC 3339 text with nanoseconds, as its line holds it.
pub(super) fn rfc3339(time: std::time::SystemTime) -> String {
    use std::fmt::Write;
    // Room for the 30 characters written ("2026-11-23T10:51:47.022761783Z"), so that the
    // string is allocated once rather than grown.
    let mut text = String::with_capacity(30);
    let _ = write!(text, "{}", humantime::format_rfc3339_nanos(time));
    text
}
