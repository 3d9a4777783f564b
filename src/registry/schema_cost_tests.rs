use serde_json::{Value, json};

use super::*;

/// Checks `schema` in the draft `compile_schema` compiles it in: Draft 7 unless it names one.
fn check(schema: &Value) -> Result<(), String> {
    let draft = match schema.get("$schema") {
        None => Draft::Draft7,
        Some(_) => Draft::default().detect(schema),
    };
    check_evaluation_cost(schema, draft)
}

fn check_in(schema: &Value, draft: Draft) -> Result<(), String> {
    check_evaluation_cost(schema, draft)
}

/// `levels` definitions, each referring twice to the next: the last one is evaluated
/// 2^levels times for every value.
fn doubling(levels: usize) -> Value {
    let mut definitions = serde_json::Map::new();
    for level in 0..levels {
        let next = json!({ "$ref": format!("#/definitions/a{}", level + 1) });
        definitions.insert(format!("a{level}"), json!({ "allOf": [next, next] }));
    }
    definitions.insert(format!("a{levels}"), json!({ "type": "object" }));
    json!({ "definitions": definitions, "$ref": "#/definitions/a0" })
}

/// How many errors the validator finds in `input`: one per failing evaluation of the leaf
/// subschema, so it shows how many times validation evaluated it (a count, not a timing).
fn errors_found(schema: &Value, input: &Value) -> usize {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .build(schema)
        .expect("compiles")
        .iter_errors(input)
        .count()
}

/// A chain of doubling references is refused once it passes the maximum, and the error says
/// why; a short one is accepted.
#[test]
fn doubling_references_are_refused() {
    assert_eq!(
        check(&doubling(11)),
        Ok(()),
        "8,189 evaluations are within the bound"
    );
    let error = check(&doubling(12)).expect_err("16,381 evaluations");
    assert!(error.contains("subschemas at its top level"), "{error}");
    assert!(error.contains("more than 10000 subschemas"), "{error}");
    assert!(error.contains("exponentially"), "{error}");
    let error = check(&doubling(40)).expect_err("would take hours to validate");
    assert!(error.contains("at its top level"), "{error}");
}

/// What the bound is there for: validation evaluates the last definition 2^levels times (each
/// evaluation of it on a wrong-typed input is an error of its own).
#[test]
fn the_refused_schemas_do_exponential_work() {
    assert_eq!(errors_found(&doubling(6), &json!(1)), 64);
    assert_eq!(errors_found(&doubling(12), &json!(1)), 4096);
    assert!(check(&doubling(12)).is_err());
}

/// A recursive reference applied twice under one property doubles the work with each level of
/// the input: refused, naming the place where the bound is passed.
#[test]
fn doubling_recursion_under_a_property_is_refused() {
    let schema = json!({
        "type": "object",
        "properties": { "x": { "allOf": [{ "$ref": "#" }, { "$ref": "#" }] } }
    });
    let error = check(&schema).expect_err("2^depth evaluations at depth n");
    // 5 * 2^(n - 1) evaluations at /x repeated n times: more than 10,000 at n = 12.
    assert!(
        error.contains(&format!("at {}:", "/x".repeat(12))),
        "stops at the first place over the bound: {error}"
    );

    let mut input = json!(1);
    for _ in 0..12 {
        input = json!({ "x": input });
    }
    assert_eq!(
        errors_found(&schema, &input),
        4096,
        "2^12 evaluations of the leaf"
    );
}

/// Recursive schemas that validate each value a bounded number of times pass: a tree that
/// recurses under different names, a JSON-like union, a linked list.
#[test]
fn ordinary_recursion_is_accepted() {
    let tree = json!({
        "type": "object",
        "properties": {
            "value": { "type": "integer" },
            "left": { "$ref": "#" },
            "right": { "$ref": "#" }
        }
    });
    assert_eq!(check(&tree), Ok(()));
    let json_like = json!({
        "definitions": {
            "value": { "anyOf": [
                { "type": ["string", "number", "boolean", "null"] },
                { "type": "array", "items": { "$ref": "#/definitions/value" } },
                { "type": "object", "additionalProperties": { "$ref": "#/definitions/value" } }
            ] }
        },
        "$ref": "#/definitions/value"
    });
    assert_eq!(check(&json_like), Ok(()));
    let filter = json!({
        "$defs": {
            "filter": { "oneOf": [
                { "type": "object", "properties": { "and": { "type": "array", "items": { "$ref": "#/$defs/filter" } } }, "required": ["and"] },
                { "type": "object", "properties": { "or": { "type": "array", "items": { "$ref": "#/$defs/filter" } } }, "required": ["or"] },
                { "type": "object", "properties": { "not": { "$ref": "#/$defs/filter" } }, "required": ["not"] },
                { "type": "object", "properties": { "field": { "type": "string" }, "equals": {} } }
            ] }
        },
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": { "where": { "$ref": "#/$defs/filter" } }
    });
    assert_eq!(check_in(&filter, Draft::Draft202012), Ok(()));
}

/// A small loop of references that never steps into the input is accepted, and checking it
/// ends.
#[test]
fn a_small_loop_in_place_is_accepted() {
    let schema = json!({
        "definitions": {
            "a": { "allOf": [{ "$ref": "#/definitions/b" }, { "$ref": "#/definitions/b" }] },
            "b": { "anyOf": [{ "$ref": "#/definitions/a" }, { "type": "object" }] }
        },
        "$ref": "#/definitions/a"
    });
    assert_eq!(check(&schema), Ok(()));
    assert_eq!(check(&json!({ "$ref": "#" })), Ok(()));
}

