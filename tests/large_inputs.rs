//! Large InvokeTool inputs and outputs through the real server on loopback: they are read,
//! digested and checked against the tool's schemas off the threads that serve calls, so the
//! caller's other calls on the same connection go on meanwhile, and a check that outlasts the
//! caller's deadline is answered at the deadline and recorded. An output is passed on only
//! when the caller's client can read the answer around it.

use crate::common;

use std::time::{Duration, Instant};

use common::invoke_fixture::{records, request};
use common::provider::TestProvider;
use common::*;
use serde_json::{Value, json};
use tonic::Code;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::provider::{ToolDescriptor, ToolInvocation, ToolOutput, ToolRegistry, handler};

/// A tool whose schema checks every string against a pattern with look-ahead, which runs on
/// the backtracking engine: its first branch takes thousands of steps on a string of 11 `a`s
/// before the second matches it (within the engine's limit of 10,000), as careless provider
/// schemas can.
async fn register_slow_tool(server: &TestServer) {
    register_slow_tool_of(server, 0).await;
}

/// [`register_slow_tool`] for `tenant`.
pub(crate) async fn register_slow_tool_of(server: &TestServer, tenant: u64) {
    let schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "string",
            "pattern": "^(?:(a|a)*(?=b)|a*)$",
        }}},
    });
    let mut discovery = server.discovery().await;
    // No provider listens there: the calls below never get as far as calling it.
    let mut registration = registration("checker", vec![tool("check", schema)]);
    registration.endpoint = "http://127.0.0.1:9".into();
    // Nothing heartbeats: a lease outlasting the slow checks of a busy machine (a check of
    // 12 s alone took past the usual 30 s in a full run).
    registration.ttl = Some(prost_types::Duration {
        seconds: 600,
        nanos: 0,
    });
    register_ok(&mut discovery, tenant, registration).await;
}

/// Large enough to be checked off the serving threads (about 45 KB encoded), and slow to
/// check: several seconds in a debug build, about half a second in a release build.
pub(crate) fn large_input() -> Value {
    json!({"items": vec!["aaaaaaaaaaa"; 3_000]})
}

fn with_timeout<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

/// Small calls on `channel`, each refused for its input, until `big` is answered: how many
/// were answered before it, and how long the slowest took.
async fn small_calls_until<T>(
    big: &tokio::task::JoinHandle<T>,
    channel: tonic::transport::Channel,
) -> (usize, Duration) {
    let mut small = ToolInvokeServiceClient::new(channel);
    let (mut answered_meanwhile, mut slowest) = (0, Duration::ZERO);
    while !big.is_finished() {
        let sent = Instant::now();
        let error = small
            .invoke_tool(request("check", json!({"items": ["x"]})))
            .await
            .expect_err("the small input does not match");
        assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
        slowest = slowest.max(sent.elapsed());
        if !big.is_finished() {
            answered_meanwhile += 1;
        }
    }
    (answered_meanwhile, slowest)
}

fn assert_not_held_up(answered_meanwhile: usize, slowest: Duration, big_took: Duration) {
    assert!(
        answered_meanwhile > 10,
        "small calls answered meanwhile: {answered_meanwhile}"
    );
    assert!(
        slowest < big_took / 2,
        "no small call waited for the large one: the slowest took {slowest:?} of {big_took:?}"
    );
}

/// While a large input is being checked, a small call on the same connection is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_input_does_not_hold_up_the_connections_other_calls() {
    let server = TestServer::start().await;
    register_slow_tool(&server).await;
    let channel = server.channel().await;
    let mut invoke = ToolInvokeServiceClient::new(channel.clone());

    let big_request = request("check", large_input());
    let started = Instant::now();
    let big = tokio::spawn(async move { invoke.invoke_tool(big_request).await });
    let (answered_meanwhile, slowest) = small_calls_until(&big, channel).await;
    let big_took = started.elapsed();
    let outcome = big.await.expect("the large call ends");
    assert_eq!(
        outcome.expect_err("no provider").code(),
        Code::Unavailable,
        "checked, then the provider is called"
    );
    assert_not_held_up(answered_meanwhile, slowest, big_took);
}

