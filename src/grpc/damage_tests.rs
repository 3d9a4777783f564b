//! Test-only support for the tests that feed toolplane's wire readers damaged bytes: a
//! deterministic generator, random damage, and the messages an `InvokeTool` input and output
//! travel in, declared so that prost checks every field's wire type.
//!
//! prost's map decoder reads a map entry whatever wire type its field tag says, so it accepts
//! some bytes protobuf calls malformed (a `Struct` entry sent as a varint, say); toolplane's
//! readers refuse them. A map is on the wire a repeated entry message, and prost checks the
//! wire type of a repeated message field, so these twins decode exactly the strictly valid
//! bytes. The tests that compare toolplane's readers with prost's on damaged bytes use them to
//! tell that leniency from a real disagreement.

use prost::Message;

/// A small deterministic generator (xorshift), so a failing case can be run again.
pub(super) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// `bytes` changed in one random way: a bit flipped, a byte set, cut short, a byte dropped
/// or added, or a stretch repeated.
pub(super) fn mutated(bytes: &[u8], next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if out.is_empty() {
        out.push(next() as u8);
        return out;
    }
    let at = (next() % out.len() as u64) as usize;
    match next() % 6 {
        0 => out[at] ^= 1 << (next() % 8),
        1 => out[at] = next() as u8,
        2 => out.truncate(at),
        3 => {
            out.remove(at);
        }
        4 => out.insert(at, next() as u8),
        _ => {
            let end = (at + 1 + (next() % 8) as usize).min(out.len());
            let stretch = out[at..end].to_vec();
            out.splice(at..at, stretch);
        }
    }
    out
}

/// `google.protobuf.Struct` as its wire form: repeated entries.
#[derive(Clone, PartialEq, Message)]
pub(super) struct StrictStruct {
    #[prost(message, repeated, tag = "1")]
    fields: Vec<StrictEntry>,
}

/// A `Struct` map entry.
#[derive(Clone, PartialEq, Message)]
struct StrictEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<StrictValue>,
}

/// `google.protobuf.Value`, its `oneof` members as plain fields (the same wire types).
#[derive(Clone, PartialEq, Message)]
pub(super) struct StrictValue {
    #[prost(int32, tag = "1")]
    null_value: i32,
    #[prost(double, tag = "2")]
    number_value: f64,
    #[prost(string, tag = "3")]
    string_value: String,
    #[prost(bool, tag = "4")]
    bool_value: bool,
    #[prost(message, optional, boxed, tag = "5")]
    struct_value: Option<Box<StrictStruct>>,
    #[prost(message, optional, boxed, tag = "6")]
    list_value: Option<Box<StrictList>>,
}

/// `google.protobuf.ListValue`.
#[derive(Clone, PartialEq, Message)]
struct StrictList {
    #[prost(message, repeated, tag = "1")]
    values: Vec<StrictValue>,
}

/// The `input` of an `InvokeToolRequest` (its other fields are skipped).
#[derive(Clone, PartialEq, Message)]
pub(super) struct StrictRequest {
    #[prost(message, optional, tag = "4")]
    input: Option<StrictStruct>,
}

/// The `output` of a `CallToolResponse` (its other fields are skipped).
#[derive(Clone, PartialEq, Message)]
pub(super) struct StrictAnswer {
    #[prost(message, optional, tag = "2")]
    output: Option<StrictValue>,
}

/// Whether `bytes` decode as `M` with every wire type checked.
pub(super) fn strictly_valid<M: Message + Default>(bytes: &[u8]) -> bool {
    M::decode(bytes).is_ok()
}
