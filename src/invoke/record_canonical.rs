//! A record's canonical JSON, the form its line is written in and its hash is taken over.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde::{Deserialize, Deserializer, Serialize};

use super::records::{InvocationRecord, InvocationStatus};
use crate::json::{Sha256Writer, compact_len};

/// A record's fields in canonical (sorted) order, so serde_json writes its canonical JSON
/// directly: no intermediate `serde_json::Value`, and for the hash no intermediate string. A
/// test checks it against `json::canonical_json` of the record's JSON value.
///
/// Read from a line ([`Self::read`]), its strings are borrowed from the line where they hold
/// no escape: a start checks each line of the current file without the allocations of an
/// [`InvocationRecord`] (about 14 a line). It reads what an `InvocationRecord` reads (the same
/// fields, types, required fields and refusal of others; the `record_lines` fuzz check holds
/// a start's reading to `audit verify`'s, which reads `InvocationRecord`s).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CanonicalRecord<'a> {
    attempts: u32,
    #[serde(borrow)]
    correlation_id: Cow<'a, str>,
    #[serde(borrow)]
    definition_sha256: Cow<'a, str>,
    duration_us: u64,
    #[serde(borrow)]
    error_reason: Cow<'a, str>,
    #[serde(borrow)]
    finished_at: Cow<'a, str>,
    #[serde(borrow)]
    input_sha256: Cow<'a, str>,
    #[serde(borrow)]
    invocation_id: Cow<'a, str>,
    #[serde(borrow)]
    output_sha256: Cow<'a, str>,
    #[serde(borrow)]
    prev_record_sha256: Cow<'a, str>,
    // Required in a line, as in an `InvocationRecord`; left out to write the content hashed.
    #[serde(
        deserialize_with = "required_text",
        skip_serializing_if = "Option::is_none"
    )]
    record_sha256: Option<Cow<'a, str>>,
    sequence: u64,
    #[serde(borrow)]
    service_name: Cow<'a, str>,
    #[serde(borrow)]
    started_at: Cow<'a, str>,
    status: InvocationStatus,
    tenant_id: u64,
    #[serde(borrow)]
    tool_name: Cow<'a, str>,
    // Left out when empty, so records written before the field existed hash as they did.
    #[serde(borrow, default, skip_serializing_if = "str::is_empty")]
    trace_id: Cow<'a, str>,
}

impl<'a> CanonicalRecord<'a> {
    fn of(record: &'a InvocationRecord, with_hash: bool) -> Self {
        Self {
            attempts: record.attempts,
            correlation_id: Cow::Borrowed(&record.correlation_id),
            definition_sha256: Cow::Borrowed(&record.definition_sha256),
            duration_us: record.duration_us,
            error_reason: Cow::Borrowed(&record.error_reason),
            finished_at: Cow::Borrowed(&record.finished_at),
            input_sha256: Cow::Borrowed(&record.input_sha256),
            invocation_id: Cow::Borrowed(&record.invocation_id),
            output_sha256: Cow::Borrowed(&record.output_sha256),
            prev_record_sha256: Cow::Borrowed(&record.prev_record_sha256),
            record_sha256: with_hash.then_some(Cow::Borrowed(&record.record_sha256)),
            sequence: record.sequence,
            service_name: Cow::Borrowed(&record.service_name),
            started_at: Cow::Borrowed(&record.started_at),
            status: record.status,
            tenant_id: record.tenant_id,
            tool_name: Cow::Borrowed(&record.tool_name),
            trace_id: Cow::Borrowed(&record.trace_id),
        }
    }

    /// The record `line` (without its line ending) holds; `None` when it holds none (read it
    /// as an [`InvocationRecord`] to say why).
    pub(super) fn read(line: &'a str) -> Option<Self> {
        serde_json::from_str(line).ok()
    }

    /// Its position in the log.
    pub(super) fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The hash of the record before it.
    pub(super) fn prev_record_sha256(&self) -> &str {
        &self.prev_record_sha256
    }

    /// Its own hash.
    pub(super) fn record_sha256(&self) -> &str {
        self.record_sha256.as_deref().unwrap_or_default()
    }

    /// Whether `line` is this record's canonical JSON line and its hash its content's: see
    /// [`is_canonical_line_of`].
    pub(super) fn is_its_line(&self, line: &str) -> bool {
        let mut compared = SameBytes {
            rest: line.as_bytes(),
            same: true,
        };
        let written = serde_json::to_writer(&mut compared, self);
        if written.is_err() || !compared.same || !compared.rest.is_empty() {
            return false;
        }
        // The line is canonical, so its field is there once (its quotes are not escaped, as
        // every quote inside a string value is), followed by the hash written as a JSON
        // string.
        static FIELD: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(HASH_FIELD));
        let (Some(at), Some(hash)) = (FIELD.find(line.as_bytes()), &self.record_sha256) else {
            return false;
        };
        let value = compact_len(hash);
        let Some(rest) = line.as_bytes().get(at + HASH_FIELD.len() + value..) else {
            return false;
        };
        let mut hasher = Sha256Writer::default();
        hasher.update(&line.as_bytes()[..at]);
        hasher.update(rest);
        hasher.finish_hex() == *hash
    }
}

