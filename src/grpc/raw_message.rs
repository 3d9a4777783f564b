//! Embedded messages kept as the bytes that arrived, and those bytes read straight into JSON.
//!
//! An `InvokeTool` input travels caller -> toolplane -> provider as a `google.protobuf.Struct`,
//! and the output back as a `google.protobuf.Value`. toolplane needs them as JSON (to validate
//! and hash them) but has no reason to rebuild them as prost trees: [`RawMessage`] keeps an
//! embedded message as its encoded bytes, [`struct_bytes_to_json`] and
//! [`value_bytes_to_json`] read those bytes into `serde_json` directly, and the same bytes are
//! sent on. The reading follows what prost's decoder followed by [`crate::json::struct_to_json`]
//! gives, to the letter (tests compare the two): the last of repeated map keys and `oneof`
//! members wins (also over a number without a JSON form, which is refused only if it stays),
//! repeated embedded messages merge, unknown fields are skipped, strings must be
//! UTF-8, and at most 100 messages nest (prost's limit). So what toolplane validates is what
//! the provider decodes. Bytes that are bad in more than one way (say, a NaN in one entry and
//! a broken length in a later one) are refused either way, but the fault named may be another
//! one than that path would name: this reader stops at the first it meets. Two differences are
//! on purpose, each refusing what prost takes: prost's map decoder reads a `Struct` entry
//! whatever its wire type says, where protobuf calls a wrong one malformed, and skips a group
//! at a field number the message does not have. Here both are refused (protobuf 3, so `Struct`
//! and `Value`, has no groups, and no encoder writes one), so the bytes read are always the
//! bytes sent on. Tests compare the two readings on randomly damaged bytes too.
//!
//! prost has no public way to keep a field undecoded or to walk encoded bytes, so this uses
//! the wire primitives of `prost::encoding` that prost's own derived decoders use.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::DecodeError;
use prost::encoding::{
    self, DecodeContext, WireType, check_wire_type, decode_key, decode_varint, encode_key,
    encode_varint, skip_field,
};
use serde_json::{Map, Value};

use crate::invoke::caller::WireForm;
use crate::json::{JsonConversionError, number_to_json};

/// How many messages may nest, counting the outermost embedded one (prost's limit).
const RECURSION_LIMIT: u32 = 100;

/// An embedded message kept as its encoded bytes. Decoding one copies each of its fields'
/// bytes as they are (a message that appears twice is concatenated, which is protobuf's merge);
/// encoding one writes them back unchanged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawMessage {
    bytes: BytesMut,
}

impl std::fmt::Debug for RawMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawMessage({} bytes)", self.bytes.len())
    }
}

impl RawMessage {
    /// A message's encoded bytes.
    pub fn encode(message: &impl prost::Message) -> Self {
        Self {
            bytes: BytesMut::from(message.encode_to_vec().as_slice()),
        }
    }

    /// Bytes already encoded as a message, kept as they are.
    pub fn from_encoded(bytes: BytesMut) -> Self {
        Self { bytes }
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The message a [`WireForm`] carries, when it carries one: taken when this is the last
    /// reference to it (the last attempt of a call), copied otherwise.
    pub fn from_wire(wire: WireForm) -> Option<Self> {
        let shared = wire.0.downcast::<Self>().ok()?;
        Some(std::sync::Arc::try_unwrap(shared).unwrap_or_else(|shared| (*shared).clone()))
    }

    /// Decodes the bytes as `M`.
    pub fn decode<M: prost::Message + Default>(&self) -> Result<M, DecodeError> {
        M::decode(self.as_bytes())
    }
}

impl prost::Message for RawMessage {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.bytes);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // prost's own field decoders read (and bounds-check) each value; it is then written
        // back as it was.
        let out = &mut self.bytes;
        match wire_type {
            // Groups are long deprecated and protobuf 3 (so `Struct`, `Value`) has none: no
            // encoder writes one here, and prost refuses one at a known field.
            WireType::StartGroup | WireType::EndGroup => refuse_group(wire_type),
            WireType::Varint => {
                let mut value = 0u64;
                encoding::uint64::merge(wire_type, &mut value, buf, ctx)?;
                encode_key(tag, wire_type, out);
                encode_varint(value, out);
                Ok(())
            }
            WireType::SixtyFourBit => {
                let mut value = 0u64;
                encoding::fixed64::merge(wire_type, &mut value, buf, ctx)?;
                encode_key(tag, wire_type, out);
                out.put_u64_le(value);
                Ok(())
            }
            WireType::ThirtyTwoBit => {
                let mut value = 0u32;
                encoding::fixed32::merge(wire_type, &mut value, buf, ctx)?;
                encode_key(tag, wire_type, out);
                out.put_u32_le(value);
                Ok(())
            }
            WireType::LengthDelimited => {
                let mut value = Bytes::new();
                encoding::bytes::merge(wire_type, &mut value, buf, ctx)?;
                encode_key(tag, wire_type, out);
                encode_varint(value.len() as u64, out);
                out.put_slice(&value);
                Ok(())
            }
        }
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes.clear();
    }
}

