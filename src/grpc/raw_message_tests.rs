//! Every reading is checked against prost's decoder followed by `json::struct_to_json` (or
//! `value_to_json`): the same JSON, or an error where that path fails.

use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_types::value::Kind as PbKind;
use serde_json::json;

use super::*;
use crate::grpc::damage::{StrictRequest, mutated, strictly_valid, xorshift};
use crate::json::{json_to_struct, json_to_value, struct_to_json, value_to_json};
use crate::pb;

/// A length-delimited field.
fn delimited_field(tag: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::LengthDelimited, &mut out);
    encode_varint(bytes.len() as u64, &mut out);
    out.extend_from_slice(bytes);
    out
}

fn number_field(tag: u32, n: f64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::SixtyFourBit, &mut out);
    out.extend_from_slice(&n.to_le_bytes());
    out
}

fn varint_field(tag: u32, value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::Varint, &mut out);
    encode_varint(value, &mut out);
    out
}

fn entry(key: &str, value: &[u8]) -> Vec<u8> {
    delimited_field(
        1,
        &[
            delimited_field(1, key.as_bytes()),
            delimited_field(2, value),
        ]
        .concat(),
    )
}

/// What prost and `struct_to_json` make of `bytes` as `InvokeToolRequest.input` (so nesting
/// is counted as it is for a real request): `Err` when prost cannot decode it.
fn through_prost(bytes: &[u8]) -> Result<Result<Value, JsonConversionError>, ()> {
    let request =
        pb::InvokeToolRequest::decode(delimited_field(4, bytes).as_slice()).map_err(drop)?;
    Ok(struct_to_json(&request.input.unwrap_or_default()))
}

/// Checks that both readings agree, and returns ours.
fn agree(bytes: &[u8]) -> Result<Value, RawJsonError> {
    let ours = struct_bytes_to_json(bytes);
    match (through_prost(bytes), &ours) {
        (Err(()), Err(RawJsonError::Malformed { .. })) => {}
        (Ok(Ok(theirs)), Ok(mine)) => assert_eq!(&theirs, mine),
        (Ok(Err(theirs)), Err(RawJsonError::NoJsonForm(mine))) => assert_eq!(&theirs, mine),
        (theirs, mine) => panic!("prost path gave {theirs:?}, raw reading gave {mine:?}"),
    }
    ours
}

#[test]
fn ordinary_inputs_read_as_prost_reads_them() {
    let inputs = [
        json!({}),
        json!({"q": "weather in Paris", "limit": 8, "ratio": 0.25, "exact": true, "none": null}),
        json!({"nested": {"a": [1, 2, {"b": []}], "c": {}}, "neg": -3, "big": 9007199254740992u64}),
        json!({"ünï/cödé~": "✓", "": "empty key", "tilde": "~0"}),
        json!({"list": [[[]], [null, false, "x", 1.5e300]]}),
    ];
    for input in inputs {
        let bytes = json_to_struct(&input).expect("an object").encode_to_vec();
        assert_eq!(agree(&bytes).expect("reads"), input);
    }
}