/// A required string field, borrowed where it can be.
fn required_text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    /// Takes a string, borrowing it when the input allows.
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Cow<'de, str>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("a string")
        }

        fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(text))
        }

        fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(text.to_owned()))
        }
    }
    deserializer.deserialize_str(Text).map(Some)
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

/// Whether `line` is `record`'s canonical JSON line ([`record_line`]) and `record`'s hash its
/// content's ([`content_sha256`]). Done from the line itself, as a start reads every line of
/// the current file back: the record is written once, compared with the line as it is written
/// rather than into a string, and the content hashed is the line without its
/// `,"record_sha256":"..."` (the canonical JSON without that field is the same bytes around
/// it), rather than the record written a second time.
pub(super) fn is_canonical_line_of(line: &str, record: &InvocationRecord) -> bool {
    CanonicalRecord::of(record, true).is_its_line(line)
}

/// How the hash's field starts in a record's line.
const HASH_FIELD: &str = ",\"record_sha256\":";

/// Compares what is written with the bytes of `rest`, in order.
struct SameBytes<'a> {
    rest: &'a [u8],
    same: bool,
}

impl std::io::Write for SameBytes<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.rest.strip_prefix(bytes) {
            Some(rest) if self.same => self.rest = rest,
            _ => self.same = false,
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::records::RecordLog;
    use crate::invoke::records::tests::draft;

    /// A record as the log appends it, whose strings hold `text`.
    fn record(text: &str, trace_id: &str) -> InvocationRecord {
        let mut draft = draft("echo");
        draft.service_name = "testing".to_owned();
        draft.correlation_id = text.to_owned();
        draft.error_reason = text.to_owned();
        draft.trace_id = trace_id.to_owned();
        let log = RecordLog::in_memory(1);
        let record = log.append(draft).expect("an in-memory log appends");
        InvocationRecord::clone(&record)
    }

    /// A line is read as a record (its strings borrowed) exactly when it is read as an
    /// `InvocationRecord`: a field left out, of another type, or repeated; a field unknown.
    #[test]
    fn a_line_is_read_as_a_record_exactly_when_it_is_one() {
        let line = record_line(&record("a \" quote", "4bf92f3577b34da6a3ce929d0e0e4736"));
        let serde_json::Value::Object(fields) = serde_json::from_str(&line).expect("JSON") else {
            panic!("{line}");
        };
        let mut lines = vec![line.clone(), line.replacen('{', "{\"unknown\":1,", 1)];
        let others = [
            serde_json::json!(null),
            serde_json::json!(1),
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(u64::MAX),
            serde_json::json!("succeeded"),
            serde_json::json!("\u{e9}t\u{e9}"),
            serde_json::json!([]),
        ];
        for name in fields.keys() {
            let mut without = fields.clone();
            without.remove(name);
            lines.push(serde_json::Value::Object(without).to_string());
            for other in &others {
                let mut changed = fields.clone();
                changed.insert(name.clone(), other.clone());
                lines.push(serde_json::Value::Object(changed).to_string());
            }
            let value = &fields[name];
            lines.push(line.replacen('{', &format!("{{\"{name}\":{value},"), 1));
        }
        for line in &lines {
            let theirs = serde_json::from_str::<InvocationRecord>(line).is_ok();
            assert_eq!(CanonicalRecord::read(line).is_some(), theirs, "{line}");
        }
        let read = lines
            .iter()
            .filter(|line| CanonicalRecord::read(line).is_some());
        assert!(read.count() > fields.len(), "some of them are records");
    }

    /// The check from the line agrees with writing the record twice (its line, then its
    /// content for the hash), also for strings holding quotes, escapes, other scripts and the
    /// field's own name.
    #[test]
    fn a_line_is_the_records_exactly_when_written_out_it_is() {
        let texts = [
            "",
            "plain",
            "quote \" and backslash \\ and tab \t",
            "Straße ✓ \u{1F600}",
            ",\"record_sha256\":\"0000\"",
        ];
        for text in texts {
            for trace_id in ["", "4bf92f3577b34da6a3ce929d0e0e4736"] {
                let record = record(text, trace_id);
                let line = record_line(&record);
                assert!(is_canonical_line_of(&line, &record), "{line}");
                let mut rehashed = record.clone();
                rehashed.record_sha256 = "0".repeat(64);
                let line_of_rehashed = record_line(&rehashed);
                assert!(
                    !is_canonical_line_of(&line_of_rehashed, &rehashed),
                    "its hash"
                );
                let spaced = line.replacen(':', ": ", 1);
                assert!(!is_canonical_line_of(&spaced, &record), "not canonical");
                let edited = line.replace("testing", "testinG");
                assert!(!is_canonical_line_of(&edited, &record), "another record");
                assert!(
                    !is_canonical_line_of(&line[..line.len() - 1], &record),
                    "cut"
                );
                assert!(
                    !is_canonical_line_of(&format!("{line} "), &record),
                    "longer"
                );
            }
        }
    }
}
