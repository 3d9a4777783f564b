//! Every kind of bad registration is rejected whole with INVALID_ARGUMENT, an ErrorInfo reason
//! and BadRequest violations naming the field (and tool and JSON pointer); nothing is stored.
//! Registrations over a tenant's quotas are in `registration_quotas.rs`.

use crate::common;

use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;

async fn rejected(registration: pb::ServiceRegistration) -> tonic::Status {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    // A good registration first, to prove a bad one does not disturb what is stored.
    register_ok(
        &mut client,
        0,
        common::registration("keeper", vec![simple_tool("kept")]),
    )
    .await;
    let name = registration.service_name.clone();
    let error = register(&mut client, 0, registration)
        .await
        .expect_err("bad registration rejected");
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    assert!(
        !violations(&error).is_empty(),
        "BadRequest details present: {error:?}"
    );
    assert!(
        get_service(&mut client, 0, "keeper").await.is_ok(),
        "earlier registration untouched"
    );
    if let Ok(stored) = get_service(&mut client, 0, &name).await {
        panic!("nothing of a bad registration is stored, found {stored:?}");
    }
    error
}

fn field_of(error: &tonic::Status) -> String {
    violations(error)[0].0.clone()
}

/// Service names must be DNS labels.
#[tokio::test(flavor = "multi_thread")]
async fn bad_service_name() {
    let error = rejected(registration("Bad_Name", vec![simple_tool("t")])).await;
    assert_eq!(field_of(&error), "registration.service_name");
    assert_eq!(reason(&error), "VALIDATION_NAME");
}

/// Tool names are 1-128 characters of [A-Za-z0-9_.-].
#[tokio::test(flavor = "multi_thread")]
async fn bad_tool_name() {
    let error = rejected(registration(
        "svc",
        vec![simple_tool("ok"), simple_tool("has space")],
    ))
    .await;
    assert_eq!(field_of(&error), "registration.tools[1].tool_name");
    assert_eq!(reason(&error), "VALIDATION_NAME");
}

/// Duplicate tool names in one registration are rejected and point at the second one.
#[tokio::test(flavor = "multi_thread")]
async fn duplicate_tool_names() {
    let error = rejected(registration(
        "svc",
        vec![simple_tool("dup"), simple_tool("other"), simple_tool("dup")],
    ))
    .await;
    assert_eq!(field_of(&error), "registration.tools[2].tool_name");
    assert!(violations(&error)[0].1.contains("registration.tools[0]"));
}

/// A schema that does not compile names the tool and the JSON pointer.
#[tokio::test(flavor = "multi_thread")]
async fn schema_that_does_not_compile() {
    let error = rejected(registration(
        "svc",
        vec![tool(
            "broken",
            json!({"type": "object", "properties": {"age": {"type": "strin"}}}),
        )],
    ))
    .await;
    let (field, description) = &violations(&error)[0];
    assert_eq!(field, "registration.tools[0].tool_schema");
    assert!(description.contains("\"broken\""), "{description}");
    assert!(
        description.contains("/properties/age/type"),
        "{description}"
    );
    assert_eq!(reason(&error), "VALIDATION_SCHEMA");
}

/// External $ref is refused; the server never fetches anything.
#[tokio::test(flavor = "multi_thread")]
async fn external_ref() {
    let error = rejected(registration(
        "svc",
        vec![tool(
            "remote",
            json!({"$ref": "http://127.0.0.1:9/schema.json"}),
        )],
    ))
    .await;
    assert!(
        violations(&error)[0].1.contains("external $ref"),
        "{error:?}"
    );
}

/// A schema whose references make validation exponential is refused, saying where in the
/// input: 2^30 evaluations of the last definition for every input (minutes of a server thread
/// per call), from 2 KB of schema. A grpcurl session showed one such schema of 26 levels held
/// a thread for 0.75 s per `ValidateToolInput` before the bound.
#[tokio::test(flavor = "multi_thread")]
async fn schema_whose_validation_is_exponential() {
    let mut definitions = serde_json::Map::new();
    for level in 0..30 {
        let next = json!({"$ref": format!("#/definitions/a{}", level + 1)});
        definitions.insert(format!("a{level}"), json!({"allOf": [next, next]}));
    }
    definitions.insert("a30".into(), json!({"type": "object"}));
    let mut doubling = simple_tool("ok");
    doubling.output_schema =
        schema(json!({"definitions": definitions, "$ref": "#/definitions/a0"}));
    let recursive = tool(
        "nested",
        json!({"type": "object", "properties": {"x": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}}}),
    );
    let error = rejected(registration("svc", vec![doubling, recursive])).await;
    let found = violations(&error);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, "registration.tools[0].output_schema");
    assert!(
        found[0]
            .1
            .contains("would evaluate more than 10000 subschemas at its top level"),
        "{found:?}"
    );
    assert_eq!(found[1].0, "registration.tools[1].tool_schema");
    assert!(found[1].1.contains("\"nested\""), "{found:?}");
    assert!(found[1].1.contains("subschemas at /x/x/x"), "{found:?}");
    assert!(found[1].1.contains("exponentially"), "{found:?}");
    assert_eq!(reason(&error), "VALIDATION_SCHEMA");
}

