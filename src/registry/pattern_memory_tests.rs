use serde_json::json;

use super::*;

/// Ordinary patterns are estimated at tens of kilobytes; a Unicode class repeated is
/// estimated as many times as it repeats, above what it was measured to take compiled.
#[test]
fn patterns_are_estimated_by_their_classes_and_repetitions() {
    for ordinary in [
        r"^[a-z0-9_-]{3,32}$",
        r"\w+@\w+\.com",
        ".",
        r"^(?=.*\d)\S{8,}$",
    ] {
        let estimate = pattern_memory(ordinary);
        assert!(
            (BYTES_PER_PATTERN..64 * 1024).contains(&estimate),
            "{ordinary}: {estimate}"
        );
    }
    let letters = pattern_memory(r"\p{L}{100}");
    assert!((4_900_000..8_000_000).contains(&letters), "{letters}");
    assert_eq!(
        pattern_memory(r"\p{L}{10}") - BYTES_PER_PATTERN,
        (letters - BYTES_PER_PATTERN) / 10
    );
    assert!(
        pattern_memory(r"(?=a)\p{L}{100}") >= letters,
        "look-around parsed too"
    );
    assert!(pattern_memory(r"\p{L}{10,}") < pattern_memory(r"\p{L}{10,20}"));
    assert_eq!(
        pattern_memory("("),
        0,
        "does not parse: compiling it fails anyway"
    );
}

/// A schema's patterns are summed wherever they are: `pattern` strings and
/// `patternProperties` keys.
#[test]
fn a_schemas_patterns_are_summed() {
    let schema = json!({
        "properties": {"a": {"pattern": "^a$"}, "b": {"items": [{"pattern": "^b$"}]}},
        "patternProperties": {"^c$": {}},
        "title": "pattern"
    });
    let one = pattern_memory("^a$");
    assert_eq!(schema_pattern_memory(&schema), 3 * one);
    assert_eq!(schema_pattern_memory(&json!({"type": "string"})), 0);
}

/// Past the bound a schema is refused, saying about how much; repetitions past any size are
/// "far more".
#[test]
fn schemas_past_the_bound_are_refused() {
    let letters = json!({"pattern": "\\p{L}{100}"});
    assert!(check_pattern_memory(&letters).is_ok());
    let many: Vec<_> = (0..10).map(|_| letters.clone()).collect();
    let error = check_pattern_memory(&json!({"anyOf": many})).expect_err("refused");
    assert!(
        error.starts_with(
            "the schema's patterns would take about 51 MiB compiled, more than 16 MiB"
        ),
        "{error}"
    );
    let nested = json!({"pattern": format!("{}a{}", "(".repeat(7), "{1000})".repeat(7))});
    let error = check_pattern_memory(&nested).expect_err("refused");
    assert!(
        error.starts_with("the schema's patterns would take far more compiled"),
        "{error}"
    );
}