/// References through `$id`s resolve as validation resolves them, so they cannot hide the
/// doubling; and a union of many variants sharing a base stays within the bound.
#[test]
fn references_through_ids_are_followed() {
    let mut definitions = serde_json::Map::new();
    for level in 0..12 {
        let next = json!({ "$ref": format!("level{}.json", level + 1) });
        definitions.insert(
            format!("a{level}"),
            json!({ "$id": format!("level{level}.json"), "allOf": [next, next] }),
        );
    }
    definitions.insert(
        "a12".into(),
        json!({ "$id": "level12.json", "type": "object" }),
    );
    let schema = json!({
        "$id": "https://schemas.example.com/tools/root.json",
        "definitions": definitions,
        "$ref": "level0.json"
    });
    let error = check(&schema).expect_err("the doubling goes through $ids");
    assert!(error.contains("at its top level"), "{error}");

    let variants: Vec<Value> = (0..100)
        .map(|n| json!({ "allOf": [{ "$ref": "#/definitions/base" }, { "properties": { "kind": { "const": n } } }] }))
        .collect();
    let union = json!({
        "definitions": { "base": { "type": "object", "required": ["kind"] } },
        "oneOf": variants
    });
    assert_eq!(check(&union), Ok(()), "about 400 evaluations");
}

/// Evaluating every subschema once is never refused: a flat union wider than the bound passes
/// (the schema size limit bounds it), while the same number reached by doubling does not.
#[test]
fn a_schema_wider_than_the_bound_may_evaluate_all_it_has() {
    let constants: Vec<Value> = (0..12_000).map(|n| json!({ "const": n })).collect();
    assert_eq!(check(&json!({ "oneOf": constants })), Ok(()));
    let error = check(&doubling(14)).expect_err("65,533 evaluations of 43 subschemas");
    assert!(error.contains("more than 10000"), "{error}");
}

/// Drafts 4 to 7 ignore the siblings of `$ref`, so a doubling there costs nothing; from 2019-09
/// on it applies, and is refused.
#[test]
fn ref_siblings_count_only_where_they_apply() {
    let doubled = doubling(12);
    let definitions = doubled["definitions"].clone();
    let schema = json!({
        "definitions": definitions,
        "$ref": "#/definitions/a12",
        "allOf": [{ "$ref": "#/definitions/a0" }]
    });
    assert_eq!(check_in(&schema, Draft::Draft7), Ok(()));
    assert!(check_in(&schema, Draft::Draft202012).is_err());
}

/// Array items, pattern properties and dynamic references are followed too.
#[test]
fn items_patterns_and_dynamic_refs_are_followed() {
    let items = json!({
        "type": "array",
        "items": { "anyOf": [{ "$ref": "#" }, { "$ref": "#" }] }
    });
    let error = check(&items).expect_err("doubling per level of nested arrays");
    assert!(error.contains("at /*/*/*"), "{error}");

    let patterns = json!({
        "patternProperties": { "^a": { "allOf": [{ "$ref": "#" }, { "$ref": "#" }] } }
    });
    assert!(check(&patterns).is_err());

    let dynamic = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$dynamicAnchor": "node",
        "type": "object",
        "properties": {
            "child": { "allOf": [{ "$dynamicRef": "#node" }, { "$dynamicRef": "#node" }] }
        }
    });
    let error = check_in(&dynamic, Draft::Draft202012).expect_err("doubling per level");
    assert!(error.contains("at /child/child"), "{error}");
}

/// Flat schemas of any width pass, however many properties they name.
#[test]
fn ordinary_schemas_pass() {
    let properties: serde_json::Map<String, Value> = (0..2000)
        .map(|n| {
            (
                format!("field_{n}"),
                json!({ "type": "string", "maxLength": 64 }),
            )
        })
        .collect();
    let flat = json!({ "type": "object", "properties": properties, "additionalProperties": false });
    assert_eq!(check(&flat), Ok(()));
    assert_eq!(check(&json!({})), Ok(()));
    assert_eq!(check(&json!(true)), Ok(()));
}

/// `levels` definitions in one loop at one place: each refers twice to the next, and the last
/// back to the first two and to `leaf` (a subschema of its own).
fn doubling_loop(levels: usize, leaf: Value) -> Value {
    let reference = |level: usize| json!({ "$ref": format!("#/definitions/a{level}") });
    let mut definitions = serde_json::Map::new();
    for level in 0..levels - 1 {
        let next = reference(level + 1);
        definitions.insert(format!("a{level}"), json!({ "allOf": [next, next] }));
    }
    definitions.insert(
        format!("a{}", levels - 1),
        json!({ "allOf": [reference(1), reference(0), leaf] }),
    );
    json!({ "definitions": definitions, "$ref": "#/definitions/a0" })
}

/// A loop of references at one place is followed by validation further than to the first
/// subschema met again (the validator guards only the references it found pointing back): six
/// definitions in a loop, which stopping at the first repeat counted about 200 evaluations
/// for, evaluate the leaf over 30,000 times. Such a loop is refused; fuzzing found one of
/// eight that took seconds per value (`fuzz/seeds/schema_registration/loop_of_eight_definitions`).
#[test]
fn a_loop_in_place_is_counted_as_far_as_validation_follows_it() {
    let schema = doubling_loop(6, json!({ "type": "object" }));
    assert!(errors_found(&schema, &json!(1)) > 30_000);
    let error = check(&schema).expect_err("more than the bound");
    assert!(error.contains("at its top level"), "{error}");
}