/// A random JSON value of every kind, nesting a few levels.
fn random_value(next: &mut impl FnMut() -> u64, depth: u32) -> Value {
    match next() % if depth > 4 { 4 } else { 6 } {
        0 => Value::Null,
        1 => Value::Bool(next().is_multiple_of(2)),
        2 => json!((next() % 2_000_000) as f64 / 8.0 - 100_000.0),
        3 => Value::String(format!("s{}", next() % 1000)),
        4 => Value::Array(
            (0..next() % 4)
                .map(|_| random_value(next, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..next() % 4)
                .map(|_| (format!("k{}", next() % 10), random_value(next, depth + 1)))
                .collect(),
        ),
    }
}

/// A random JSON object, encoded as a `google.protobuf.Struct`.
fn random_struct_bytes(next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut object = Map::new();
    for _ in 0..next() % 6 {
        object.insert(format!("f{}", next() % 10), random_value(next, 1));
    }
    json_to_struct(&Value::Object(object))
        .expect("an object")
        .encode_to_vec()
}

#[test]
fn random_structs_read_as_prost_reads_them() {
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..300 {
        // (Integral doubles read back as integers, so the JSON need not equal the input.)
        agree(&random_struct_bytes(&mut next)).expect("reads");
    }
}

/// Damaged bytes, as a broken or hostile caller or provider sends them: the reading never
/// panics, accepts exactly what prost accepts (but for the entries only prost's lenient map
/// decoder takes) and reads it as prost does, and refuses strictly valid protobuf only for a
/// value without a JSON form. (Which fault is named may differ when there are several; see
/// the module docs.)
#[test]
fn damaged_bytes_are_read_as_prost_reads_them_or_refused() {
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    let (mut read, mut refused) = (0, 0);
    for _ in 0..5000 {
        let mut bytes = random_struct_bytes(&mut next);
        for _ in 0..1 + next() % 3 {
            bytes = mutated(&bytes, &mut next);
        }
        match (through_prost(&bytes), struct_bytes_to_json(&bytes)) {
            (Ok(Ok(theirs)), Ok(mine)) => {
                assert_eq!(theirs, mine, "{bytes:?}");
                read += 1;
            }
            (Err(()), Err(_)) | (Ok(Err(_)), Err(RawJsonError::NoJsonForm(_))) => refused += 1,
            // prost's map decoder reads an entry whatever its wire type says; protobuf calls
            // that malformed, and so does this reading.
            (Ok(_), Err(RawJsonError::Malformed { .. }))
                if !strictly_valid::<StrictRequest>(&delimited_field(4, &bytes)) =>
            {
                refused += 1;
            }
            (theirs, mine) => {
                panic!("{bytes:?}: prost path gave {theirs:?}, raw reading gave {mine:?}")
            }
        }
        let as_value = |bytes: &[u8]| {
            prost_types::Value::decode(bytes)
                .map(|value| value_to_json(&value))
                .map_err(drop)
        };
        match (as_value(&bytes), value_bytes_to_json(&bytes)) {
            (Ok(Ok(theirs)), Ok(mine)) => assert_eq!(theirs, mine, "{bytes:?}"),
            (Err(()), Err(_)) | (Ok(Err(_)), Err(RawJsonError::NoJsonForm(_))) => {}
            (theirs, mine) => {
                panic!(
                    "{bytes:?} as a Value: prost path gave {theirs:?}, raw reading gave {mine:?}"
                )
            }
        }
    }
    // Both outcomes are exercised, so the comparison above is not vacuous.
    assert!(read > 50 && refused > 50, "read {read}, refused {refused}");
}

#[test]
fn wire_corners_follow_protobuf_rules() {
    let string = |s: &str| delimited_field(3, s.as_bytes());
    let cases: Vec<Vec<u8>> = vec![
        // The last of a repeated key wins.
        [entry("a", &string("first")), entry("a", &string("second"))].concat(),
        // The value before the key.
        delimited_field(
            1,
            &[delimited_field(2, &string("v")), delimited_field(1, b"k")].concat(),
        ),
        // An entry without a value, and one without a key.
        delimited_field(1, &delimited_field(1, b"k")),
        delimited_field(1, &delimited_field(2, &string("v"))),
        // The last oneof member wins; a later member replaces a non-finite number.
        entry("a", &[number_field(2, 1.0), string("x")].concat()),
        entry(
            "a",
            &[number_field(2, f64::NAN), varint_field(4, 1)].concat(),
        ),
        entry("a", &[string("x"), varint_field(1, 0)].concat()),
        // A struct or list after one of its own kind merges into it.
        entry(
            "a",
            &[
                delimited_field(5, &entry("x", &string("1"))),
                delimited_field(5, &entry("y", &string("2"))),
            ]
            .concat(),
        ),
        entry(
            "a",
            &[
                delimited_field(6, &delimited_field(1, &string("1"))),
                delimited_field(6, &delimited_field(1, &string("2"))),
            ]
            .concat(),
        ),
        // ...but not across another member read between them.
        entry(
            "a",
            &[
                delimited_field(5, &entry("x", &string("1"))),
                number_field(2, 3.0),
                delimited_field(5, &entry("y", &string("2"))),
            ]
            .concat(),
        ),
        entry(
            "a",
            &[
                delimited_field(6, &delimited_field(1, &string("1"))),
                number_field(2, 3.0),
                delimited_field(6, &delimited_field(1, &string("2"))),
            ]
            .concat(),
        ),
        // A value field twice in one entry merges too.
        delimited_field(
            1,
            &[
                delimited_field(1, b"k"),
                delimited_field(2, &string("x")),
                delimited_field(2, &varint_field(4, 1)),
            ]
            .concat(),
        ),
        // Unknown fields everywhere are skipped.
        [
            varint_field(9, 7),
            entry(
                "a",
                &[number_field(12, 1.0), string("x"), varint_field(20, 1)].concat(),
            ),
            delimited_field(1, &[delimited_field(1, b"b"), varint_field(7, 1)].concat()),
            entry(
                "c",
                &delimited_field(6, &[varint_field(3, 1), delimited_field(1, &[])].concat()),
            ),
        ]
        .concat(),
    ];
    for bytes in cases {
        agree(&bytes).expect("reads");
    }
}

#[test]
fn values_without_json_form_are_named_by_pointer() {
    let nan_in_list = entry(
        "a/b",
        &delimited_field(
            6,
            &[
                delimited_field(1, &number_field(2, 1.0)),
                delimited_field(1, &number_field(2, f64::INFINITY)),
            ]
            .concat(),
        ),
    );
    let Err(RawJsonError::NoJsonForm(error)) = agree(&nan_in_list) else {
        panic!("an infinite number has no JSON form");
    };
    assert_eq!(error.pointer, "/a~1b/1");
}

#[test]
fn malformed_bytes_are_refused() {
    let valid = entry("a", &delimited_field(3, b"x"));
    let cases: Vec<Vec<u8>> = vec![
        valid[..valid.len() - 1].to_vec(),
        entry("a", &delimited_field(3, &[0xff, 0xfe])),
        delimited_field(1, &delimited_field(1, &[0xc3])),
        entry("a", &varint_field(3, 1)),
        entry("a", &delimited_field(2, b"12345678")),
        entry("a", &[0x11, 1, 2, 3]),
        vec![0x0a, 0x80],
    ];
    for bytes in cases {
        let error = agree(&bytes).expect_err("malformed");
        assert!(
            error
                .to_string()
                .starts_with("not a valid encoded google.protobuf.Struct: ")
        );
    }
}

#[test]
fn nesting_is_limited_as_prost_limits_it() {
    // Each JSON level is three messages (Struct, entry, Value); find where prost stops.
    let nested = |levels: usize| {
        let mut bytes = entry("leaf", &varint_field(4, 1));
        for _ in 0..levels {
            bytes = entry("n", &delimited_field(5, &bytes));
        }
        bytes
    };
    assert!(agree(&nested(30)).is_ok());
    assert!(agree(&nested(40)).is_err());
    for levels in 28..36 {
        agree(&nested(levels)).ok();
    }
}

#[test]
fn values_read_as_prost_reads_them() {
    for value in [
        json!(null),
        json!("x"),
        json!([1, {"a": 2.5}]),
        json!({"ok": true}),
        json!(-7),
    ] {
        let bytes = json_to_value(&value).encode_to_vec();
        let theirs = value_to_json(&prost_types::Value::decode(bytes.as_slice()).expect("decodes"));
        assert_eq!(
            value_bytes_to_json(&bytes).expect("reads"),
            theirs.expect("converts")
        );
    }
    assert_eq!(value_bytes_to_json(&[]).expect("reads"), Value::Null);
    let nan = prost_types::Value {
        kind: Some(PbKind::NumberValue(f64::NAN)),
    };
    assert!(matches!(
        value_bytes_to_json(&nan.encode_to_vec()),
        Err(RawJsonError::NoJsonForm(_))
    ));
}

#[test]
fn a_raw_message_is_sent_on_as_it_came_and_merges_when_repeated() {
    let input = json_to_struct(&json!({"a": {"b": [1, "two"]}, "c": null})).expect("an object");
    let raw = RawMessage::encode(&input);
    assert_eq!(raw.encoded_len(), input.encoded_len());
    assert_eq!(raw.decode::<prost_types::Struct>().expect("decodes"), input);

    // Captured from inside an outer message, field by field, repeated occurrences merged.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Outer {
        #[prost(message, optional, tag = "4")]
        input: Option<RawMessage>,
    }
    let more = json_to_struct(&json!({"c": 3, "d": "x"})).expect("an object");
    let bytes = [
        delimited_field(4, &input.encode_to_vec()),
        delimited_field(4, &more.encode_to_vec()),
    ]
    .concat();
    let prost_merged = pb::InvokeToolRequest::decode(bytes.as_slice())
        .expect("decodes")
        .input
        .expect("present");
    let outer = Outer::decode(bytes.as_slice()).expect("decodes");
    let raw = outer.input.expect("present");
    assert_eq!(
        raw.decode::<prost_types::Struct>().expect("decodes"),
        prost_merged
    );
    assert_eq!(
        struct_bytes_to_json(raw.as_bytes()).expect("reads"),
        json!({"a": {"b": [1, "two"]}, "c": 3, "d": "x"})
    );
    assert_eq!(
        Outer::decode(
            Outer {
                input: Some(raw.clone())
            }
            .encode_to_vec()
            .as_slice()
        )
        .expect("decodes")
        .input,
        Some(raw)
    );
}

