//! InvokeTool when things go wrong, through the real server against real provider servers on
//! loopback: deadlines with cancellation at the provider, rate limits with retry info, retries
//! under the caller's policy (and none without it), unreachable and unhealthy providers, and a
//! provider whose error details do not decode, and a tool whose handler panics.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::invoke_fixture::*;
use common::*;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;
use toolplane::grpc::ServerOptions;
use toolplane::invoke::limits::{Bucket, RateLimitConfig};
use toolplane::json::value_to_json;
use toolplane::pb;
use toolplane::provider::{ToolDescriptor, ToolInvocation, ToolOutput, ToolRegistry, handler};

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
    assert_eq!(
        written[0].input_sha256,
        toolplane::json::canonical_sha256(&json!({})),
        "a timed-out call's record holds its input's digest"
    );

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
        ..Default::default()
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

/// With a policy and the RETRY capability, UNAVAILABLE is retried with the same idempotency key
/// and the caller's trace context.
#[tokio::test(flavor = "multi_thread")]
async fn retries_follow_the_callers_policy() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let input = json!({"n": 7, "nested": {"list": [1, "two", null, 4.5]}});
    let mut call = request("flaky", input.clone());
    call.retry_policy = retry_policy(3);
    call.idempotency_key = "key-1".into();
    let mut call = tonic::Request::new(call);
    call.metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().expect("ascii"));
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
    let trace = Some((TRACEPARENT.to_owned(), None));
    assert_eq!(
        *setup.probes.traces.lock().expect("lock"),
        [trace.clone(), trace.clone(), trace],
        "every attempt carries the caller's trace context"
    );
}

/// A policy's backoff as long as a protobuf Duration goes (about 292 billion years) is a
/// wait past any deadline: the failure is answered at once, no retry. Adding it to the clock
/// panicked (the call was cut off, INTERNAL, with no record), certainly with the least jitter
/// (which draws the longest wait).
#[tokio::test(flavor = "multi_thread")]
async fn a_backoff_past_any_deadline_answers_the_failure() {
    let setup = setup().await;
    let mut client = invoker(&setup.server).await;
    let forever = Some(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    });
    let mut call = request("flaky", json!({}));
    call.retry_policy = Some(pb::RetryPolicy {
        max_attempts: 3,
        initial_backoff: forever,
        max_backoff: forever,
        jitter: f64::MIN_POSITIVE,
        ..Default::default()
    });
    let error = client.invoke_tool(call).await.expect_err("not retried");
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    assert_eq!(reason(&error), "TOOL_UNAVAILABLE");
    let written = records(&mut client, "flaky").await;
    assert_eq!(
        (written[0].status, written[0].attempts),
        (pb::InvocationStatus::Unavailable as i32, 1)
    );
}

/// A W3C `traceparent` (version 00).
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

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
    let port = toolplane::bench::procs::free_port().expect("a free port");
    register_one_tool(&server, "gone", "t", format!("http://127.0.0.1:{port}")).await;
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
    wait_for_health_of(health, "testing", state).await;
}

/// Waits until HealthService reports `state` for `service`.
async fn wait_for_health_of(
    health: &pb::health_service_client::HealthServiceClient<Channel>,
    service: &str,
    state: pb::HealthState,
) {
    eventually(
        &format!("HealthService reports {service} {state:?}"),
        || {
            let mut health = health.clone();
            let service = service.to_owned();
            async move {
                let request = pb::GetServiceHealthRequest {
                    meta: meta(0),
                    service_name: service,
                };
                health
                    .get_service_health(request)
                    .await
                    .is_ok_and(|a| a.into_inner().status == state as i32)
            }
        },
    )
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

/// A provider on loopback, written on the h2 crate, whose every stream `answer` answers
/// (`true` for a health check). Its tasks end with the test's runtime.
async fn h2_provider<F>(answer: F) -> String
where
    F: Fn(h2::server::SendResponse<bytes::Bytes>, bool) + Clone + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = connection.accept().await {
                    answer(
                        respond,
                        request.uri().path() == "/grpc.health.v1.Health/Check",
                    );
                }
            });
        }
    });
    endpoint
}

/// Registers `service` at `endpoint` with one tool, `tool`, whose timeout (30 s) is far off.
async fn register_one_tool(server: &TestServer, service: &str, tool: &str, endpoint: String) {
    let mut registration = registration(service, vec![simple_tool(tool)]);
    registration.endpoint = endpoint;
    registration.tools[0].timeout_ms = Some(30_000);
    register_ok(&mut server.discovery().await, 0, registration).await;
}

/// A trailers-only gRPC answer with `grpc-status` `code`, to add headers to.
fn trailers_only(code: &str) -> http::response::Builder {
    http::Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", code)
}

/// A provider that answers every call with status `code` and a `grpc-status-details-bin` that
/// is not base64 (tonic's status reader panics on one), and the health check with
/// `health_code`.
async fn garbling_provider(code: &'static str, health_code: &'static str) -> String {
    h2_provider(move |mut respond, health| {
        let answer = trailers_only(if health { health_code } else { code })
            .header("grpc-message", "overloaded")
            .header("grpc-status-details-bin", "%%% not base64 %%%")
            .body(())
            .expect("an answer");
        let _ = respond.send_response(answer, true);
    })
    .await
}

