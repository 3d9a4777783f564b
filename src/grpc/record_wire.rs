//! An invocation record written as `toolplane.v1.InvocationRecord` bytes straight from the
//! log's shared record, for `InvokeTool`'s answer.
//!
//! [`super::invoke::record_to_pb`] copies the record's nine strings into a generated message
//! that is encoded once and dropped; on the invocation path that was nine allocations per
//! call. [`record_bytes`] writes the same bytes with prost's own field encoders (a test checks
//! them against `record_to_pb` followed by prost's encoding, with every field set and with
//! every field at its default).

use bytes::BytesMut;
use prost::encoding::{int32, message, string, uint32, uint64};

use super::invoke::{record_duration, record_timestamp, status_to_pb};
use super::raw_message::RawMessage;
use crate::invoke::records::InvocationRecord;

/// One field of the message, by number.
enum Field<'a> {
    Text(u32, &'a String),
    U64(u32, u64),
    U32(u32, u32),
    Enum(u32, i32),
    Timestamp(u32, Option<prost_types::Timestamp>),
    Duration(u32, Option<prost_types::Duration>),
}

impl Field<'_> {
    /// Its encoded length; 0 for a proto3 default, which is not written.
    fn len(&self) -> usize {
        match self {
            Self::Text(_, text) if text.is_empty() => 0,
            Self::Text(tag, text) => string::encoded_len(*tag, text),
            Self::U64(_, 0) | Self::U32(_, 0) | Self::Enum(_, 0) => 0,
            Self::U64(tag, value) => uint64::encoded_len(*tag, value),
            Self::U32(tag, value) => uint32::encoded_len(*tag, value),
            Self::Enum(tag, value) => int32::encoded_len(*tag, value),
            Self::Timestamp(tag, Some(time)) => message::encoded_len(*tag, time),
            Self::Duration(tag, Some(duration)) => message::encoded_len(*tag, duration),
            Self::Timestamp(_, None) | Self::Duration(_, None) => 0,
        }
    }

    fn encode(&self, out: &mut BytesMut) {
        if self.len() == 0 {
            return;
        }
        match self {
            Self::Text(tag, text) => string::encode(*tag, text, out),
            Self::U64(tag, value) => uint64::encode(*tag, value, out),
            Self::U32(tag, value) => uint32::encode(*tag, value, out),
            Self::Enum(tag, value) => int32::encode(*tag, value, out),
            Self::Timestamp(tag, Some(time)) => message::encode(*tag, time, out),
            Self::Duration(tag, Some(duration)) => message::encode(*tag, duration, out),
            Self::Timestamp(_, None) | Self::Duration(_, None) => {}
        }
    }
}

/// `record` encoded as a `toolplane.v1.InvocationRecord`.
pub fn record_bytes(record: &InvocationRecord) -> RawMessage {
    // In field-number order, as prost writes them.
    let fields = [
        Field::Text(1, &record.invocation_id),
        Field::U64(2, record.sequence),
        Field::U64(3, record.tenant_id),
        Field::Text(4, &record.correlation_id),
        Field::Text(5, &record.tool_name),
        Field::Text(6, &record.service_name),
        Field::Text(7, &record.definition_sha256),
        Field::Text(8, &record.input_sha256),
        Field::Text(9, &record.output_sha256),
        Field::Timestamp(10, record_timestamp(&record.started_at)),
        Field::Timestamp(11, record_timestamp(&record.finished_at)),
        Field::Duration(12, record_duration(record.duration_us)),
        Field::U32(13, record.attempts),
        Field::Enum(14, status_to_pb(record.status) as i32),
        Field::Text(15, &record.error_reason),
        Field::Text(16, &record.prev_record_sha256),
        Field::Text(17, &record.record_sha256),
        Field::Text(18, &record.trace_id),
    ];
    let mut out = BytesMut::with_capacity(fields.iter().map(Field::len).sum());
    for field in &fields {
        field.encode(&mut out);
    }
    RawMessage::from_encoded(out)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::grpc::invoke::record_to_pb;
    use crate::invoke::records::InvocationStatus;

    fn full() -> InvocationRecord {
        InvocationRecord {
            sequence: 300,
            invocation_id: "0c6e1aa0-cb2c-408b-95e4-44c32de951be".into(),
            tenant_id: 7,
            correlation_id: "corr-ü".into(),
            tool_name: "generate_nodes".into(),
            service_name: "story-generator".into(),
            definition_sha256: "a".repeat(64),
            input_sha256: "b".repeat(64),
            output_sha256: "c".repeat(64),
            started_at: "2026-11-23T10:51:47.022761783Z".into(),
            finished_at: "2026-11-23T10:51:47.122766552Z".into(),
            duration_us: 100_004,
            attempts: 2,
            status: InvocationStatus::TimedOut,
            error_reason: "TOOL_TIMEOUT".into(),
            prev_record_sha256: "d".repeat(64),
            record_sha256: "e".repeat(64),
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        }
    }

    #[test]
    fn the_same_bytes_as_the_generated_message() {
        let full = full();
        let defaults = InvocationRecord {
            sequence: 0,
            invocation_id: String::new(),
            tenant_id: 0,
            correlation_id: String::new(),
            tool_name: String::new(),
            service_name: String::new(),
            definition_sha256: String::new(),
            input_sha256: String::new(),
            output_sha256: String::new(),
            started_at: String::new(),
            finished_at: String::new(),
            duration_us: 0,
            attempts: 0,
            status: InvocationStatus::Succeeded,
            error_reason: String::new(),
            prev_record_sha256: String::new(),
            trace_id: String::new(),
            record_sha256: String::new(),
        };
        for record in [full, defaults] {
            let generated = record_to_pb(&record);
            assert_eq!(
                record_bytes(&record).as_bytes(),
                generated.encode_to_vec().as_slice(),
                "{generated:?}"
            );
        }
    }
}
