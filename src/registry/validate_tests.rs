//! Unit tests of registration validation.

use super::*;
use crate::registry::model::ToolAnnotations;

fn limits() -> RegistrationLimits {
    RegistrationLimits::default()
}

#[test]
fn a_valid_draft7_schema_compiles() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 8}},
                        "definitions": {"x": {"type": "string"}}, "required": ["n"]});
    let validator = compile_schema(&schema, &limits()).expect("valid schema");
    assert!(validator.is_valid(&json!({"n": 8})));
    assert!(!validator.is_valid(&json!({"n": 7})));
}

#[test]
fn a_bad_type_names_the_pointer() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "strin"}}});
    let error = compile_schema(&schema, &limits()).expect_err("bad type");
    assert!(error.contains("/properties/n/type"), "{error}");
}

#[test]
fn external_refs_are_rejected_and_internal_ones_allowed() {
    let external = json!({"$ref": "https://example.com/schema.json"});
    let error = compile_schema(&external, &limits()).expect_err("external ref");
    assert!(error.contains("external $ref"), "{error}");
    let internal = json!({"$ref": "#/definitions/a", "definitions": {"a": {"type": "string"}}});
    assert!(compile_schema(&internal, &limits()).is_ok());
}

#[test]
fn dollar_schema_picks_the_draft() {
    // `prefixItems` only exists from draft 2020-12 on.
    let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                        "type": "array", "prefixItems": [{"type": "integer"}]});
    let validator = compile_schema(&schema, &limits()).expect("2020-12 schema");
    assert!(!validator.is_valid(&json!(["x"])));
}

#[test]
fn size_and_depth_limits_hold() {
    let mut deep = json!({"type": "string"});
    for _ in 0..40 {
        deep = json!({"items": deep});
    }
    assert!(
        compile_schema(&deep, &limits())
            .expect_err("too deep")
            .contains("levels deep")
    );
    let big = json!({"description": "x".repeat(70 * 1024)});
    assert!(
        compile_schema(&big, &limits())
            .expect_err("too big")
            .contains("bytes")
    );
}

#[test]
fn endpoints_are_grpc_urls_or_mcp_urls_after_mcp_plus() {
    for good in [
        "",
        "http://10.0.0.7:7001",
        "https://p.example",
        "mcp+http://h:3001/mcp",
        "mcp+https://mcp.example.com/mcp",
        "mcp+stdio://0/memory",
    ] {
        assert_eq!(check_endpoint(good), Ok(()), "{good}");
    }
    for bad in ["ftp://h", "mcp+ftp://h", "mcp+", "mcp://h/mcp", "h:7001"] {
        assert!(check_endpoint(bad).is_err(), "{bad}");
    }
}

#[test]
fn hash_ignores_key_order_and_changes_with_content() {
    let name = ToolName::parse("t").expect("valid");
    let none = ToolAnnotations::default();
    let a = definition_sha256(&name, "d", &json!({"a": 1, "b": 2}), None, &none);
    let b = definition_sha256(&name, "d", &json!({"b": 2, "a": 1}), None, &none);
    let c = definition_sha256(&name, "changed", &json!({"a": 1, "b": 2}), None, &none);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(a.len(), 64);
    // Without annotations, the hash of the four fields alone (as before annotations were kept).
    let four = json!({"name": "t", "description": "d", "tool_schema": {"a": 1, "b": 2},
                      "output_schema": null});
    assert_eq!(a, crate::json::canonical_sha256(&four));
    // A hint said changes it.
    let read_only = ToolAnnotations {
        read_only: Some(true),
        ..ToolAnnotations::default()
    };
    let d = definition_sha256(&name, "d", &json!({"a": 1, "b": 2}), None, &read_only);
    assert_ne!(a, d);
}

/// A pattern that backtracks exponentially is stopped at the limit and named as such;
/// look-around that does not backtrack much works as before.
#[test]
fn backtracking_patterns_are_bounded() {
    let schema = json!({"type": "string", "pattern": "^(a|a)*(?=b)$"});
    let validator = compile_schema(&schema, &limits()).expect("compiles");
    // 14 characters take about 30,000 backtracking steps: within the engine's default
    // limit ("does not match"), over toolplane's.
    let value = json!("a".repeat(14));
    let messages: Vec<String> = validator
        .iter_errors(&value)
        .map(|error| violation_message(&error))
        .collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].contains("more than 10000 backtracking steps"),
        "{messages:?}"
    );
    assert!(!validator.is_valid(&value));

    let schema = json!({"type": "string", "pattern": "^(?=.*[0-9])(?=.*[a-z]).{8,}$"});
    let validator = compile_schema(&schema, &limits()).expect("compiles");
    assert!(validator.is_valid(&json!("passw0rd-passw0rd")));
    let value = json!("password-password");
    let error = validator.iter_errors(&value).next().expect("no digit");
    assert!(violation_message(&error).contains("does not match"));
}

/// A `regex` format value whose group names would take long to check is refused unread, saying
/// so; ordinary values are checked as regular expressions. A schema pattern that would take long
/// to read is refused at compile, naming where it is.
#[test]
fn regex_reading_is_bounded() {
    let schema =
        json!({"type": "object", "properties": {"p": {"type": "string", "format": "regex"}}});
    let validator = compile_schema(&schema, &limits()).expect("compiles");
    assert!(validator.is_valid(&json!({"p": r"^(?<word>\w+) \k<word>$"})));
    let value = json!({"p": "(".to_owned() + "x"});
    let error = validator.iter_errors(&value).next().expect("not a regex");
    assert!(
        violation_message(&error).contains(r#"is not a "regex""#),
        "{}",
        violation_message(&error)
    );
    let names: String = (0..40_000).map(|i| format!("(?<a{i}>)")).collect();
    let value = json!({ "p": names });
    assert!(!validator.is_valid(&value));
    let error = validator.iter_errors(&value).next().expect("refused");
    let message = violation_message(&error);
    assert!(
        message.starts_with("the value is refused unread as a regex: with 40000 named groups"),
        "{message}"
    );

    let schema = json!({"type": "string", "pattern": r"\cA".repeat(10_000)});
    let error = compile_schema(&schema, &limits()).expect_err("refused");
    assert!(
        error.starts_with("at /pattern: the pattern has 10000 \\cX control escapes"),
        "{error}"
    );
}

/// A service version is a semantic version of at most 256 bytes; an MCP server's version
/// that is not one is not taken (the import registers `0.0.0`).
#[test]
fn service_versions_are_semantic_and_at_most_256_bytes() {
    let longest = format!("1.0.0-{}", "a".repeat(MAX_VERSION_LEN - 6));
    assert!(is_service_version("0.0.1") && is_service_version(&longest));
    assert!(!is_service_version(&format!("{longest}a")));
    assert!(!is_service_version("v1"));
}

/// A value's first error is found without finding the others.
#[test]
fn a_value_is_reported_by_its_first_error() {
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let validator = compile_schema(&schema, &RegistrationLimits::default()).expect("compiles");
    let few = json!(["a", 1, 2]);
    let error = first_error(&validator, &few).expect("invalid");
    assert_eq!(error.instance_path().to_string(), "/1");
    let many = json!(vec![1; 100_000]);
    let error = first_error(&validator, &many).expect("invalid");
    assert_eq!(error.instance_path().to_string(), "/0");
    assert!(first_error(&validator, &json!(vec!["a"; 10_000])).is_none());
}
