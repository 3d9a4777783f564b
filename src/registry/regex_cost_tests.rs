use serde_json::json;

use super::*;

fn named_groups(count: usize) -> String {
    (0..count).map(|i| format!("(?<g{i}>x)")).collect()
}

/// One pass counts groups, named groups (not look-behinds), named references, name bytes and
/// control escapes; escaped bytes are not taken for any of them.
#[test]
fn a_pattern_is_counted_in_one_pass() {
    let counts = Counts::of(r"(?<year>\d{4})-(?<=a)(?<!b)(x)\k<year>\cA\(\\k<n>\\cA");
    assert_eq!(
        counts,
        Counts {
            groups: 4,
            named_groups: 1,
            named_references: 1,
            name_bytes: 8,
            control_escapes: 1,
        }
    );
}

/// Patterns people write pass, and the `regex` format says what jsonschema's check says of
/// them.
#[test]
fn ordinary_patterns_are_read() {
    for (pattern, valid) in [
        (r"^(?<year>\d{4})-(?<month>\d{2})-\k<month>$", true),
        (r"^[a-z]+(?=\d)\cJ$", true),
        (&named_groups(100), true),
        ("(", false),
        (r"(?<a>x)(?<a>y)", false),
        (r"\k<missing>(?<a>x)", false),
    ] {
        assert!(name_check_is_bounded(pattern), "{pattern}");
        assert_eq!(is_bounded_ecma_regex(pattern), valid, "{pattern}");
        assert_eq!(unbounded_regex_reason(pattern), None);
        assert_eq!(
            check_schema_patterns(&json!({ "pattern": pattern })),
            Ok(())
        );
    }
}

/// Thousands of named groups, or a few named groups under thousands of open groups, are
/// refused unread, with a reason naming the counts.
#[test]
fn patterns_whose_names_cost_too_much_to_check_are_refused() {
    let many_names = named_groups(2_000);
    let deep = format!(
        "{}{}{}",
        "(".repeat(20_000),
        named_groups(60),
        ")".repeat(20_000)
    );
    for pattern in [&many_names, &deep] {
        assert!(jsonschema_regex::is_valid_ecma_regex(pattern));
        assert!(!is_bounded_ecma_regex(pattern));
        let reason = unbounded_regex_reason(pattern).expect("refused for its cost");
        assert!(reason.contains("named groups"), "{reason}");
    }
    let error = check_schema_patterns(&json!({"properties": {"a/b": {"pattern": many_names}}}))
        .expect_err("refused");
    assert!(
        error.starts_with("at /properties/a~1b/pattern: the pattern has 2000 named groups"),
        "{error}"
    );
}

/// Many control escapes are refused in a schema's patterns and `patternProperties` keys
/// (compiling them reads the pattern again for each one), with the way to write them instead;
/// a few are not.
#[test]
fn schema_patterns_with_many_control_escapes_are_refused() {
    let many = r"\cA".repeat(2_000);
    let error =
        check_schema_patterns(&json!({"items": [{"patternProperties": {many.clone(): {}}}]}))
            .expect_err("refused");
    assert!(
        error.starts_with("at /items/0/patternProperties/"),
        "{error}"
    );
    assert!(error.contains(r"\x01 for \cA"), "{error}");
    assert!(check_schema_patterns(&json!({"pattern": many})).is_err());
    assert_eq!(
        check_schema_patterns(&json!({"pattern": r"\cA".repeat(100)})),
        Ok(())
    );
    // Values named `pattern` that are not strings, and strings elsewhere, are not patterns.
    assert_eq!(
        check_schema_patterns(
            &json!({"properties": {"pattern": {"type": "string"}}, "title": many})
        ),
        Ok(())
    );
}