/// Where prost is lenient (see the module docs): a group, which prost skips at a field number
/// the message does not have (and its map decoder takes as an entry), is refused when the
/// message is kept and when it is read; an entry of any other wrong wire type is refused when
/// read. (A group at a known field of a `Value` was found by fuzzing `wire_readers`: it was
/// dropped when the answer was kept, so toolplane took an answer prost refuses.)
#[test]
fn groups_and_entries_of_the_wrong_wire_type_are_refused() {
    let kept = entry("a", &delimited_field(3, b"x"));
    let group = |tag: u32| {
        let mut group = Vec::new();
        encode_key(tag, WireType::StartGroup, &mut group);
        group.extend_from_slice(&delimited_field(1, b"b"));
        encode_key(tag, WireType::EndGroup, &mut group);
        group
    };
    // At the entries' number, and at a number `Struct` does not have.
    for tag in [1, 9] {
        let input = [kept.clone(), group(tag)].concat();
        let request = delimited_field(4, &input);
        assert!(
            crate::grpc::invoke_wire::InvokeToolRequestWire::decode(request.as_slice()).is_err()
        );
        assert!(matches!(
            struct_bytes_to_json(&input),
            Err(RawJsonError::Malformed { .. })
        ));
    }
    // At `bool_value`'s number in a `Value`, and at a number it does not have.
    for tag in [4, 9] {
        let output = [number_field(2, 1.0), group(tag)].concat();
        let answer = delimited_field(2, &output);
        assert!(crate::grpc::invoke_wire::CallToolResponseWire::decode(answer.as_slice()).is_err());
        assert!(matches!(
            value_bytes_to_json(&output),
            Err(RawJsonError::Malformed { .. })
        ));
    }
    assert!(
        prost_types::Value::decode([number_field(2, 1.0), group(4)].concat().as_slice()).is_err(),
        "prost refuses a group at a known field"
    );

    for wrong in [
        varint_field(1, 0),
        number_field(1, 1.0),
        [0x0d, 0, 0, 0, 0].to_vec(),
    ] {
        assert!(matches!(
            struct_bytes_to_json(&[kept.clone(), wrong].concat()),
            Err(RawJsonError::Malformed { .. })
        ));
    }
}

