//! InvokeTool through the real server against a real provider server on loopback: valid calls
//! answered and recorded with their hashes, inputs and outputs of every size across both hops,
//! schema rejection before the provider, runaway schema patterns, costly `regex` inputs, validation after validator
//! eviction, unknown tools and per-tenant records, the caller's trace context passed on.
//! Deadlines, limits, retries and provider failures are in `invoke_failures.rs`.

use crate::common;

use std::sync::atomic::Ordering;

use common::invoke_fixture::*;
use common::*;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;
use toolplane::grpc::ServerOptions;
use toolplane::json::{canonical_sha256, value_to_json};
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// A valid call reaches the provider with integers intact and is recorded with hashes.
#[tokio::test(flavor = "multi_thread")]
async fn valid_call_is_answered_and_recorded() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let input = json!({"n": 8});
    let answer = client
        .invoke_tool(request("typed", input.clone()))
        .await
        .expect("call succeeds")
        .into_inner();
    let output = value_to_json(answer.output.as_ref().expect("output")).expect("json");
    assert_eq!(
        output,
        json!({"doubled": 16, "n_was_integer": true}),
        "the provider received 8, not 8.0"
    );
    assert!(answer.warnings.is_empty());
    let record = answer.record.expect("record");
    assert_eq!(record.status, pb::InvocationStatus::Succeeded as i32);
    assert_eq!(record.attempts, 1);
    assert_eq!(record.service_name, "testing");
    assert_eq!(record.input_sha256, canonical_sha256(&input));
    assert_eq!(record.output_sha256, canonical_sha256(&output));
    assert_eq!(record.correlation_id, "test-correlation");

    // An output that does not match output_schema comes back with a warning, not dropped.
    let odd = client
        .invoke_tool(request("typed", json!({"n": 99})))
        .await
        .expect("call succeeds")
        .into_inner();
    assert_eq!(odd.warnings.len(), 1, "{:?}", odd.warnings);
    assert!(odd.warnings[0].contains("output_schema"));
}

/// A megabyte each way crosses both hops whole: many DATA frames, more than the initial
/// flow-control windows, on the connection toolplane keeps to the provider.
#[tokio::test(flavor = "multi_thread")]
async fn large_inputs_and_outputs_cross_both_hops() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let items: Vec<Value> = (0..2_000)
        .map(|i| json!({"index": i, "text": "x".repeat(500)}))
        .collect();
    let input = json!({"items": items});
    for _ in 0..2 {
        let answer = client
            .invoke_tool(request("echo", input.clone()))
            .await
            .expect("call succeeds")
            .into_inner();
        let output = value_to_json(answer.output.as_ref().expect("output")).expect("json");
        assert_eq!(output, input);
    }
}

/// Input that breaks the schema is INVALID_ARGUMENT with JSON pointers; the provider is never called.
#[tokio::test(flavor = "multi_thread")]
async fn schema_rejection_never_reaches_the_provider() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let error = client
        .invoke_tool(request("typed", json!({"n": 3})))
        .await
        .expect_err("below minimum");
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(reason(&error), "VALIDATION_INPUT");
    assert_eq!(violations(&error)[0].0, "input/n");
    let missing = client
        .invoke_tool(request("typed", json!({})))
        .await
        .expect_err("missing n");
    assert_eq!(violations(&missing)[0].0, "input");

    let validated = client
        .validate_tool_input(pb::ValidateToolInputRequest {
            meta: meta(0),
            tool_name: "typed".into(),
            input: toolplane::json::json_to_struct(&json!({"n": 1})),
            ..Default::default()
        })
        .await
        .expect_err("same answer without calling");
    assert_eq!(violations(&validated)[0].0, "input/n");
    client
        .validate_tool_input(pb::ValidateToolInputRequest {
            meta: meta(0),
            tool_name: "typed".into(),
            input: toolplane::json::json_to_struct(&json!({"n": 10})),
            ..Default::default()
        })
        .await
        .expect("valid input");
    assert_eq!(
        setup.probes.typed_calls.load(Ordering::SeqCst),
        0,
        "the provider was never called"
    );
    let written = records(&mut client, "typed").await;
    assert_eq!(
        written.len(),
        2,
        "each rejected call is recorded; validation alone is not"
    );
    assert!(
        written
            .iter()
            .all(|r| r.status == pb::InvocationStatus::InvalidInput as i32 && r.attempts == 0)
    );
    // Each refusal names its record; validation alone writes none, so names none.
    let mut named = vec![
        error_metadata(&error, "invocation_id"),
        error_metadata(&missing, "invocation_id"),
    ];
    let mut ids: Vec<_> = written
        .iter()
        .map(|r| Some(r.invocation_id.clone()))
        .collect();
    named.sort();
    ids.sort();
    assert_eq!(named, ids);
    assert_eq!(error_metadata(&validated, "invocation_id"), None);
    let mut digests: Vec<_> = written.iter().map(|r| r.input_sha256.clone()).collect();
    let mut expected = vec![
        canonical_sha256(&json!({"n": 3})),
        canonical_sha256(&json!({})),
    ];
    digests.sort();
    expected.sort();
    assert_eq!(
        digests, expected,
        "a rejected call's record holds its input's digest"
    );
}

