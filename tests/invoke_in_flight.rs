//! The bound on invocations in flight per (tenant, service), through the real server against a
//! real provider on loopback: past it a call is refused at once without reaching the provider,
//! and a slot comes back when a call is answered and when its caller goes away.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::invoke_fixture::{invoker, records, request};
use common::provider::TestProvider;
use common::*;
use serde_json::json;
use tokio::sync::Notify;
use tonic::Code;
use toolplane::grpc::ServerOptions;
use toolplane::invoke::limits::RateLimitConfig;
use toolplane::pb;
use toolplane::provider::{
    ToolDescriptor, ToolError, ToolInvocation, ToolOutput, ToolRegistry, handler,
};

/// What the gate provider's tools saw, and the gate its `held` calls wait at.
#[derive(Default)]
struct Gate {
    held_calls: AtomicU32,
    quick_calls: AtomicU32,
    open: Notify,
}

/// A provider of `held` (answers when the gate lets one call through, or when cancelled) and
/// `quick` (answers at once), registered as service `gate`.
async fn start_gate(server: &TestServer, gate: &Arc<Gate>) -> TestProvider {
    let (held, quick) = (Arc::clone(gate), Arc::clone(gate));
    let tools = ToolRegistry::new()
        .register(
            ToolDescriptor::new("held", "Waits at the gate", json!({"type": "object"})),
            handler(move |call: ToolInvocation| {
                let gate = Arc::clone(&held);
                async move {
                    gate.held_calls.fetch_add(1, Ordering::SeqCst);
                    tokio::select! {
                        () = gate.open.notified() => Ok(ToolOutput::new(json!({"through": true}))),
                        () = call.context.cancelled() => Err(ToolError::new("TOOL_CANCELLED", "cancelled")),
                    }
                }
            }),
        )
        .and_then(|registry| {
            registry.register(
                ToolDescriptor::new("quick", "Answers at once", json!({"type": "object"})),
                handler(move |_call: ToolInvocation| {
                    let gate = Arc::clone(&quick);
                    async move {
                        gate.quick_calls.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::new(json!({})))
                    }
                }),
            )
        })
        .expect("valid tools")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), "gate", Duration::from_secs(30)).await;
    wait_registered(server, "gate").await;
    provider
}

type HeldCall =
    tokio::task::JoinHandle<Result<tonic::Response<pb::InvokeToolResponse>, tonic::Status>>;

/// `count` more `held` calls in flight, spawned; answers once the provider holds them.
async fn hold(server: &TestServer, gate: &Arc<Gate>, count: u32) -> Vec<HeldCall> {
    let before = gate.held_calls.load(Ordering::SeqCst);
    let mut calls = Vec::new();
    for _ in 0..count {
        let mut client = invoker(server).await;
        calls.push(tokio::spawn(async move {
            client.invoke_tool(request("held", json!({}))).await
        }));
    }
    eventually("the provider holds the calls", || {
        let gate = Arc::clone(gate);
        async move { gate.held_calls.load(Ordering::SeqCst) == before + count }
    })
    .await;
    calls
}

/// With `max_in_flight_per_service` 2 and two calls held at the provider, a third call to the
/// service (to another of its tools) is refused RESOURCE_EXHAUSTED (RATE_LIMIT_CONCURRENCY)
/// without reaching the provider, and recorded RATE_LIMITED; once a held call is answered, or
/// its caller goes away, calls go through again.
#[tokio::test(flavor = "multi_thread")]
async fn calls_past_the_bound_in_flight_are_refused_until_one_ends() {
    let server = TestServer::start_with(ServerOptions {
        rate_limits: RateLimitConfig {
            max_in_flight_per_service: 2,
            ..RateLimitConfig::default()
        },
        ..test_options()
    })
    .await;
    let gate = Arc::new(Gate::default());
    let provider = start_gate(&server, &gate).await;
    let mut client = invoker(&server).await;

    let mut held = hold(&server, &gate, 2).await;
    let error = client
        .invoke_tool(request("quick", json!({})))
        .await
        .expect_err("no slot left");
    assert_eq!(error.code(), Code::ResourceExhausted, "{error:?}");
    assert_eq!(reason(&error), "RATE_LIMIT_CONCURRENCY", "{error:?}");
    assert!(
        error.message().contains("max_in_flight_per_service"),
        "{}",
        error.message()
    );
    assert_eq!(gate.quick_calls.load(Ordering::SeqCst), 0, "not called");
    let recorded = records(&mut client, "quick").await;
    assert_eq!(recorded[0].status, pb::InvocationStatus::RateLimited as i32);
    assert_eq!(recorded[0].error_reason, "RATE_LIMIT_CONCURRENCY");

    // One held call is answered: its slot comes back.
    gate.open.notify_one();
    let finished = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(finished) = held.iter().position(|call| call.is_finished()) {
                return finished;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("a held call is answered once the gate opens");
    let answered = held.swap_remove(finished);
    answered
        .await
        .expect("joined")
        .expect("the gate let the call through");
    client
        .invoke_tool(request("quick", json!({})))
        .await
        .expect("a slot again");

    // Fill the slots again, then the callers of both held calls go away: their slots come
    // back too, though the provider never answered them.
    held.extend(hold(&server, &gate, 1).await);
    let full = client
        .invoke_tool(request("quick", json!({})))
        .await
        .expect_err("full again");
    assert_eq!(reason(&full), "RATE_LIMIT_CONCURRENCY", "{full:?}");
    for call in held {
        call.abort();
    }
    eventually("the abandoned calls give their slots back", || {
        let mut client = client.clone();
        async move {
            client
                .invoke_tool(request("quick", json!({})))
                .await
                .is_ok()
        }
    })
    .await;
    provider.stop().await;
}