/// A pattern that would take seconds to read is refused, saying where and how to write it:
/// compiling one of 10,000 `\cA` escapes read it again for each (2.3 s of a core per compile,
/// release build, before the bound), and checking thousands of named groups compares each
/// name with every other.
#[tokio::test(flavor = "multi_thread")]
async fn schema_patterns_that_take_long_to_read() {
    let escapes = tool(
        "escapes",
        json!({"type": "object", "properties": {"x": {"type": "string", "pattern": r"\cA".repeat(10_000)}}}),
    );
    let names: String = (0..3_000).map(|i| format!("(?<n{i}>)")).collect();
    let mut named = simple_tool("named");
    named.output_schema = schema(json!({"type": "object", "patternProperties": {names: {}}}));
    let error = rejected(registration("svc", vec![escapes, named])).await;
    let found = violations(&error);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, "registration.tools[0].tool_schema");
    assert!(
        found[0]
            .1
            .contains("at /properties/x/pattern: the pattern has 10000 \\cX control escapes"),
        "{found:?}"
    );
    assert!(found[0].1.contains("\\x01 for \\cA"), "{found:?}");
    assert_eq!(found[1].0, "registration.tools[1].output_schema");
    assert!(
        found[1].1.contains("at /patternProperties/(?<n0>)"),
        "{found:?}"
    );
    assert!(found[1].1.contains("3000 named groups"), "{found:?}");
    assert_eq!(reason(&error), "VALIDATION_SCHEMA");
}

/// Patterns that would compile to hundreds of megabytes are refused before they are compiled:
/// 100 properties of `\p{L}{100}`, 5 KB of schema, took 490 MB and 3.7 s to compile.
#[tokio::test(flavor = "multi_thread")]
async fn schema_patterns_that_compile_large() {
    let properties: serde_json::Map<String, serde_json::Value> = (0..100)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": format!("\\p{{L}}{{100}}{i}")}),
            )
        })
        .collect();
    let large = tool("large", json!({"type": "object", "properties": properties}));
    let error = rejected(registration("svc", vec![large])).await;
    let found = violations(&error);
    assert_eq!(found[0].0, "registration.tools[0].tool_schema");
    assert!(
        found[0].1.contains("patterns would take about"),
        "{found:?}"
    );
    assert!(found[0].1.contains("more than 16 MiB"), "{found:?}");
}

/// Output schemas are compiled under the same rules.
#[tokio::test(flavor = "multi_thread")]
async fn bad_output_schema() {
    let mut bad = simple_tool("out");
    bad.output_schema = schema(json!({"type": 12}));
    let error = rejected(registration("svc", vec![bad])).await;
    assert_eq!(field_of(&error), "registration.tools[0].output_schema");
}

/// Schemas nested beyond the depth limit are rejected.
#[tokio::test(flavor = "multi_thread")]
async fn schema_too_deep() {
    // 13 levels of {"properties": {"x": ...}} nest 27 deep: over the limit of 24, yet under
    // the protobuf decoder's own recursion limit (see the next test).
    let mut deep = json!({"type": "string"});
    for _ in 0..13 {
        deep = json!({"type": "object", "properties": {"x": deep}});
    }
    let error = rejected(registration("svc", vec![tool("deep", deep)])).await;
    assert!(violations(&error)[0].1.contains("levels deep"), "{error:?}");
}

/// A schema nested deeper than protobuf decoding goes (about 30 levels of JSON) is refused as
/// bad input naming the field, not as an INTERNAL error of the server.
#[tokio::test(flavor = "multi_thread")]
async fn schema_deeper_than_protobuf_decodes() {
    let mut deep = json!({"type": "string"});
    for _ in 0..40 {
        deep = json!({"type": "object", "properties": {"x": deep}});
    }
    let error = rejected(registration("svc", vec![tool("deep", deep)])).await;
    assert_eq!(field_of(&error), "registration.tools.tool_schema");
    assert!(
        violations(&error)[0]
            .1
            .contains("nests deeper than protobuf decoding goes"),
        "{error:?}"
    );
    assert_eq!(reason(&error), "VALIDATION_FIELD");
    assert!(
        error.message().len() < 300,
        "one line, not the path 40 times: {error:?}"
    );
}