/// A schema pattern that backtracks exponentially on an input is stopped at toolplane's
/// limit: the call is refused at once, naming the field and why, and recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_runaway_schema_pattern_refuses_the_input() {
    let server = TestServer::start().await;
    let mut client = unreachable_tool(
        &server,
        "slug",
        json!({"type": "string", "pattern": "^(a|a)*(?=b)$"}),
    )
    .await;
    let message = refused_input(&mut client, "slug", json!("a".repeat(40))).await;
    assert!(message.contains("backtracking steps"), "{message}");
    let written = records(&mut client, "slug").await;
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].status, pb::InvocationStatus::InvalidInput as i32);
    server.stop().await;
}

/// Registers a tool taking an object whose property `x` has `property` as its schema, at an
/// endpoint where nothing listens (an input that passes fails UNAVAILABLE), and returns a
/// client to call it.
async fn unreachable_tool(
    server: &TestServer,
    name: &str,
    property: Value,
) -> ToolInvokeServiceClient<Channel> {
    let schema = json!({"type": "object", "properties": {"x": property}});
    let mut registration = registration("patterns", vec![tool(name, schema)]);
    registration.endpoint = "http://127.0.0.1:9".into();
    register_ok(&mut server.discovery().await, 0, registration).await;
    invoker(server).await
}

/// Calls `name` with `x` as its input's `x`, and returns what the one violation of its refusal
/// (`INVALID_ARGUMENT`, `VALIDATION_INPUT`, at `input/x`) says.
async fn refused_input(
    client: &mut ToolInvokeServiceClient<Channel>,
    name: &str,
    x: Value,
) -> String {
    refused_input_at(client, name, x, "input/x").await
}

/// As [`refused_input`], the one violation at `field`.
async fn refused_input_at(
    client: &mut ToolInvokeServiceClient<Channel>,
    name: &str,
    x: Value,
    field: &str,
) -> String {
    let error = client
        .invoke_tool(request(name, json!({ "x": x })))
        .await
        .expect_err("refused");
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(reason(&error), "VALIDATION_INPUT");
    let found = violations(&error);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, field);
    found[0].1.clone()
}

/// An input value of the `regex` format whose group names would take minutes to check (each
/// compared with every other: 1.3 s of a core for 430 KB, release build, and quadratic) is
/// refused at once, saying why; an ordinary one reaches the provider's endpoint.
#[tokio::test(flavor = "multi_thread")]
async fn a_regex_input_too_costly_to_check_is_refused() {
    let server = TestServer::start().await;
    let mut client = unreachable_tool(
        &server,
        "search",
        json!({"type": "string", "format": "regex"}),
    )
    .await;
    let error = client
        .invoke_tool(request("search", json!({"x": r"^(?<w>\w+) \k<w>$"})))
        .await
        .expect_err("no provider");
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    let names: String = (0..200_000).map(|i| format!("(?<n{i}>)")).collect();
    let message = refused_input(&mut client, "search", json!(names)).await;
    assert!(
        message.contains("refused unread as a regex: with 200000 named groups"),
        "{message}"
    );
    server.stop().await;
}

/// With room for one compiled validator, tools take turns in the cache (or are compiled again
/// on every call): input and output checks give the same answers either way.
#[tokio::test(flavor = "multi_thread")]
async fn validation_holds_when_validators_are_evicted() {
    let setup = setup_with(ServerOptions {
        validator_cache_size: 1,
        ..test_options()
    })
    .await;
    let mut client = invoker(&setup.server).await;
    for _ in 0..3 {
        let error = client
            .invoke_tool(request("typed", json!({"n": 3})))
            .await
            .expect_err("below minimum");
        assert_eq!(violations(&error)[0].0, "input/n");
        client
            .invoke_tool(request("echo", json!({"any": "thing"})))
            .await
            .expect("echo accepts any object");
        let odd = client
            .invoke_tool(request("typed", json!({"n": 99})))
            .await
            .expect("valid input")
            .into_inner();
        assert_eq!(odd.warnings.len(), 1, "{:?}", odd.warnings);
        assert!(odd.warnings[0].contains("output_schema"));
    }
}