/// A value without a JSON form that a later field replaces (another member of a `Value`'s
/// oneof, or an entry of the same key) is gone, as prost reads it; one that stays is refused,
/// named as the conversion of prost's tree names it. (Found by fuzzing `wire_readers`.)
#[test]
fn a_value_without_json_form_that_a_later_field_replaces_is_gone() {
    let infinite = number_field(2, f64::INFINITY);
    let list_of_it = delimited_field(6, &delimited_field(1, &infinite));
    let value_as_prost_reads_it =
        |bytes: &[u8]| value_to_json(&prost_types::Value::decode(bytes).expect("valid protobuf"));
    // A list holding it, then null: null.
    let replaced = [list_of_it.clone(), varint_field(1, 0)].concat();
    assert_eq!(value_bytes_to_json(&replaced), Ok(Value::Null));
    assert_eq!(value_as_prost_reads_it(&replaced), Ok(Value::Null));
    // A second list merges into the first: still refused, at the first item.
    let merged = [
        list_of_it.clone(),
        delimited_field(6, &delimited_field(1, &number_field(2, 1.0))),
    ]
    .concat();
    let Err(RawJsonError::NoJsonForm(error)) = value_bytes_to_json(&merged) else {
        panic!("refused")
    };
    assert_eq!(Err(error), value_as_prost_reads_it(&merged));
    // An entry of the same key replaces it, in one struct or in a struct merged into it.
    let bad = entry("a", &infinite);
    let good = entry("a", &number_field(2, 2.0));
    let b_bad = entry("b", &infinite);
    for bytes in [
        [bad.clone(), good.clone()].concat(),
        [b_bad.clone(), bad.clone(), good.clone()].concat(),
    ] {
        assert_eq!(
            struct_bytes_to_json(&bytes).map_err(|_| ()),
            through_prost(&bytes)
                .expect("valid protobuf")
                .map_err(|_| ()),
        );
    }
    assert_eq!(
        agree(&[bad.clone(), good.clone()].concat()),
        Ok(json!({"a": 2}))
    );
    let in_value = [delimited_field(5, &bad), delimited_field(5, &good)].concat();
    assert_eq!(value_bytes_to_json(&in_value), Ok(json!({"a": 2})));
    // Entries left without a JSON form: the first by key is named, as prost's map orders them.
    let Err(RawJsonError::NoJsonForm(error)) = struct_bytes_to_json(&[b_bad, bad].concat()) else {
        panic!("refused")
    };
    assert_eq!(error.pointer, "/a");
}
