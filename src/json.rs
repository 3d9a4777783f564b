//! Conversions between `google.protobuf.Struct`/`Value` and `serde_json`, canonical JSON and
//! sha256 helpers.
//!
//! `google.protobuf.Value` carries every number as a double. A double that holds an integer
//! exactly (|x| <= 2^53) is turned back into a JSON integer, so a provider that expects `8`
//! never receives `8.0`. Integers beyond 2^53 cannot cross a `Struct` exactly; send them as
//! strings.

use prost_types::value::Kind;
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// The largest integer a double represents exactly (2^53).
pub const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// A `google.protobuf.Value` that has no JSON form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pointer}: {problem}")]
pub struct JsonConversionError {
    /// JSON pointer to the offending value ("" for the root).
    pub pointer: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Converts a `Struct` into a JSON object.
pub fn struct_to_json(value: &prost_types::Struct) -> Result<Value, JsonConversionError> {
    fields_to_json(&value.fields)
}

/// Converts a `Value` into JSON. A `Value` with no kind set becomes `null`.
pub fn value_to_json(value: &prost_types::Value) -> Result<Value, JsonConversionError> {
    value_to_json_at(value)
}

fn fields_to_json(
    fields: &std::collections::BTreeMap<String, prost_types::Value>,
) -> Result<Value, JsonConversionError> {
    let mut map = Map::new();
    for (key, field) in fields {
        let value = value_to_json_at(field).map_err(|error| error.under(key))?;
        map.insert(key.clone(), value);
    }
    Ok(Value::Object(map))
}

impl JsonConversionError {
    /// The same error seen from the parent of the value it names (`token` is the value's key
    /// or index there). Pointers are built on the way out of a failed conversion, so a
    /// successful one formats none.
    pub(crate) fn under(mut self, token: &str) -> Self {
        self.pointer = format!("/{}{}", escape_pointer_token(token), self.pointer);
        self
    }
}

fn value_to_json_at(value: &prost_types::Value) -> Result<Value, JsonConversionError> {
    Ok(match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::NumberValue(n)) => number_to_json(*n).ok_or_else(|| JsonConversionError {
            pointer: String::new(),
            problem: format!("{n} is not a finite number and has no JSON form"),
        })?,
        Some(Kind::StructValue(s)) => fields_to_json(&s.fields)?,
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    value_to_json_at(item).map_err(|error| error.under(&index.to_string()))
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// Turns a double into a JSON number: an integer when it holds one exactly, else a float.
pub(crate) fn number_to_json(n: f64) -> Option<Value> {
    if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_EXACT_INTEGER {
        // The guard above makes both casts exact.
        if n < 0.0 {
            return Some(Value::Number(Number::from(n as i64)));
        }
        return Some(Value::Number(Number::from(n as u64)));
    }
    Number::from_f64(n).map(Value::Number)
}

/// Converts a JSON value into a `google.protobuf.Value`.
pub fn json_to_value(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(json_object_to_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The bytes `value` takes encoded as the `google.protobuf.Value` [`json_to_value`] makes,
/// worked out without making it: an MCP tool's output is measured so before it is answered,
/// and the answer converts it once. (prost measures only messages it has.)
pub fn value_encoded_len(value: &Value) -> usize {
    // A length-delimited field of a one-byte key (every field here is numbered below 16).
    fn field(len: usize) -> usize {
        1 + prost::encoding::encoded_len_varint(len as u64) + len
    }
    match value {
        // An enum or a bool: a key and a one-byte varint.
        Value::Null | Value::Bool(_) => 2,
        // A double: a key and 8 bytes.
        Value::Number(_) => 9,
        Value::String(text) => field(text.len()),
        Value::Array(items) => field(
            items
                .iter()
                .map(|item| field(value_encoded_len(item)))
                .sum(),
        ),
        // Each entry of the map: its key (left out when empty, as proto3 leaves out defaults)
        // and its value (never the default, which has no kind).
        Value::Object(map) => field(
            map.iter()
                .map(|(key, value)| {
                    let key = if key.is_empty() { 0 } else { field(key.len()) };
                    field(key + field(value_encoded_len(value)))
                })
                .sum(),
        ),
    }
}

/// Converts a JSON object into a `Struct`.
pub fn json_object_to_struct(map: &Map<String, Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map
            .iter()
            .map(|(key, value)| (key.clone(), json_to_value(value)))
            .collect(),
    }
}

/// Converts a JSON value into a `Struct` when it is an object; anything else gives `None`.
pub fn json_to_struct(value: &Value) -> Option<prost_types::Struct> {
    value.as_object().map(json_object_to_struct)
}

/// Serializes JSON canonically: object keys sorted by their UTF-8 bytes, no insignificant
/// whitespace. Written here rather than relying on `serde_json::Map` ordering, which changes
/// when any crate in the build turns on serde_json's `preserve_order` feature.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes an object's entries, in the order given, as canonical JSON.
fn write_object<'a>(
    entries: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    out.write_all(b"{")?;
    for (index, (key, item)) in entries.enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        write_str(key, out)?;
        out.write_all(b":")?;
        write_canonical(item, out)?;
    }
    out.write_all(b"}")
}

/// Writes a value's canonical JSON to `out` (strings and numbers as serde_json writes them).
pub fn write_canonical(value: &Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    match value {
        // serde_json's map iterates in key order unless its `preserve_order` feature is on,
        // which nothing here turns on: then the entries are written as they come, and sorted
        // first otherwise.
        Value::Object(map) if map.keys().is_sorted() => write_object(map.iter(), out),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            write_object(entries.into_iter(), out)
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(item, out)?;
            }
            out.write_all(b"]")
        }
        Value::String(text) => write_str(text, out),
        scalar => Ok(serde_json::to_writer(out, scalar)?),
    }
}

