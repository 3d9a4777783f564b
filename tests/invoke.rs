//! InvokeTool through the real server against real provider servers on loopback: validation,
//! deadlines with cancellation at the provider, rate limits, retries, unreachable and
//! unhealthy providers, records, and re-registration after a control plane restart.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::provider::TestProvider;
use common::*;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;
use toolplane::grpc::ServerOptions;
use toolplane::invoke::limits::{Bucket, RateLimitConfig};
use toolplane::json::{canonical_sha256, value_to_json};
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::provider::{
    RegisteredTools, ToolDescriptor, ToolError, ToolInvocation, ToolOutput, ToolRegistry, handler,
};
use toolplane::registry::Capability;

/// What the test provider's tools saw.
#[derive(Default)]
struct Probes {
    echo_calls: AtomicU32,
    flaky_calls: AtomicU32,
    typed_calls: AtomicU32,
    sleepy_cancelled: AtomicBool,
    idempotency_keys: Mutex<Vec<String>>,
    flaky_inputs: Mutex<Vec<Value>>,
}

fn test_tools(probes: &Arc<Probes>) -> RegisteredTools {
    let (echo, flaky, plain_flaky, sleepy, typed) = (
        Arc::clone(probes),
        Arc::clone(probes),
        Arc::clone(probes),
        Arc::clone(probes),
        Arc::clone(probes),
    );
    ToolRegistry::new()
        .register(
            ToolDescriptor::new("echo", "Returns its input", json!({"type": "object"})).capabilities(&[Capability::Retry]),
            handler(move |call: ToolInvocation| {
                let probes = Arc::clone(&echo);
                async move {
                    probes.echo_calls.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::new(call.input))
                }
            }),
        )
        .and_then(|r| {
            r.register(
                ToolDescriptor::new("flaky", "Unavailable twice, then answers", json!({"type": "object"})).capabilities(&[Capability::Retry]),
                handler(move |call: ToolInvocation| {
                    let probes = Arc::clone(&flaky);
                    async move {
                        probes.idempotency_keys.lock().expect("lock").push(call.context.idempotency_key.clone().unwrap_or_default());
                        probes.flaky_inputs.lock().expect("lock").push(call.input.clone());
                        let n = probes.flaky_calls.fetch_add(1, Ordering::SeqCst) + 1;
                        if n <= 2 { Err(ToolError::unavailable(format!("warming up ({n})"))) } else { Ok(ToolOutput::new(json!({"attempt": call.context.attempt}))) }
                    }
                }),
            )
        })
        .and_then(|r| {
            r.register(
                ToolDescriptor::new("flaky_not_retryable", "Always unavailable; does not declare RETRY", json!({"type": "object"})),
                handler(move |_call: ToolInvocation| {
                    let probes = Arc::clone(&plain_flaky);
                    async move {
                        probes.flaky_calls.fetch_add(1, Ordering::SeqCst);
                        Err::<ToolOutput, _>(ToolError::unavailable("down"))
                    }
                }),
            )
        })
        .and_then(|r| {
            r.register(
                ToolDescriptor::new("sleepy", "Never answers; notices cancellation", json!({"type": "object"})).timeout_ms(200),
                handler(move |call: ToolInvocation| {
                    let probes = Arc::clone(&sleepy);
                    async move {
                        // Dropped when the call is cancelled: the guard records that.
                        struct Noticed(Arc<Probes>);
                        impl Drop for Noticed {
                            fn drop(&mut self) {
                                self.0.sleepy_cancelled.store(true, Ordering::SeqCst);
                            }
                        }
                        let _noticed = Noticed(probes);
                        call.context.cancelled().await;
                        Err::<ToolOutput, _>(ToolError::new("TOOL_CANCELLED", "cancelled"))
                    }
                }),
            )
        })
        .and_then(|r| {
            r.register(
                ToolDescriptor::new("typed", "Doubles n", json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 8}}}))
                    .returns(json!({"type": "object", "required": ["doubled"]})),
                handler(move |call: ToolInvocation| {
                    let probes = Arc::clone(&typed);
                    async move {
                        probes.typed_calls.fetch_add(1, Ordering::SeqCst);
                        let n = &call.input["n"];
                        if n == 99 {
                            return Ok(ToolOutput::new(json!({"unexpected": true})));
                        }
                        Ok(ToolOutput::new(json!({"doubled": n.as_i64().unwrap_or(0) * 2, "n_was_integer": n.is_i64() || n.is_u64()})))
                    }
                }),
            )
        })
        .expect("test tools are valid")
        .freeze()
}

struct Setup {
    server: TestServer,
    provider: TestProvider,
    probes: Arc<Probes>,
}

