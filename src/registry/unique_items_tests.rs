//! Unit tests of toolplane's `uniqueItems`: it answers as `jsonschema`'s own check does, and
//! items that all hash alike under `jsonschema`'s hash take it no longer than any others.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::super::compile::{jsonschema_options, validator_options};
use super::super::stop_check::watching;
use super::super::violations::{first_error, violation_message};

/// Both validators of `schema`: toolplane's and one with `jsonschema`'s own `uniqueItems`.
fn validators(schema: &Value) -> (jsonschema::Validator, jsonschema::Validator) {
    let ours = validator_options(schema).0.build(schema).expect("compiles");
    let theirs = jsonschema_options(schema)
        .0
        .build(schema)
        .expect("compiles");
    (ours, theirs)
}

use super::super::unique_items::hashing_alike_for_jsonschema as empty_array_trees;

/// The same answers as `jsonschema`'s, and the same reported error, over arrays of every kind
/// of item, small (checked pair by pair) and large (hashed), with and without duplicates.
#[test]
fn answers_as_jsonschema_does() {
    let schema = json!({"type": "array", "uniqueItems": true});
    let (ours, theirs) = validators(&schema);
    let many: Vec<Value> = (0..40).map(|n| json!(n)).collect();
    let mut cases = vec![
        json!([]),
        json!([1]),
        json!([1, 1.0]),
        json!([0, -0.0]),
        json!([1, "1", true, null, [1], {"1": 1}]),
        json!([{"a": 1, "b": 2}, {"b": 2, "a": 1}]),
        json!([{"a": 1, "b": 2}, {"a": 2, "b": 1}]),
        json!([[1, 2], [2, 1], [1, [2]]]),
        json!([[], {}, "", 0, false, null]),
        json!([18446744073709551615u64, 18446744073709551615.0]),
        json!([9007199254740993u64, 9007199254740992.0]),
        json!([-1, -1.0, 1]),
        json!("not an array"),
        Value::Array(many.clone()),
        Value::Array(empty_array_trees(100)),
    ];
    for duplicate in [json!(39), json!(39.0), json!([]), json!({"a": [1]})] {
        let mut items = many.clone();
        items.push(json!({"a": [1]}));
        items.push(duplicate);
        cases.push(Value::Array(items));
    }
    let mut trees = empty_array_trees(100);
    trees.push(trees[37].clone());
    cases.push(Value::Array(trees));
    for case in &cases {
        assert_eq!(ours.is_valid(case), theirs.is_valid(case), "{case}");
        let reported = |validator| {
            first_error(validator, case)
                .map(|error| (error.instance_path().to_string(), violation_message(&error)))
        };
        assert_eq!(reported(&ours), reported(&theirs), "{case}");
    }
    assert!(!ours.is_valid(&cases[2]) && !ours.is_valid(cases.last().expect("a case")));
    assert!(ours.is_valid(&cases[13]) && ours.is_valid(&cases[14]));
}

/// `uniqueItems: false`, and `uniqueItems` under a property, in draft 2020-12 as in draft 7.
#[test]
fn false_asserts_nothing_and_every_draft_takes_it() {
    for schema in [
        json!({"uniqueItems": false}),
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "uniqueItems": false}),
    ] {
        assert!(validators(&schema).0.is_valid(&json!([1, 1])));
    }
    for draft in [
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2020-12/schema",
    ] {
        let schema = json!({"$schema": draft, "properties": {"tags": {"uniqueItems": true}}});
        let (ours, _) = validators(&schema);
        let input = json!({"tags": ["a", "a"]});
        let error = first_error(&ours, &input).expect("a duplicate");
        assert_eq!(error.instance_path().to_string(), "/tags");
        assert_eq!(
            violation_message(&error),
            r#"["a","a"] has non-unique elements"#
        );
    }
}

/// Distinct items that all hash alike under `jsonschema`'s hash are checked in about the time
/// any items are: 10,000 arrays of empty arrays (630 KB) took `jsonschema`'s check 1.2 s in
/// a release build, quadratic in their number; here they take milliseconds. Measured against
/// as many numbers, so that a slow machine slows both.
#[test]
fn items_that_hash_alike_for_jsonschema_take_no_longer() {
    let schema = json!({"uniqueItems": true});
    let (ours, _) = validators(&schema);
    let trees = Value::Array(empty_array_trees(10_000));
    let numbers = Value::Array((0..10_000).map(|n| json!(n)).collect());
    let timed = |value: &Value| {
        let started = Instant::now();
        assert!(ours.is_valid(value));
        started.elapsed()
    };
    let (trees_took, numbers_took) = (timed(&trees), timed(&numbers));
    // Generous: the trees are bigger than numbers (63 bytes each).
    assert!(
        trees_took < numbers_took * 50 + Duration::from_millis(200),
        "{trees_took:?} against {numbers_took:?} for numbers"
    );
}

/// A check whose work has been given up stops (and answers wrongly, for nobody).
#[test]
fn a_given_up_check_stops() {
    let schema = json!({"uniqueItems": true});
    let (ours, _) = validators(&schema);
    let items = Value::Array((0..10_000).map(|n| json!(n)).collect());
    let given_up = Arc::new(AtomicBool::new(true));
    assert!(!watching(&given_up, || ours.is_valid(&items)));
    assert!(ours.is_valid(&items));
}