/// Encoded bytes that do not read as the JSON they should carry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RawJsonError {
    /// The bytes are not a valid encoding of the message.
    #[error("not a valid encoded google.protobuf.{message}: {problem}")]
    Malformed {
        /// `Struct` or `Value`.
        message: &'static str,
        /// What is wrong with the bytes.
        problem: String,
    },
    /// The message is valid protobuf but a value in it has no JSON form.
    #[error(transparent)]
    NoJsonForm(#[from] JsonConversionError),
}

/// Why reading stopped, before it is said which message was being read.
enum Fault {
    Decode(String),
    Json(JsonConversionError),
}

impl From<DecodeError> for Fault {
    fn from(error: DecodeError) -> Self {
        Self::Decode(error.to_string())
    }
}

impl From<&str> for Fault {
    fn from(problem: &str) -> Self {
        Self::Decode(problem.to_owned())
    }
}

impl Fault {
    fn about(self, message: &'static str) -> RawJsonError {
        match self {
            Self::Decode(problem) => RawJsonError::Malformed { message, problem },
            Self::Json(error) => RawJsonError::NoJsonForm(error),
        }
    }
}

/// Reads an encoded `google.protobuf.Struct` as a JSON object.
pub fn struct_bytes_to_json(bytes: &[u8]) -> Result<Value, RawJsonError> {
    let mut map = Map::new();
    let mut unformed = None;
    merge_struct(bytes, 1, &mut map, &mut unformed).map_err(|fault| fault.about("Struct"))?;
    match unformed.and_then(|unformed| unformed.first()) {
        Some(error) => Err(Fault::Json(error).about("Struct")),
        None => Ok(Value::Object(map)),
    }
}

/// Reads an encoded `google.protobuf.Value` as JSON (no kind set reads as `null`).
pub fn value_bytes_to_json(bytes: &[u8]) -> Result<Value, RawJsonError> {
    let mut slot = Slot::new();
    merge_value(bytes, 1, &mut slot)
        .and_then(|()| slot.finish())
        .map_err(|fault| fault.about("Value"))
}

/// A `Value` while its fields are read: the JSON of its last member, or (with `json` left
/// `null`) the last member's number, which is checked only once no later field can replace
/// it. (Two fields rather than an enum around `Value`, which the decoder moved on every
/// member: decoding the benchmark's 256 B input took 15% less time this way, BENCHMARKS.md
/// item 19.)
struct Slot {
    json: Value,
    number: Option<f64>,
    /// Values without a JSON form inside `json` (a struct or a list).
    unformed: Option<Box<Unformed>>,
}

/// Values without a JSON form met inside a struct or a list, which a later field may still
/// replace: prost keeps them, and only converting what is left refuses them. (Boxed: they are
/// rare, and the slot stays small.)
#[derive(Default)]
struct Unformed {
    /// Entries of a struct, by key: an entry of the same key read later replaces one.
    entries: std::collections::BTreeMap<String, JsonConversionError>,
    /// The first item of a list without one: items are never replaced, only the whole list.
    item: Option<JsonConversionError>,
}

impl Unformed {
    /// The fault to name: the list's first, or the struct's first by key, as the conversion
    /// of prost's tree meets them.
    fn first(self) -> Option<JsonConversionError> {
        self.item.or_else(|| self.entries.into_values().next())
    }
}

impl Slot {
    /// No member read yet (reads as `null`).
    fn new() -> Self {
        Self {
            json: Value::Null,
            number: None,
            unformed: None,
        }
    }

    /// The member just read is `json`.
    fn set(&mut self, json: Value) {
        self.json = json;
        self.number = None;
        self.unformed = None;
    }

    /// The member just read is the number `n`.
    fn set_number(&mut self, n: f64) {
        self.json = Value::Null;
        self.number = Some(n);
        self.unformed = None;
    }

    fn finish(self) -> Result<Value, Fault> {
        match self.number {
            None => match self.unformed.and_then(|unformed| unformed.first()) {
                Some(error) => Err(Fault::Json(error)),
                None => Ok(self.json),
            },
            Some(n) => number_to_json(n).ok_or_else(|| {
                Fault::Json(JsonConversionError {
                    pointer: String::new(),
                    problem: format!("{n} is not a finite number and has no JSON form"),
                })
            }),
        }
    }
}

fn enter(depth: u32) -> Result<(), Fault> {
    if depth > RECURSION_LIMIT {
        return Err("recursion limit reached".into());
    }
    Ok(())
}

/// The next length-delimited field's bytes.
/// Refuses a group (`wire_type` is a group's start or end) in a message kept or read here.
fn refuse_group(wire_type: WireType) -> Result<(), DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)
}

/// Skips a field of a number the message does not have, as prost does, but for a group, which
/// is refused (see [`refuse_group`]).
fn skip_unknown(wire_type: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), Fault> {
    if matches!(wire_type, WireType::StartGroup | WireType::EndGroup) {
        refuse_group(wire_type)?;
    }
    Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?)
}