/// Writes a string as serde_json does. serde_json escapes exactly the control characters, `"`
/// and `\`, looking up each byte as it copies; most strings hold none of them, and checking
/// that first (a loop with no early exit, which the compiler vectorises) lets them go out in
/// one piece: hashing the benchmark's 4 KB input went from 5.8 to 3.9 us (BENCHMARKS.md
/// item 19).
fn write_str(text: &str, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let plain = text.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if !plain {
        return Ok(serde_json::to_writer(out, text)?);
    }
    out.write_all(b"\"")?;
    out.write_all(text.as_bytes())?;
    out.write_all(b"\"")
}

/// An `io::Write` that feeds sha256, so canonical JSON can be hashed without building it.
#[derive(Debug, Default)]
pub struct Sha256Writer(Sha256);

impl Sha256Writer {
    /// Adds `bytes` to what is hashed.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The lowercase hex digest of everything written.
    pub fn finish_hex(self) -> String {
        lower_hex(&self.0.finalize().into())
    }
}

impl std::io::Write for Sha256Writer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    lower_hex(&Sha256::digest(bytes).into())
}

/// A digest in lowercase hex. `hex::encode` builds its string a `char` at a time, which showed
/// in the invocation profile (three digests per call); writing into a fixed buffer does not.
fn lower_hex(digest: &[u8; 32]) -> String {
    let mut text = [0u8; 64];
    hex::encode_to_slice(digest, &mut text).expect("64 bytes hold 32 bytes in hex");
    String::from_utf8(text.to_vec()).expect("hex digits are ASCII")
}

/// The lowercase hex sha256 of a value's canonical JSON.
pub fn canonical_sha256(value: &Value) -> String {
    let mut hasher = Sha256Writer::default();
    write_canonical(value, &mut hasher).expect("hashing cannot fail");
    hasher.finish_hex()
}

/// Escapes one JSON pointer reference token (RFC 6901).
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The length of a value's compact JSON text, counted as it is written, without keeping it.
/// Panics for a value serde_json cannot write (a map whose keys are not strings), which a
/// `Value` and toolplane's wire types never are.
pub fn compact_len(value: &(impl serde::Serialize + ?Sized)) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("counting cannot fail");
    count.0
}