/// Error details that do not decode are dropped and said so: the caller gets the provider's
/// status and message, and the call is recorded as the provider's failure.
#[tokio::test(flavor = "multi_thread")]
async fn provider_error_details_that_do_not_decode_are_reported() {
    let server = TestServer::start().await;
    // FAILED_PRECONDITION for calls; UNIMPLEMENTED (counts as healthy) for health checks.
    let endpoint = garbling_provider("9", "12").await;
    register_one_tool(&server, "garbled", "g", endpoint).await;
    let mut client = invoker(&server).await;
    let error = client
        .invoke_tool(request("g", json!({})))
        .await
        .expect_err("the provider fails the call");
    assert_eq!(error.code(), Code::FailedPrecondition, "{error:?}");
    assert!(
        error.message().contains("overloaded") && error.message().contains("not base64"),
        "{error:?}"
    );
    assert_eq!(reason(&error), "TOOL_FAILED");
    let written = records(&mut client, "g").await;
    assert_eq!(written[0].status, pb::InvocationStatus::Failed as i32);
}

/// A provider whose failing health check carries error details that do not decode is marked
/// unhealthy, and checking goes on for every other provider.
#[tokio::test(flavor = "multi_thread")]
async fn health_checks_survive_error_details_that_do_not_decode() {
    let setup = setup().await;
    let endpoint = garbling_provider("9", "14").await;
    register_one_tool(&setup.server, "garbled", "g", endpoint).await;
    let health = pb::health_service_client::HealthServiceClient::new(setup.server.channel().await);
    wait_for_health_of(&health, "garbled", pb::HealthState::Unhealthy).await;
    let error = invoker(&setup.server)
        .await
        .invoke_tool(request("g", json!({})))
        .await
        .expect_err("an unhealthy provider");
    assert_eq!(reason(&error), "TOOL_UNHEALTHY");
    assert!(error.message().contains("not base64"), "{error:?}");

    setup.provider.health.set_serving(false).await;
    wait_for_health(&health, pb::HealthState::Unhealthy).await;
    setup.provider.health.set_serving(true).await;
    wait_for_health(&health, pb::HealthState::Healthy).await;
}

/// A tool whose handler panics (a bug in the tool) fails that call with INTERNAL, reason
/// TOOL_FAILED and a FAILED record, without the panic's message; the provider serves the next
/// call.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_handler_that_panics_fails_its_call_not_the_provider() {
    let server = TestServer::start().await;
    let tools = ToolRegistry::new()
        .register(
            ToolDescriptor::new("fragile", "Panics on boom", json!({"type": "object"})),
            handler(|call: ToolInvocation| async move {
                assert!(call.input.get("boom").is_none(), "the tool's own bug");
                Ok(ToolOutput::new(json!({"fine": true})))
            }),
        )
        .expect("a valid tool")
        .freeze();
    let provider = common::provider::TestProvider::start(
        tools,
        &server.endpoint(),
        "fragile-service",
        Duration::from_secs(5),
    )
    .await;
    wait_registered(&server, "fragile-service").await;
    let mut client = invoker(&server).await;

    let error = client
        .invoke_tool(request("fragile", json!({"boom": true})))
        .await
        .expect_err("the handler panics");
    assert_eq!(error.code(), Code::Internal, "{error:?}");
    assert_eq!(reason(&error), "TOOL_FAILED");
    assert!(error.message().contains("panicked"), "{error:?}");
    assert!(
        !error.message().contains("own bug"),
        "the log has it: {error:?}"
    );
    let written = records(&mut client, "fragile").await;
    assert_eq!(written[0].status, pb::InvocationStatus::Failed as i32);

    client
        .invoke_tool(request("fragile", json!({})))
        .await
        .expect("the next call is served");
    provider.stop().await;
}

/// A provider that cuts a call's stream off (RST_STREAM CANCEL, what a tonic server does when
/// its handler panics) long before the deadline: the provider's failure, CANCELLED and
/// recorded FAILED, not a timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_cuts_the_call_off_is_not_a_timeout() {
    let server = TestServer::start().await;
    let endpoint = h2_provider(|mut respond, health| {
        if health {
            // UNIMPLEMENTED: counts as healthy.
            let answer = trailers_only("12").body(()).expect("an answer");
            let _ = respond.send_response(answer, true);
        } else {
            respond.send_reset(h2::Reason::CANCEL);
        }
    })
    .await;
    register_one_tool(&server, "cutting", "c", endpoint).await;
    let mut client = invoker(&server).await;
    let error = client
        .invoke_tool(request("c", json!({})))
        .await
        .expect_err("the provider cuts the call off");
    assert_eq!(error.code(), Code::Cancelled, "{error:?}");
    assert_eq!(reason(&error), "TOOL_FAILED");
    assert!(error.message().contains("provider cancelled"), "{error:?}");
    let written = records(&mut client, "c").await;
    assert_eq!(written[0].status, pb::InvocationStatus::Failed as i32);
}
