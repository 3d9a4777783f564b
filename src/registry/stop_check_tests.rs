use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::*;
use crate::registry::validate::{RegistrationLimits, compile_schema, violation_message};

fn flag(set: bool) -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(set))
}

#[test]
fn the_flag_is_the_watched_work_s_own() {
    assert!(!is_given_up(), "no work is watched");
    let outer = flag(false);
    watching(&outer, || {
        assert!(!is_given_up());
        outer.store(true, Ordering::Relaxed);
        assert!(is_given_up());
        watching(&flag(false), || {
            assert!(!is_given_up(), "the inner work's flag")
        });
        assert!(is_given_up(), "the outer work's flag is back");
    });
    assert!(!is_given_up(), "no work is watched after it");

    let panicked = std::panic::catch_unwind(|| watching(&flag(true), || panic!("in the work")));
    assert!(panicked.is_err());
    assert!(!is_given_up(), "a panic in the work puts the flag back too");
}

#[test]
fn the_check_goes_in_every_subschema_but_cheap_ones_and_nowhere_else() {
    let schema = json!({
        "type": "object",
        "properties": {
            "enum": {"items": [{"type": "string"}], "additionalItems": false},
            "tags": {"type": "array", "items": {"enum": [{"a": 1}], "default": {"b": 2}}},
            "step": {"type": "number", "multipleOf": 0.1}
        },
        "patternProperties": {"^x": {"const": {"c": 3}, "format": "email"}},
        "additionalProperties": {"anyOf": [{"type": "null"}, {"not": {"type": "object"}}]},
        "dependencies": {"a": ["b"], "c": {"required": ["d"]}},
        "definitions": {"unused": {"examples": [{"e": 4}], "anyOf": [true]}},
        "x-unknown": {"properties": {"f": {}}}
    });
    let checked = with_stop_checks(&schema);
    let check = |pointer: &str| {
        let at = checked
            .pointer(pointer)
            .expect("the pointer is in the schema");
        at.get(KEYWORD).cloned()
    };
    for subschema in [
        "",
        "/properties/enum",
        "/properties/tags",
        "/properties/tags/items",
        "/properties/step",
        "/patternProperties/^x",
        "/additionalProperties",
        "/additionalProperties/anyOf/1",
        "/definitions/unused",
        "/x-unknown",
    ] {
        assert_eq!(check(subschema), Some(json!(true)), "at {subschema:?}");
    }
    for cheap_subschema in [
        "/properties/enum/items/0",
        "/additionalProperties/anyOf/0",
        "/additionalProperties/anyOf/1/not",
        "/dependencies/c",
        "/x-unknown/properties/f",
    ] {
        assert_eq!(check(cheap_subschema), None, "at {cheap_subschema:?}");
    }
    for not_a_subschema in [
        "/properties",
        "/patternProperties",
        "/dependencies",
        "/definitions",
        "/properties/tags/items/enum/0",
        "/properties/tags/items/default",
        "/patternProperties/^x/const",
        "/definitions/unused/examples/0",
    ] {
        assert_eq!(check(not_a_subschema), None, "at {not_a_subschema:?}");
    }
    assert_eq!(
        without_stop_checks(&checked),
        schema,
        "nothing else changed"
    );
}

/// The compiled schema answers as the schema does (compiled without the checks), in each
/// draft and for the keywords whose values are names or data.
#[test]
fn a_schema_with_checks_answers_as_without() {
    let cases: Vec<(Value, Vec<Value>)> = vec![
        (
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"enum": [{"k": 1}, "s"]}},
                "patternProperties": {"^x-": {"type": "string"}},
                "additionalProperties": false,
                "dependencies": {"a": ["b"]},
                "required": ["a"]
            }),
            vec![
                json!({"a": 1, "b": {"k": 1}}),
                json!({"a": 1, "b": "s", "x-y": "z"}),
                json!({"a": 1}),
                json!({"a": 1, "b": {"k": 1, KEYWORD: true}}),
                json!({"a": 1, "b": "s", KEYWORD: true}),
                json!({"a": 1, "b": "s", "x-y": 2}),
            ],
        ),
        (
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": {"item": {"type": "object", "properties": {"n": {"const": 1}}}},
                "type": "array",
                "prefixItems": [{"type": "string"}],
                "items": {"$ref": "#/$defs/item"},
                "contains": {"type": "object"}
            }),
            vec![
                json!(["a", {"n": 1}]),
                json!(["a", {"n": 2}]),
                json!(["a"]),
                json!([1, {"n": 1}]),
            ],
        ),
        (
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"kind": {"type": "string"}},
                "dependentRequired": {"kind": ["size"]},
                "dependentSchemas": {"size": {"properties": {"size": {"minimum": 1}}}},
                "if": {"properties": {"kind": {"const": "box"}}},
                "then": {"required": ["depth"]},
                "unevaluatedProperties": false
            }),
            vec![
                json!({"kind": "bag", "size": 2}),
                json!({"kind": "box", "size": 2}),
                json!({"kind": "box", "size": 2, "depth": 1}),
                json!({"kind": "bag"}),
                json!({"kind": "bag", "size": 0}),
                json!({"kind": "bag", "size": 2, KEYWORD: true}),
            ],
        ),
        (
            json!({"items": {"not": {"properties": {"a": {"enum": [1, 2]}}, "required": ["a"]}}}),
            vec![
                json!([{"a": 1}]),
                json!([{"a": 3}, {"b": 1}]),
                json!([{"a": 2}, 5]),
            ],
        ),
        (
            json!({"type": "object", KEYWORD: false, "properties": {KEYWORD: {"type": "integer"}}}),
            vec![json!({KEYWORD: 1}), json!({KEYWORD: "one"}), json!({})],
        ),
    ];
    for (schema, instances) in cases {
        let plain = jsonschema::options()
            .with_draft(jsonschema::Draft::default().detect(&schema))
            .build(&schema)
            .expect("the schema compiles");
        let checked = compile_schema(&schema, &RegistrationLimits::default())
            .expect("the schema compiles with checks");
        for instance in instances {
            assert_eq!(
                checked.is_valid(&instance),
                plain.is_valid(&instance),
                "{instance} against {schema}"
            );
            // What a caller is told (the validator's words quote a `not`'s subschema, which
            // in the compiled copy holds a check).
            let errors = |validator: &jsonschema::Validator| {
                validator
                    .iter_errors(&instance)
                    .map(|error| (error.instance_path().to_string(), violation_message(&error)))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                errors(&checked),
                errors(&plain),
                "{instance} against {schema}"
            );
        }
    }
}

/// Once its work is given up, a validation fails at the first subschema it applies, nested or
/// not, and reports why.
#[test]
fn a_validation_given_up_stops() {
    let schema = json!({
        "type": "array",
        "items": {"anyOf": [{"const": 1}, {"type": "object", "properties": {"n": {"type": "integer"}}}]}
    });
    let validator = compile_schema(&schema, &RegistrationLimits::default()).expect("compiles");
    let input = json!([1, {"n": 2}, 1]);
    assert!(
        validator.is_valid(&input),
        "not watched: the schema's own answer"
    );
    assert!(watching(&flag(false), || validator.is_valid(&input)));
    assert!(!watching(&flag(true), || validator.is_valid(&input)));
    let errors: Vec<String> = watching(&flag(true), || {
        validator
            .iter_errors(&input)
            .map(|error| error.to_string())
            .collect()
    });
    assert!(
        errors.iter().any(|error| error.contains("no longer waits")),
        "{errors:?}"
    );
}