/// How deeply objects and arrays nest in a value (a scalar is depth 0).
pub fn nesting_depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(nesting_depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(nesting_depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Worked out, the size is what prost encodes: every kind, empty keys and strings, and
    /// lengths on either side of a varint's byte boundaries.
    #[test]
    fn value_encoded_len_is_what_prost_encodes() {
        use prost::Message;
        let mut values = vec![
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-1.5e300),
            json!(""),
            json!([]),
            json!({}),
            json!({"": ""}),
            json!({"": null, "a": [null, 1, "x", {"b": []}]}),
            json!([[[[{"deep": {"er": [true]}}]]]]),
        ];
        for len in [127, 128, 16_383, 16_384, 2_097_152] {
            values.push(json!("x".repeat(len)));
            values.push(json!({"k".repeat(len): "v"}));
            values.push(json!([{"s": "y".repeat(len - 3)}]));
        }
        values.push(json!(vec![0; 100_000]));
        for value in values {
            assert_eq!(
                value_encoded_len(&value),
                json_to_value(&value).encoded_len(),
                "{}",
                crate::shown::shown_json(&value)
            );
        }
    }

    #[test]
    fn compact_len_is_the_length_of_the_compact_text() {
        let value = json!({"a": [1, "two", null], "é": {"b": true}});
        assert_eq!(compact_len(&value), value.to_string().len());
    }

    #[test]
    fn digests_are_lowercase_hex_of_sha256() {
        // FIPS 180-2's test vector for "abc".
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        let mut writer = Sha256Writer::default();
        std::io::Write::write_all(&mut writer, b"ab").expect("hashing cannot fail");
        std::io::Write::write_all(&mut writer, b"c").expect("hashing cannot fail");
        assert_eq!(writer.finish_hex(), abc);
        assert_eq!(canonical_sha256(&json!("abc")), sha256_hex(b"\"abc\""));
    }

    #[test]
    fn integral_doubles_become_json_integers() {
        let value =
            json_to_value(&json!({"n": 8, "neg": -3, "f": 1.5, "big": 18014398509481984.0}));
        let back = value_to_json(&value).expect("finite numbers convert");
        assert_eq!(back["n"], json!(8));
        assert!(back["n"].is_u64());
        assert_eq!(back["neg"], json!(-3));
        assert_eq!(back["f"], json!(1.5));
        assert!(
            back["big"].is_f64(),
            "beyond 2^53 a double is not an exact integer"
        );
    }

    #[test]
    fn non_finite_numbers_are_rejected_with_a_pointer() {
        let value = json_to_value(&json!({"a": [1, 2]}));
        let mut as_struct = match value.kind {
            Some(Kind::StructValue(s)) => s,
            _ => unreachable!("an object converts to a struct"),
        };
        as_struct.fields.insert(
            "x/y".into(),
            prost_types::Value {
                kind: Some(Kind::NumberValue(f64::NAN)),
            },
        );
        let error = struct_to_json(&as_struct).expect_err("NaN has no JSON form");
        assert_eq!(error.pointer, "/x~1y");
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let value = json!({"b": 1, "a": {"d": [1, {"z": true, "y": null}], "c": "x"}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":"x","d":[1,{"y":null,"z":true}]},"b":1}"#
        );
    }

    /// Strings come out exactly as serde_json writes them, whether or not they need escaping.
    #[test]
    fn canonical_strings_are_serde_json_strings() {
        let mut texts: Vec<String> = (0u8..=0x7f).map(|b| format!("a{}b", b as char)).collect();
        texts.extend(
            [
                "",
                "plain",
                "ünïcödé ✓",
                "\u{2028}",
                "tab\there",
                "quote\"",
                "back\\slash",
            ]
            .map(String::from),
        );
        texts.push("x".repeat(100) + "\n" + &"y".repeat(100));
        for text in texts {
            let expected = serde_json::to_string(&text).expect("a string serializes");
            assert_eq!(canonical_json(&Value::String(text.clone())), expected);
            let object = Value::Object(Map::from_iter([(text.clone(), Value::Null)]));
            assert_eq!(canonical_json(&object), format!("{{{expected}:null}}"));
        }
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!({"a": [{"b": 1}]})), 3);
    }
}