/// A provider of `answer_at_length`, which answers with [`large_input`], checked against an
/// output schema as slow as [`register_slow_tool`]'s, within `timeout_ms` when given.
async fn start_talker(server: &TestServer, timeout_ms: Option<u32>) -> TestProvider {
    let output_schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "string", "pattern": "^(?:(a|a)*(?=b)|a*)$",
        }}},
    });
    let tool = ToolDescriptor::new(
        "answer_at_length",
        "Answers with many strings",
        json!({"type": "object"}),
    )
    .returns(output_schema);
    let tool = match timeout_ms {
        Some(timeout_ms) => tool.timeout_ms(timeout_ms),
        None => tool,
    };
    let tools = ToolRegistry::new()
        .register(
            tool,
            handler(|_call: ToolInvocation| async { Ok(ToolOutput::new(large_input())) }),
        )
        .expect("a valid tool")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), "talker", Duration::from_secs(30)).await;
    wait_registered(server, "talker").await;
    provider
}

/// While a large output is being read and checked against the tool's output schema, a small
/// call on the same connection is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_output_does_not_hold_up_the_connections_other_calls() {
    let server = TestServer::start().await;
    register_slow_tool(&server).await;
    let provider = start_talker(&server, None).await;
    let channel = server.channel().await;
    let mut invoke = ToolInvokeServiceClient::new(channel.clone());

    let started = Instant::now();
    let big = tokio::spawn(async move {
        invoke
            .invoke_tool(request("answer_at_length", json!({})))
            .await
    });
    let (answered_meanwhile, slowest) = small_calls_until(&big, channel).await;
    let big_took = started.elapsed();
    let answer = big
        .await
        .expect("the large call ends")
        .expect("answered")
        .into_inner();
    assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
    assert_eq!(
        answer.record.expect("record").status,
        pb::InvocationStatus::Succeeded as i32
    );
    assert_not_held_up(answered_meanwhile, slowest, big_took);
    provider.stop().await;
}

/// An output check that outlasts the call's deadline (here the tool's own `timeout_ms`; a
/// caller's deadline counts the same) is answered DEADLINE_EXCEEDED (VALIDATION_TIMEOUT,
/// naming the output's size) and recorded TIMED_OUT, rather than run on to its end.
#[tokio::test(flavor = "multi_thread")]
async fn an_output_check_that_outlasts_the_deadline_is_answered_and_recorded() {
    let server = TestServer::start().await;
    // The check takes several seconds in a debug build.
    let provider = start_talker(&server, Some(1_000)).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);

    let error = client
        .invoke_tool(request("answer_at_length", json!({})))
        .await
        .expect_err("not checked in time");
    assert_eq!(error.code(), Code::DeadlineExceeded, "{error:?}");
    assert_eq!(reason(&error), "VALIDATION_TIMEOUT", "{error:?}");
    let details = tonic_types::StatusExt::get_details_error_info(&error).expect("ErrorInfo");
    let bytes: usize = details.metadata["output_bytes"].parse().expect("a size");
    assert!(bytes > 16 * 1024, "{details:?}");
    assert_eq!(details.metadata["attempts"], "1", "{details:?}");
    assert!(error.message().contains("answered"), "{}", error.message());

    let recorded = records(&mut client, "answer_at_length").await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].status, pb::InvocationStatus::TimedOut as i32);
    assert_eq!(recorded[0].error_reason, "VALIDATION_TIMEOUT");
    assert_eq!(recorded[0].attempts, 1);
    assert!(recorded[0].output_sha256.is_empty(), "{:?}", recorded[0]);
    assert_eq!(details.metadata["invocation_id"], recorded[0].invocation_id);
    provider.stop().await;
}

/// Whether `error` is the server's answer at the deadline (DEADLINE_EXCEEDED, reason
/// VALIDATION_TIMEOUT), rather than the client's own ([`client_timed_out`]). Any other error
/// fails the test.
fn answered_by_the_server(error: &tonic::Status) -> bool {
    if client_timed_out(error) {
        return false;
    }
    assert_eq!(error.code(), Code::DeadlineExceeded, "{error:?}");
    assert_eq!(reason(error), "VALIDATION_TIMEOUT", "{error:?}");
    true
}

