//! Whether a `RegisterService` request is large: worked on off the serving threads, as a
//! large input is (`invoke::heavy`).
//!
//! Validating a registration compiles every schema and checks its patterns and its cost: in a
//! release build, a registration of 3.8 MB took 0.45 s, about half of it validation, during
//! which the serving thread it ran on served no other call (BENCHMARKS.md, item 49). Its size is
//! counted as its text would be (names, strings and keys by their bytes, numbers as 8), and
//! the count stops at the bound, so a small registration costs a walk of itself, a large one a
//! walk of its first [`OFF_THREAD_INPUT_BYTES`].

use prost_types::value::Kind;
use prost_types::{Struct, Value};

use crate::invoke::heavy::OFF_THREAD_INPUT_BYTES;
use crate::pb;

/// Whether `registration` holds [`OFF_THREAD_INPUT_BYTES`] or more of tool definitions.
pub fn is_large(registration: Option<&pb::ServiceRegistration>) -> bool {
    let Some(registration) = registration else {
        return false;
    };
    let mut left = OFF_THREAD_INPUT_BYTES;
    registration.tools.iter().any(|tool| {
        spend(&mut left, tool.tool_name.len() + tool.description.len())
            || [&tool.tool_schema, &tool.output_schema]
                .into_iter()
                .flatten()
                .any(|schema| struct_spends(schema, &mut left))
    })
}

/// Takes `bytes` from `left`; whether that used it up.
fn spend(left: &mut usize, bytes: usize) -> bool {
    *left = left.saturating_sub(bytes);
    *left == 0
}

fn struct_spends(fields: &Struct, left: &mut usize) -> bool {
    (fields.fields.iter()).any(|(key, value)| spend(left, key.len()) || value_spends(value, left))
}

fn value_spends(value: &Value, left: &mut usize) -> bool {
    match &value.kind {
        Some(Kind::StringValue(text)) => spend(left, text.len()),
        Some(Kind::StructValue(fields)) => struct_spends(fields, left),
        Some(Kind::ListValue(list)) => list.values.iter().any(|item| value_spends(item, left)),
        Some(Kind::NumberValue(_)) => spend(left, 8),
        Some(Kind::BoolValue(_) | Kind::NullValue(_)) | None => spend(left, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registration(schemas: Vec<serde_json::Value>) -> pb::ServiceRegistration {
        pb::ServiceRegistration {
            tools: (schemas.into_iter().enumerate())
                .map(|(n, schema)| pb::ToolRegistration {
                    tool_name: format!("tool_{n}"),
                    tool_schema: crate::json::json_to_struct(&schema),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_schemas_text_is_counted_up_to_the_bound() {
        assert!(!is_large(None));
        let small = registration(vec![json!({"type": "object"}); 10]);
        assert!(!is_large(Some(&small)));
        // One schema of 20 KB, in a list of strings, in a nested object, or in keys.
        let long = "x".repeat(20_000);
        let keys: serde_json::Map<_, _> = (0..2_000)
            .map(|n| (format!("key_{n:05}"), json!(null)))
            .collect();
        for schema in [
            json!({"enum": [long]}),
            json!({"properties": {"a": {"properties": {"b": {"description": long}}}}}),
            json!({"properties": keys}),
            json!({"enum": vec![1.5; 2_100]}),
        ] {
            assert!(is_large(Some(&registration(vec![schema]))));
        }
        // Many tools of small schemas add up.
        let many = registration(vec![json!({"description": "x".repeat(100)}); 200]);
        assert!(is_large(Some(&many)));
        let fewer = registration(vec![json!({"description": "x".repeat(100)}); 100]);
        assert!(!is_large(Some(&fewer)));
    }
}
