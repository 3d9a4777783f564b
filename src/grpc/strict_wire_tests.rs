//! Test-only: the messages an `InvokeTool` input and output travel in, declared so that prost
//! checks every field's wire type.
//!
//! prost's map decoder reads a map entry whatever wire type its key says, so prost accepts
//! some bytes protobuf calls malformed (a `Struct` entry sent as a varint, say); toolplane's
//! readers refuse them. A map is on the wire a repeated entry message, and prost checks the
//! wire type of a repeated message field, so these twins decode exactly the strictly valid
//! bytes. The tests that compare toolplane's readers with prost's on damaged bytes use them to
//! tell that leniency from a real disagreement.

use prost::Message;

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