/// A check that outlasts the caller's deadline is answered DEADLINE_EXCEEDED
/// (VALIDATION_TIMEOUT) at the deadline, and an InvokeTool recorded TIMED_OUT.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_that_outlasts_the_deadline_is_answered_at_the_deadline() {
    let server = TestServer::start().await;
    register_slow_tool(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);

    let error = client
        .invoke_tool(with_timeout(
            request("check", large_input()),
            Duration::from_secs(1),
        ))
        .await
        .expect_err("not checked in time");
    if answered_by_the_server(&error) {
        assert!(error.message().contains("check"), "{}", error.message());
    }

    // ValidateToolInput checks as InvokeTool does.
    let error = client
        .validate_tool_input(with_timeout(
            pb::ValidateToolInputRequest {
                meta: meta(0),
                tool_name: "check".into(),
                input: toolplane::json::json_to_struct(&large_input()),
                ..Default::default()
            },
            Duration::from_secs(1),
        ))
        .await
        .expect_err("not checked in time");
    answered_by_the_server(&error);

    // Recorded as the server timed it out, whichever answer the caller saw.
    let recorded = records(&mut client, "check").await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].status, pb::InvocationStatus::TimedOut as i32);
    assert_eq!(recorded[0].error_reason, "VALIDATION_TIMEOUT");
}

/// A check given up at its caller's deadline stops, and gives its thread back: with every
/// thread of the heavy work's pool taken by a check of a minute or more (in a debug build)
/// whose caller gave up after 300 ms, another large input is checked within its own deadline.
/// Before, the checks ran to their end, and every large input and tool search of every tenant
/// waited for them.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_given_up_at_the_deadline_frees_its_thread() {
    let server = TestServer::start().await;
    register_slow_tool(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);

    // At least as many as the pool has threads (half the CPUs).
    let threads = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
    let long_input = json!({"items": vec!["aaaaaaaaaaa"; 60_000]});
    for _ in 0..threads {
        let error = client
            .invoke_tool(with_timeout(
                request("check", long_input.clone()),
                Duration::from_millis(300),
            ))
            .await
            .expect_err("not checked in time");
        answered_by_the_server(&error);
    }

    let quick_input = json!({"items": vec!["x"; 20_000]});
    let error = client
        .invoke_tool(with_timeout(
            request("check", quick_input),
            Duration::from_secs(20),
        ))
        .await
        .expect_err("refused for its input");
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    assert_eq!(reason(&error), "VALIDATION_INPUT", "{error:?}");
}

/// `input` of `check` checked for `tenant`, waited for up to two minutes.
pub(crate) fn check_request(
    tenant: u64,
    input: &Value,
) -> tonic::Request<pb::ValidateToolInputRequest> {
    let request = pb::ValidateToolInputRequest {
        meta: meta(tenant),
        tool_name: "check".into(),
        input: toolplane::json::json_to_struct(input),
        ..Default::default()
    };
    with_timeout(request, Duration::from_secs(120))
}

/// The heavy work's pool takes the tenants' large inputs in turns: with a burst of one
/// tenant's slow checks waiting for it, another tenant's large input is checked after about
/// one of them per thread, not after the whole burst. Before, the pool took them in the order
/// they came, so the other tenant's input (or tool search) waited for every one of them.
#[tokio::test(flavor = "multi_thread")]
async fn one_tenants_burst_of_large_inputs_does_not_hold_up_anothers() {
    const BUSY: u64 = 1;
    const OTHER: u64 = 2;
    let server = TestServer::start().await;
    register_slow_tool_of(&server, BUSY).await;
    register_slow_tool_of(&server, OTHER).await;
    // Eight checks per thread of the pool (half the CPUs), each about a second in a debug build.
    let threads = std::thread::available_parallelism().map_or(1, |cpus| (cpus.get() / 2).max(1));
    let burst = 8 * threads;
    let slow_input = json!({"items": vec!["aaaaaaaaaaa"; 1_500]});
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut calls = tokio::task::JoinSet::new();
    let busy_channel = server.channel().await;
    for _ in 0..burst {
        let mut client = ToolInvokeServiceClient::new(busy_channel.clone());
        let (request, answered) = (check_request(BUSY, &slow_input), answered.clone());
        calls.spawn(async move {
            let answer = client.validate_tool_input(request).await;
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            answer
        });
    }
    // The burst reaches the server (and the pool) before the other tenant's input does.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut other = ToolInvokeServiceClient::new(server.channel().await);
    let other_input = json!({"items": vec!["x"; 20_000]});
    let error = other
        .validate_tool_input(check_request(OTHER, &other_input))
        .await
        .expect_err("refused for its input");
    let answered_before = answered.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(error.code(), Code::InvalidArgument, "{error:?}");
    assert!(
        answered_before < burst / 2,
        "{answered_before} of the busy tenant's {burst} checks were answered before the other's"
    );
    // The rest of the burst is given up (its callers gone), and the checks stop.
    calls.abort_all();
}