/// Unknown tools are NOT_FOUND and recorded as REJECTED; records are scoped by tenant.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_tool_is_recorded_and_records_are_per_tenant() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let error = client
        .invoke_tool(request("nope", json!({})))
        .await
        .expect_err("unknown");
    assert_eq!(error.code(), Code::NotFound);
    let written = records(&mut client, "nope").await;
    assert_eq!(written[0].status, pb::InvocationStatus::Rejected as i32);
    let id = &written[0].invocation_id;
    assert_eq!(
        error_metadata(&error, "invocation_id").as_ref(),
        Some(id),
        "the refusal names its record"
    );
    assert_eq!(
        error_metadata(&error, "service_name"),
        None,
        "no service was named"
    );
    let fetched = get_record(&setup.server, 0, id).await.expect("get");
    assert_eq!(fetched.sequence, written[0].sequence);
    let other_tenant = get_record(&setup.server, 5, id)
        .await
        .expect_err("not visible to tenant 5");
    assert_eq!(other_tenant.code(), Code::NotFound);
    assert_eq!(
        error_metadata(&other_tenant, "invocation_id").as_ref(),
        Some(id)
    );

    // An id in another of a UUID's forms finds the record; one that is no UUID is refused.
    let upper = get_record(&setup.server, 0, &id.to_uppercase())
        .await
        .expect("the same UUID in capitals");
    assert_eq!(&upper.invocation_id, id);
    let malformed = get_record(&setup.server, 0, "no-such-id")
        .await
        .expect_err("not a UUID");
    assert_eq!(malformed.code(), Code::InvalidArgument, "{malformed:?}");
    let violations = violations(&malformed);
    assert_eq!(violations.len(), 1, "{malformed:?}");
    assert_eq!(violations[0].0, "invocation_id");
}

/// The caller's W3C trace context reaches the provider with the call, `tracestate` with it, and
/// its trace id is recorded and listed by; a `traceparent` that is not one is not passed on,
/// nor the `tracestate` beside it, and no trace id is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn the_callers_trace_context_reaches_the_provider() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (parent, state, trace_id) in [
        (
            Some(traceparent),
            Some("congo=t61rcWkgMzE"),
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        (Some("00-not-a-trace-01"), Some("congo=t61rcWkgMzE"), ""),
        (None, None, ""),
    ] {
        let mut call = tonic::Request::new(request("echo", json!({"n": 1})));
        for (name, value) in [("traceparent", parent), ("tracestate", state)] {
            if let Some(value) = value {
                call.metadata_mut()
                    .insert(name, value.parse().expect("ascii"));
            }
        }
        let answer = client.invoke_tool(call).await.expect("echoed").into_inner();
        assert_eq!(answer.record.expect("record").trace_id, trace_id);
    }
    let listed = client
        .list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner()
        .records;
    let trace_ids: Vec<&str> = listed.iter().map(|r| r.trace_id.as_str()).collect();
    assert_eq!(
        trace_ids,
        ["", "", "4bf92f3577b34da6a3ce929d0e0e4736"],
        "newest first"
    );

    // From a trace to its records.
    let of_trace = |trace_id: &str| pb::ListInvocationRecordsRequest {
        meta: meta(0),
        trace_id: trace_id.into(),
        ..Default::default()
    };
    let traced = client
        .list_invocation_records(of_trace("4bf92f3577b34da6a3ce929d0e0e4736"))
        .await
        .expect("listed")
        .into_inner()
        .records;
    assert_eq!(traced.len(), 1);
    assert_eq!(traced[0].invocation_id, listed[2].invocation_id);
    let bad = client
        .list_invocation_records(of_trace("4BF92F35"))
        .await
        .expect_err("not a trace id");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert_eq!(violations(&bad)[0].0, "trace_id", "{bad:?}");
    assert_eq!(
        *setup.probes.traces.lock().expect("lock"),
        [
            Some((traceparent.to_owned(), Some("congo=t61rcWkgMzE".to_owned()))),
            None,
            None
        ]
    );
}

/// An input is refused with its first violation alone, however many it has: finding every
/// error of an input before reporting any (the validator's `iter_errors`) took 680 MB for 2
/// million wrong items in 4 MB, and 1.9 GB for 1,000 strings in 4 KB against an `anyOf` of
/// 4,500 constants.
#[tokio::test(flavor = "multi_thread")]
async fn an_input_is_refused_with_its_first_violation() {
    let server = TestServer::start().await;
    let mut client =
        unreachable_tool(&server, "strings", json!({"items": {"type": "string"}})).await;
    for items in [1, 100, 20_000] {
        let mut x = vec![json!(1); items];
        x.insert(0, json!("a"));
        refused_input_at(&mut client, "strings", json!(x), "input/x/1").await;
    }
}

/// The value of `key` in `error`'s ErrorInfo metadata.
fn error_metadata(error: &tonic::Status, key: &str) -> Option<String> {
    use tonic_types::StatusExt;
    let info = error.get_error_details().error_info().cloned();
    info.expect("ErrorInfo").metadata.get(key).cloned()
}