async fn setup_with(options: ServerOptions) -> Setup {
    let server = TestServer::start_with(options).await;
    let probes = Arc::new(Probes::default());
    let provider = TestProvider::start(
        test_tools(&probes),
        &server.endpoint(),
        "testing",
        Duration::from_secs(5),
    )
    .await;
    let mut discovery = server.discovery().await;
    eventually("the provider registers", || {
        let mut discovery = discovery.clone();
        async move { get_service(&mut discovery, 0, "testing").await.is_ok() }
    })
    .await;
    let _ = &mut discovery;
    Setup {
        server,
        provider,
        probes,
    }
}

async fn setup() -> Setup {
    setup_with(ServerOptions {
        provider_health_interval: Duration::from_millis(100),
        ..test_options()
    })
    .await
}

fn request(tool: &str, input: Value) -> pb::InvokeToolRequest {
    pb::InvokeToolRequest {
        meta: meta(0),
        tool_name: tool.into(),
        input: toolplane::json::json_to_struct(&input),
        ..Default::default()
    }
}

async fn invoker(server: &TestServer) -> ToolInvokeServiceClient<Channel> {
    ToolInvokeServiceClient::new(server.channel().await)
}

async fn records(
    client: &mut ToolInvokeServiceClient<Channel>,
    tool: &str,
) -> Vec<pb::InvocationRecord> {
    client
        .list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(0),
            tool_name: tool.into(),
            ..Default::default()
        })
        .await
        .expect("records")
        .into_inner()
        .records
}

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

/// A call past the tool's timeout is DEADLINE_EXCEEDED (TOOL_TIMEOUT) and the provider sees
/// the cancellation.
#[tokio::test(flavor = "multi_thread")]
async fn timeout_cancels_the_call_at_the_provider() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let error = client
        .invoke_tool(request("sleepy", json!({})))
        .await
        .expect_err("times out");
    assert_eq!(error.code(), Code::DeadlineExceeded);
    assert_eq!(reason(&error), "TOOL_TIMEOUT");
    let probes = Arc::clone(&setup.probes);
    eventually("the provider observes the cancellation", || {
        let probes = Arc::clone(&probes);
        async move { probes.sleepy_cancelled.load(Ordering::SeqCst) }
    })
    .await;
    let written = records(&mut client, "sleepy").await;
    assert_eq!(written[0].status, pb::InvocationStatus::TimedOut as i32);

    // The caller's own shorter deadline bounds the call too, and is answered before it passes.
    let mut short = tonic::Request::new(request("echo", json!({"x": 1})));
    short.set_timeout(Duration::from_secs(5));
    client
        .invoke_tool(short)
        .await
        .expect("fast call within the caller's deadline");
}

/// Over the service's rate limit is RESOURCE_EXHAUSTED with RetryInfo; the provider is not called.
#[tokio::test(flavor = "multi_thread")]
async fn rate_limit_answers_with_retry_info() {
    let limits = RateLimitConfig {
        per_service: Some(Bucket {
            per_second: 1,
            burst: 2,
        }),
        per_tool: Default::default(),
    };
    let setup = setup_with(ServerOptions {
        rate_limits: limits,
        ..test_options()
    })
    .await;
    let mut client = invoker(&setup.server).await;
    client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect("first within burst");
    client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect("second within burst");
    let error = client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect_err("over the limit");
    assert_eq!(error.code(), Code::ResourceExhausted);
    assert_eq!(reason(&error), "RATE_LIMIT_EXCEEDED");
    use tonic_types::StatusExt;
    let delay = error
        .get_error_details()
        .retry_info()
        .and_then(|retry| retry.retry_delay)
        .expect("RetryInfo");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(1),
        "{delay:?}"
    );
    assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        records(&mut client, "echo").await[0].status,
        pb::InvocationStatus::RateLimited as i32
    );
}

fn retry_policy(max_attempts: u32) -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 10_000_000,
        }),
        ..Default::default()
    })
}

/// With a policy and the RETRY capability, UNAVAILABLE is retried with the same idempotency key.
#[tokio::test(flavor = "multi_thread")]
async fn retries_follow_the_callers_policy() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let input = json!({"n": 7, "nested": {"list": [1, "two", null, 4.5]}});
    let mut call = request("flaky", input.clone());
    call.retry_policy = retry_policy(3);
    call.idempotency_key = "key-1".into();
    let answer = client
        .invoke_tool(call)
        .await
        .expect("third attempt succeeds")
        .into_inner();
    assert_eq!(
        value_to_json(answer.output.as_ref().expect("output")).expect("json"),
        json!({"attempt": 3})
    );
    assert_eq!(answer.record.expect("record").attempts, 3);
    assert_eq!(
        *setup.probes.idempotency_keys.lock().expect("lock"),
        ["key-1", "key-1", "key-1"]
    );
    assert_eq!(
        *setup.probes.flaky_inputs.lock().expect("lock"),
        [input.clone(), input.clone(), input],
        "every attempt carries the caller's input"
    );
}