/// Schemas over the size limit are rejected.
#[tokio::test(flavor = "multi_thread")]
async fn schema_too_big() {
    let error = rejected(registration(
        "svc",
        vec![tool(
            "big",
            json!({"type": "object", "description": "x".repeat(70_000)}),
        )],
    ))
    .await;
    assert!(violations(&error)[0].1.contains("bytes"), "{error:?}");
}

/// A tool without an input schema is rejected with a hint.
#[tokio::test(flavor = "multi_thread")]
async fn missing_tool_schema() {
    let mut no_schema = simple_tool("bare");
    no_schema.tool_schema = None;
    let error = rejected(registration("svc", vec![no_schema])).await;
    assert_eq!(field_of(&error), "registration.tools[0].tool_schema");
}

/// Versions must be semantic, endpoints http(s) URIs (or MCP URLs, not started servers), TTLs
/// within bounds, capabilities set.
#[tokio::test(flavor = "multi_thread")]
async fn bad_version_endpoint_ttl_and_capability_are_all_reported() {
    let mut bad = registration("svc", vec![simple_tool("t")]);
    bad.service_version = "v1".into();
    bad.endpoint = "ftp://example".into();
    bad.ttl = Some(prost_types::Duration {
        seconds: 86_400 * 7,
        nanos: 0,
    });
    let error = rejected(bad).await;
    let fields: Vec<String> = violations(&error)
        .into_iter()
        .map(|(field, _)| field)
        .collect();
    assert_eq!(
        fields,
        [
            "registration.service_version",
            "registration.endpoint",
            "registration.ttl"
        ]
    );

    // A semantic version, but longer than a registration takes.
    let mut long = registration("svc", vec![simple_tool("t")]);
    long.service_version = format!("1.0.0-{}", "a".repeat(251));
    let error = rejected(long).await;
    assert_eq!(field_of(&error), "registration.service_version");
    assert!(error.message().contains("at most 256 bytes"), "{error:?}");

    // A limit of 0 ms would time every call of the tool out at once.
    let mut no_time = simple_tool("t");
    no_time.timeout_ms = Some(0);
    let error = rejected(registration("svc", vec![no_time])).await;
    assert_eq!(field_of(&error), "registration.tools[0].timeout_ms");
    assert!(error.message().contains("leave it unset"), "{error:?}");

    let mut unspecified = simple_tool("t");
    unspecified.capabilities = vec![pb::ServiceCapability::Unspecified as i32];
    let error = rejected(registration("svc", vec![unspecified])).await;
    assert_eq!(field_of(&error), "registration.tools[0].capabilities");

    // An MCP server toolplane would start is an import's alone.
    let mut started = registration("svc", vec![simple_tool("t")]);
    started.endpoint = "mcp+stdio://0/svc".into();
    let error = rejected(started).await;
    assert_eq!(field_of(&error), "registration.endpoint");
    assert!(error.message().contains("mcp_imports"), "{error:?}");
}

/// A tool that names another service than the registration's is rejected.
#[tokio::test(flavor = "multi_thread")]
async fn tool_service_mismatch() {
    let mut foreign = simple_tool("t");
    foreign.service_name = "someone-else".into();
    let error = rejected(registration("svc", vec![foreign])).await;
    assert_eq!(field_of(&error), "registration.tools[0].service_name");
}

/// A request without a registration, or with a malformed envelope, is rejected.
#[tokio::test(flavor = "multi_thread")]
async fn missing_registration_and_bad_envelope() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let error = client
        .register_service(pb::RegisterServiceRequest {
            meta: meta(0),
            registration: None,
        })
        .await
        .expect_err("no registration");
    assert_eq!(violations(&error)[0].0, "registration");
    let mut bad_meta = meta(0).expect("meta");
    bad_meta.envelope_id = "not-a-uuid".into();
    let error = client
        .register_service(pb::RegisterServiceRequest {
            meta: Some(bad_meta),
            registration: Some(registration("svc", vec![])),
        })
        .await
        .expect_err("bad envelope");
    assert_eq!(violations(&error)[0].0, "meta.envelope_id");
}

/// A failed re-registration leaves the earlier registration of the same service intact.
#[tokio::test(flavor = "multi_thread")]
async fn failed_reregistration_keeps_the_old_one() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let first = register_ok(
        &mut client,
        0,
        registration("svc", vec![simple_tool("good")]),
    )
    .await;
    register(
        &mut client,
        0,
        registration("svc", vec![tool("bad", json!({"type": "nope"}))]),
    )
    .await
    .expect_err("rejected");
    let stored = get_service(&mut client, 0, "svc")
        .await
        .expect("still there");
    assert_eq!(stored.available_tools[0].tool_name, "good");
    client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: "svc".into(),
            lease_id: first.lease_id,
        })
        .await
        .expect("the old lease still holds");
}
