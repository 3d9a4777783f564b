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
    fields_to_json(&value.fields, "")
}

/// Converts a `Value` into JSON. A `Value` with no kind set becomes `null`.
pub fn value_to_json(value: &prost_types::Value) -> Result<Value, JsonConversionError> {
    value_to_json_at(value, "")
}

fn fields_to_json(
    fields: &std::collections::BTreeMap<String, prost_types::Value>,
    pointer: &str,
) -> Result<Value, JsonConversionError> {
    let mut map = Map::with_capacity(fields.len());
    for (key, field) in fields {
        let child = format!("{pointer}/{}", escape_pointer_token(key));
        map.insert(key.clone(), value_to_json_at(field, &child)?);
    }
    Ok(Value::Object(map))
}

fn value_to_json_at(
    value: &prost_types::Value,
    pointer: &str,
) -> Result<Value, JsonConversionError> {
    Ok(match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::NumberValue(n)) => number_to_json(*n).ok_or_else(|| JsonConversionError {
            pointer: pointer.to_owned(),
            problem: format!("{n} is not a finite number and has no JSON form"),
        })?,
        Some(Kind::StructValue(s)) => fields_to_json(&s.fields, pointer)?,
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .iter()
                .enumerate()
                .map(|(index, item)| value_to_json_at(item, &format!("{pointer}/{index}")))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// Turns a double into a JSON number: an integer when it holds one exactly, else a float.
fn number_to_json(n: f64) -> Option<Value> {
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
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The lowercase hex sha256 of a value's canonical JSON.
pub fn canonical_sha256(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

/// Escapes one JSON pointer reference token (RFC 6901).
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
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

    #[test]
    fn depth_counts_containers() {
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!({"a": [{"b": 1}]})), 3);
    }
}