/// Without a policy there is exactly one attempt; without RETRY the policy does not apply.
#[tokio::test(flavor = "multi_thread")]
async fn no_retry_without_policy_or_capability() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let error = client
        .invoke_tool(request("flaky", json!({})))
        .await
        .expect_err("first attempt fails");
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(reason(&error), "TOOL_UNAVAILABLE");
    assert_eq!(setup.probes.flaky_calls.load(Ordering::SeqCst), 1);

    let mut call = request("flaky_not_retryable", json!({}));
    call.retry_policy = retry_policy(5);
    client.invoke_tool(call).await.expect_err("not retryable");
    assert_eq!(
        setup.probes.flaky_calls.load(Ordering::SeqCst),
        2,
        "one more call, no retries"
    );
    let written = records(&mut client, "flaky_not_retryable").await;
    assert_eq!(
        (written[0].status, written[0].attempts),
        (pb::InvocationStatus::Unavailable as i32, 1)
    );

    let bad_policy = pb::InvokeToolRequest {
        retry_policy: retry_policy(0),
        ..request("flaky", json!({}))
    };
    let error = client
        .invoke_tool(bad_policy)
        .await
        .expect_err("bad policy");
    assert_eq!(violations(&error)[0].0, "retry_policy.max_attempts");
}

/// A provider that is not listening is UNAVAILABLE at once, not after the tool's timeout.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_provider_is_unavailable() {
    let server = TestServer::start().await;
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let mut discovery = server.discovery().await;
    let mut gone = registration("gone", vec![simple_tool("t")]);
    gone.endpoint = format!("http://127.0.0.1:{port}");
    gone.tools[0].timeout_ms = Some(30_000);
    register_ok(&mut discovery, 0, gone).await;
    let mut client = invoker(&server).await;
    let error = client
        .invoke_tool(request("t", json!({})))
        .await
        .expect_err("nobody listens");
    assert_eq!(error.code(), Code::Unavailable);
    let written = records(&mut client, "t").await;
    assert_eq!(
        written[0].status,
        pb::InvocationStatus::Unavailable as i32,
        "failed fast, not TIMED_OUT"
    );
}

/// Waits until HealthService reports `state` for the test provider's service.
async fn wait_for_health(
    health: &pb::health_service_client::HealthServiceClient<Channel>,
    state: pb::HealthState,
) {
    eventually(&format!("HealthService reports {state:?}"), || {
        let mut health = health.clone();
        async move {
            let request = pb::GetServiceHealthRequest {
                meta: meta(0),
                service_name: "testing".into(),
            };
            health
                .get_service_health(request)
                .await
                .is_ok_and(|a| a.into_inner().status == state as i32)
        }
    })
    .await;
}

/// A provider failing its health check shows as UNHEALTHY / NOT_SERVING and is refused at
/// once, while its lease keeps it registered; it recovers when healthy again.
#[tokio::test(flavor = "multi_thread")]
async fn failing_health_check_marks_unhealthy_and_fails_fast() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let health = pb::health_service_client::HealthServiceClient::new(setup.server.channel().await);
    let mut standard =
        tonic_health::pb::health_client::HealthClient::new(setup.server.channel().await);
    setup.provider.health.set_serving(false).await;
    wait_for_health(&health, pb::HealthState::Unhealthy).await;
    let mut discovery = setup.server.discovery().await;
    assert_eq!(
        get_service(&mut discovery, 0, "testing")
            .await
            .expect("still registered")
            .service_health,
        pb::HealthState::Unhealthy as i32
    );
    let status = standard
        .check(tonic_health::pb::HealthCheckRequest {
            service: "testing".into(),
        })
        .await
        .expect("known")
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );

    let error = client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect_err("unhealthy provider");
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(reason(&error), "TOOL_UNHEALTHY");
    assert_eq!(setup.probes.echo_calls.load(Ordering::SeqCst), 0);

    setup.provider.health.set_serving(true).await;
    wait_for_health(&health, pb::HealthState::Healthy).await;
    client
        .invoke_tool(request("echo", json!({})))
        .await
        .expect("served again");
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
    let fetched = client
        .get_invocation_record(pb::GetInvocationRecordRequest {
            meta: meta(0),
            invocation_id: written[0].invocation_id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(
        fetched.record.expect("record").sequence,
        written[0].sequence
    );
    let other_tenant = client
        .get_invocation_record(pb::GetInvocationRecordRequest {
            meta: meta(5),
            invocation_id: written[0].invocation_id.clone(),
        })
        .await
        .expect_err("not visible to tenant 5");
    assert_eq!(other_tenant.code(), Code::NotFound);
}