/// `ValidateToolInput` without a deadline of the caller's is answered within
/// `max_invoke_timeout`, as `InvokeTool` is. Before, it waited for the whole check (a minute
/// or more here, in a debug build), holding a thread of the heavy work's pool.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_without_a_callers_deadline_ends_at_the_servers() {
    let server = TestServer::start_with(toolplane::grpc::ServerOptions {
        max_invoke_timeout: Duration::from_secs(1),
        ..test_options()
    })
    .await;
    register_slow_tool(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let long_input = json!({"items": vec!["aaaaaaaaaaa"; 60_000]});
    let error = client
        .validate_tool_input(pb::ValidateToolInputRequest {
            meta: meta(0),
            tool_name: "check".into(),
            input: toolplane::json::json_to_struct(&long_input),
            ..Default::default()
        })
        .await
        .expect_err("not checked in time");
    assert!(answered_by_the_server(&error), "{error:?}");
    assert!(error.message().contains("within"), "{error:?}");
}

/// A provider of `sized`, answering `{"s": "x" * n}` and `keys` more keys of `key_bytes`
/// bytes, whose values (strings) the output schema refuses (it takes numbers).
async fn start_sized(server: &TestServer) -> TestProvider {
    let tool = ToolDescriptor::new(
        "sized",
        "Answers at the size asked for",
        json!({"type": "object"}),
    )
    .returns(json!({
        "type": "object",
        "properties": {"s": {"type": "string"}},
        "additionalProperties": {"type": "number"},
    }));
    let answer = handler(|call: ToolInvocation| async move {
        let size = |key: &str| call.input[key].as_u64().unwrap_or_default() as usize;
        let mut output = serde_json::Map::new();
        output.insert("s".into(), Value::String("x".repeat(size("n"))));
        for key in 0..size("keys") {
            let name = format!("{key:0>width$}", width = size("key_bytes"));
            output.insert(name, Value::String("not a number".into()));
        }
        Ok(ToolOutput::new(Value::Object(output)))
    });
    common::provider::start_one_tool_provider(server, "sized", tool, answer).await
}

/// An answer of 4 MiB less 400 bytes from the provider was passed on, recorded SUCCEEDED, and
/// refused by the caller's client (OUT_OF_RANGE, past the 4 MiB it reads): the call's outcome
/// was lost to the caller. A provider's answer is now read up to 4 MiB less 64 KiB, the room
/// toolplane's answer needs around it; past that the call fails OUT_OF_RANGE, recorded FAILED.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_answer_past_what_the_caller_reads_is_a_failure() {
    let server = TestServer::start().await;
    let provider = start_sized(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let error = client
        .invoke_tool(request("sized", json!({"n": 4 * 1024 * 1024 - 400})))
        .await
        .expect_err("too large to pass on");
    assert_eq!(error.code(), Code::OutOfRange, "{error:?}");
    assert!(
        error
            .message()
            .contains("the provider's answer is larger than"),
        "{error:?}"
    );
    let written = records(&mut client, "sized").await;
    assert_eq!(written[0].status, pb::InvocationStatus::Failed as i32);
    provider.stop().await;
}

/// An output of 3.9 MB breaking its output schema at 20 keys of 40 KB: answered whole, with
/// its first mismatch, the warning naming its key cut to about 1 KB. Twenty warnings naming
/// the keys whole took 800 KB more, and the answer past what the caller's client reads.
#[tokio::test(flavor = "multi_thread")]
async fn warnings_about_an_output_stay_small_beside_it() {
    let server = TestServer::start().await;
    let provider = start_sized(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let input = json!({"n": 3 * 1024 * 1024, "keys": 20, "key_bytes": 40_000});
    let answer = client
        .invoke_tool(request("sized", input))
        .await
        .expect("answered whole")
        .into_inner();
    assert_eq!(answer.warnings.len(), 1, "{:?}", answer.warnings.len());
    for warning in &answer.warnings {
        assert!(warning.len() < 2048, "{} bytes", warning.len());
    }
    assert_eq!(
        answer.record.expect("record").status,
        pb::InvocationStatus::Succeeded as i32
    );
    provider.stop().await;
}