fn delimited<'a>(buf: &mut &'a [u8], wire_type: WireType) -> Result<&'a [u8], Fault> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let len = decode_varint(buf)?;
    if len > buf.len() as u64 {
        return Err("buffer underflow".into());
    }
    let (head, tail) = buf.split_at(len as usize);
    *buf = tail;
    Ok(head)
}

fn utf8(bytes: &[u8]) -> Result<String, Fault> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| "invalid string value: data is not UTF-8 encoded".into())
}

/// `Struct { map<string, Value> fields = 1; }`; each entry replaces an earlier one of its key.
/// An entry without a JSON form is kept in `unformed` until one of its key replaces it.
fn merge_struct(
    mut buf: &[u8],
    depth: u32,
    map: &mut Map<String, Value>,
    unformed: &mut Option<Box<Unformed>>,
) -> Result<(), Fault> {
    enter(depth)?;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag != 1 {
            skip_unknown(wire_type, tag, &mut buf)?;
            continue;
        }
        let mut entry = delimited(&mut buf, wire_type)?;
        enter(depth + 1)?;
        // The value is read once the key is known (fields may come in any order), so an
        // error inside it can name its place. A value field seen more than once merges; the
        // usual single one needs no allocation.
        let mut key = String::new();
        let mut value: Option<&[u8]> = None;
        let mut more_values: Vec<&[u8]> = Vec::new();
        while !entry.is_empty() {
            let (tag, wire_type) = decode_key(&mut entry)?;
            match tag {
                1 => key = utf8(delimited(&mut entry, wire_type)?)?,
                2 => {
                    let bytes = delimited(&mut entry, wire_type)?;
                    match value {
                        None => value = Some(bytes),
                        Some(_) => more_values.push(bytes),
                    }
                }
                _ => skip_unknown(wire_type, tag, &mut entry)?,
            }
        }
        let mut slot = Slot::new();
        value
            .into_iter()
            .chain(more_values)
            .try_for_each(|bytes| merge_value(bytes, depth + 2, &mut slot))?;
        match slot.finish() {
            Ok(value) => {
                if let Some(unformed) = unformed {
                    unformed.entries.remove(&key);
                }
                map.insert(key, value);
            }
            Err(Fault::Json(error)) => {
                let error = error.under(&key);
                map.remove(&key);
                unformed.get_or_insert_default().entries.insert(key, error);
            }
            Err(fault) => return Err(fault),
        }
    }
    Ok(())
}

/// `ListValue { repeated Value values = 1; }`, appended to `items`; an item without a JSON
/// form is kept in `unformed` (a `null` holds its place).
fn merge_list(
    mut buf: &[u8],
    depth: u32,
    items: &mut Vec<Value>,
    unformed: &mut Option<Box<Unformed>>,
) -> Result<(), Fault> {
    enter(depth)?;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        if tag != 1 {
            skip_unknown(wire_type, tag, &mut buf)?;
            continue;
        }
        let bytes = delimited(&mut buf, wire_type)?;
        let mut slot = Slot::new();
        merge_value(bytes, depth + 1, &mut slot)?;
        match slot.finish() {
            Ok(item) => items.push(item),
            Err(Fault::Json(error)) => {
                let error = error.under(&items.len().to_string());
                unformed.get_or_insert_default().item.get_or_insert(error);
                items.push(Value::Null);
            }
            Err(fault) => return Err(fault),
        }
    }
    Ok(())
}

/// `Value { oneof kind { null_value = 1; number_value = 2; string_value = 3; bool_value = 4;
/// struct_value = 5; list_value = 6; } }`: the last member wins, and a struct or list that
/// follows one of its own kind merges into it.
fn merge_value(mut buf: &[u8], depth: u32, slot: &mut Slot) -> Result<(), Fault> {
    enter(depth)?;
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        match tag {
            1 | 4 => {
                check_wire_type(WireType::Varint, wire_type)?;
                let value = decode_varint(&mut buf)?;
                slot.set(if tag == 1 {
                    Value::Null
                } else {
                    Value::Bool(value != 0)
                });
            }
            2 => {
                check_wire_type(WireType::SixtyFourBit, wire_type)?;
                if buf.len() < 8 {
                    return Err("buffer underflow".into());
                }
                slot.set_number(buf.get_f64_le());
            }
            3 => slot.set(Value::String(utf8(delimited(&mut buf, wire_type)?)?)),
            5 => {
                let bytes = delimited(&mut buf, wire_type)?;
                if !slot.json.is_object() {
                    slot.set(Value::Object(Map::new()));
                }
                if let Value::Object(map) = &mut slot.json {
                    merge_struct(bytes, depth + 1, map, &mut slot.unformed)?;
                }
            }
            6 => {
                let bytes = delimited(&mut buf, wire_type)?;
                if !slot.json.is_array() {
                    slot.set(Value::Array(Vec::new()));
                }
                if let Value::Array(items) = &mut slot.json {
                    merge_list(bytes, depth + 1, items, &mut slot.unformed)?;
                }
            }
            _ => skip_unknown(wire_type, tag, &mut buf)?,
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "raw_message_tests.rs"]
mod tests;
