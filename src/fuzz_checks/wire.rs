//! toolplane's own readers of the bytes callers and providers send, against prost's: the
//! `InvokeToolRequest` toolplane decodes with its input kept as bytes, the `CallToolResponse`
//! with its output kept as bytes, and those bytes read straight into JSON
//! ([`crate::grpc::raw_message`]). The first byte picks the reader: 0 a `Struct`, 1 a
//! `Value`, 2 an `InvokeToolRequest`, 3 a `CallToolResponse` (modulo 4).
//!
//! Whatever the bytes, a reader must not panic, and what it accepts prost must accept and read
//! the same: toolplane validates and records the JSON it reads, and the provider decodes the
//! same bytes with an ordinary protobuf decoder. (Bytes only prost's lenient map decoder takes
//! are refused on purpose, so prost accepting more is not a fault; the unit tests of
//! `raw_message` check that case with a strict decoder.)

use prost::Message;
use serde_json::Value;

use crate::grpc::invoke_wire::{CallToolResponseWire, InvokeToolRequestWire};
use crate::grpc::raw_message::{RawJsonError, struct_bytes_to_json, value_bytes_to_json};
use crate::json::{JsonConversionError, struct_to_json, value_to_json};
use crate::pb;

/// `bytes` as the length-delimited field `tag` of a message.
fn embedded(tag: u32, bytes: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(bytes.len() + 16);
    prost::encoding::encode_key(
        tag,
        prost::encoding::WireType::LengthDelimited,
        &mut message,
    );
    prost::encoding::encode_varint(bytes.len() as u64, &mut message);
    message.extend_from_slice(bytes);
    message
}

/// Asserts that where `ours` read JSON, prost's path read the same JSON, and that where prost
/// read a value with a JSON form, `ours` did not call it one without.
fn agree(
    bytes: &[u8],
    ours: &Result<Value, RawJsonError>,
    theirs: Result<Result<Value, JsonConversionError>, prost::DecodeError>,
) {
    match (ours, theirs) {
        (Ok(mine), Ok(Ok(theirs))) => assert_eq!(mine, &theirs, "{bytes:?}"),
        (Ok(mine), theirs) => panic!("{bytes:?}: read {mine:?}, prost's path {theirs:?}"),
        (Err(RawJsonError::NoJsonForm(mine)), Ok(Ok(theirs))) => {
            panic!("{bytes:?}: no JSON form ({mine:?}), prost's path read {theirs:?}")
        }
        (Err(_), _) => {}
    }
}

/// The bytes a caller or provider sends, read by toolplane's readers and by prost's: the
/// first byte picks the reader (see the module docs), the rest is the message.
pub fn wire_readers(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        // Read where they travel (an `InvokeToolRequest`'s input, a `CallToolResponse`'s
        // output), so that prost counts their nesting as it does for a real message.
        0 => agree(
            bytes,
            &struct_bytes_to_json(bytes),
            pb::InvokeToolRequest::decode(embedded(4, bytes).as_slice())
                .map(|request| struct_to_json(&request.input.unwrap_or_default())),
        ),
        1 => agree(
            bytes,
            &value_bytes_to_json(bytes),
            pb::CallToolResponse::decode(embedded(2, bytes).as_slice())
                .map(|answer| value_to_json(&answer.output.unwrap_or_default())),
        ),
        2 => {
            let Ok(mine) = InvokeToolRequestWire::decode(bytes) else {
                return;
            };
            // The input is kept as bytes by the decoding and read when the call is checked:
            // only a request whose input reads is taken.
            let input = mine
                .input
                .as_ref()
                .map_or(&[][..], |input| input.as_bytes());
            let Ok(json) = struct_bytes_to_json(input) else {
                return;
            };
            let mut theirs = pb::InvokeToolRequest::decode(bytes)
                .unwrap_or_else(|error| panic!("{bytes:?}: read, prost refused it: {error}"));
            let expected = struct_to_json(&theirs.input.take().unwrap_or_default());
            assert_eq!(Ok(json), expected.map_err(drop), "{bytes:?}");
            // The other fields, compared as written out: a NaN (a retry policy's multiplier)
            // equals no NaN.
            let mine = pb::InvokeToolRequest {
                input: None,
                meta: mine.meta,
                tool_name: mine.tool_name,
                service_name: mine.service_name,
                idempotency_key: mine.idempotency_key,
                retry_policy: mine.retry_policy,
            };
            assert_eq!(format!("{mine:?}"), format!("{theirs:?}"), "{bytes:?}");
        }
        _ => {
            let Ok(mine) = CallToolResponseWire::decode(bytes) else {
                return;
            };
            // The output likewise, when the answer is passed on.
            let output = mine
                .output
                .as_ref()
                .map_or(&[][..], |output| output.as_bytes());
            let Ok(json) = value_bytes_to_json(output) else {
                return;
            };
            let theirs = pb::CallToolResponse::decode(bytes)
                .unwrap_or_else(|error| panic!("{bytes:?}: read, prost refused it: {error}"));
            assert_eq!(mine.warnings, theirs.warnings);
            let expected = theirs
                .output
                .as_ref()
                .map_or(Ok(Value::Null), value_to_json);
            assert_eq!(Ok(json), expected.map_err(drop), "{bytes:?}");
        }
    }
}
