//! The invocation tests' provider and server: tools that answer, fail, sleep and check types,
//! with probes of what the provider saw, registered with a real server on loopback.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tonic::transport::Channel;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::provider::{
    RegisteredTools, ToolDescriptor, ToolError, ToolInvocation, ToolOutput, ToolRegistry, handler,
};
use toolplane::registry::Capability;

use super::provider::TestProvider;
use super::*;

/// What the test provider's tools saw.
#[derive(Default)]
pub struct Probes {
    pub echo_calls: AtomicU32,
    pub flaky_calls: AtomicU32,
    pub typed_calls: AtomicU32,
    pub sleepy_cancelled: AtomicBool,
    pub idempotency_keys: Mutex<Vec<String>>,
    pub flaky_inputs: Mutex<Vec<Value>>,
    /// The trace context of each call of `echo` and `flaky`.
    pub traces: Mutex<Vec<SeenTrace>>,
}

/// The `traceparent` and `tracestate` a tool saw, if any.
pub type SeenTrace = Option<(String, Option<String>)>;

impl Probes {
    fn saw_trace(&self, call: &ToolInvocation) {
        let trace = call.context.trace.as_ref().map(|trace| {
            (
                trace.traceparent().to_owned(),
                trace.tracestate().map(str::to_owned),
            )
        });
        self.traces.lock().expect("lock").push(trace);
    }
}

pub fn test_tools(probes: &Arc<Probes>) -> RegisteredTools {
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
                    probes.saw_trace(&call);
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
                        probes.saw_trace(&call);
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

pub struct Setup {
    pub server: TestServer,
    pub provider: TestProvider,
    pub probes: Arc<Probes>,
}

pub async fn setup_with(options: ServerOptions) -> Setup {
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

pub async fn setup() -> Setup {
    setup_with(ServerOptions {
        provider_health_interval: Duration::from_millis(100),
        ..test_options()
    })
    .await
}

/// A request of tenant 0 to invoke `tool` with `input`.
pub fn request(tool: &str, input: Value) -> pb::InvokeToolRequest {
    pb::InvokeToolRequest {
        meta: meta(0),
        tool_name: tool.into(),
        input: toolplane::json::json_to_struct(&input),
        ..Default::default()
    }
}

/// A retry policy of `max_attempts` with a 10 ms first backoff.
pub fn retry_policy(max_attempts: u32) -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts,
        initial_backoff: Some(prost_types::Duration {
            seconds: 0,
            nanos: 10_000_000,
        }),
        ..Default::default()
    })
}

pub async fn invoker(server: &TestServer) -> ToolInvokeServiceClient<Channel> {
    ToolInvokeServiceClient::new(server.channel().await)
}

/// The first page of tenant 0's invocation records of `tool`.
pub async fn records(
    client: &mut ToolInvokeServiceClient<Channel>,
    tool: &str,
) -> Vec<pb::InvocationRecord> {
    first_page(client, 0, tool).await
}

/// The first page of `tenant`'s invocation records of `tool` (every tool when empty).
async fn first_page(
    client: &mut ToolInvokeServiceClient<Channel>,
    tenant: u64,
    tool: &str,
) -> Vec<pb::InvocationRecord> {
    client
        .list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(tenant),
            tool_name: tool.into(),
            ..Default::default()
        })
        .await
        .expect("records")
        .into_inner()
        .records
}

/// InvokeTool of the structs provider's `structs_calculate_power` for tenant 0, with
/// `grams` of alpha matter: the answer, or the status.
pub async fn invoke_power(
    server: &TestServer,
    grams: i64,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    let input = json!({"alpha_matter": grams, "generator_type": "reactor"});
    invoker(server)
        .await
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(0),
            tool_name: "structs_calculate_power".into(),
            input: toolplane::json::json_to_struct(&input),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The first page of `tenant`'s invocation records, of every tool.
pub async fn tenant_records(server: &TestServer, tenant: u64) -> Vec<pb::InvocationRecord> {
    first_page(&mut invoker(server).await, tenant, "").await
}

/// GetInvocationRecord of `invocation_id` for `tenant`: the record, or the status.
pub async fn get_record(
    server: &TestServer,
    tenant: u64,
    invocation_id: &str,
) -> Result<pb::InvocationRecord, tonic::Status> {
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    client
        .get_invocation_record(pb::GetInvocationRecordRequest {
            meta: meta(tenant),
            invocation_id: invocation_id.to_owned(),
        })
        .await
        .map(|response| response.into_inner().record.expect("record set"))
}
