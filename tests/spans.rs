//! Spans exported over OTLP/gRPC by the real server, received by a collector served here from
//! OpenTelemetry's own generated collector service, with a real provider answering the calls.

use crate::common;

use std::sync::Arc;

use common::collector::*;
use common::invoke_fixture::*;
use common::*;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::pb;

/// With `otlp_endpoint` set, each InvokeTool call is a server span, a child of the caller's
/// `traceparent` (or a new trace, whose id the record keeps), and each attempt at the provider
/// a client span under it, which the provider is sent as its parent (tracestate kept); codes
/// and error status follow OpenTelemetry's RPC conventions; everything reaches the collector
/// when the server stops.
#[tokio::test(flavor = "multi_thread")]
async fn calls_and_provider_attempts_are_exported_as_spans() {
    let (endpoint, collector, collector_task) = start_collector().await;
    let setup = exporting_to(endpoint).await;
    let mut client = invoker(&setup.server).await;

    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let mut traced = tonic::Request::new(pb::InvokeToolRequest {
        retry_policy: retry_policy(3),
        ..request("flaky", json!({}))
    });
    let parent = format!("00-{caller_trace}-{caller_span}-01");
    traced
        .metadata_mut()
        .insert("traceparent", parent.parse().expect("ascii"));
    traced
        .metadata_mut()
        .insert("tracestate", "congo=t61rcWkgMzE".parse().expect("ascii"));
    let answer = client
        .invoke_tool(traced)
        .await
        .expect("answered on the third attempt")
        .into_inner();
    assert_eq!(answer.record.expect("record").trace_id, caller_trace);

    let untraced = client
        .invoke_tool(request("echo", json!({"n": 1})))
        .await
        .expect("echoed")
        .into_inner()
        .record
        .expect("record");
    assert_eq!(untraced.trace_id.len(), 32, "a new trace is recorded");

    client
        .invoke_tool(request("no_such_tool", json!({})))
        .await
        .expect_err("not found");

    // Health probes are not traced.
    tonic_health::pb::health_client::HealthClient::new(setup.server.channel().await)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("serving");

    let probes = Arc::clone(&setup.probes);
    let spans = stop_and_collect(setup, &collector, collector_task).await;
    assert!(
        spans
            .iter()
            .all(|(_, span)| !span.name.starts_with("grpc.health")),
        "{spans:#?}"
    );

    let hex = hex::encode;
    let invoke_spans = named(&spans, "toolplane.v1.ToolInvokeService/InvokeTool");
    assert_eq!(invoke_spans.len(), 3, "{spans:#?}");
    assert!(spans.iter().all(|(service, _)| service == "toolplane"));

    // The traced call: a child of the caller's span, three attempts under it.
    let server_span = invoke_spans
        .iter()
        .find(|span| hex(&span.trace_id) == caller_trace)
        .expect("the traced call's span");
    assert_eq!(hex(&server_span.parent_span_id), caller_span);
    assert_eq!(server_span.kind, SpanKind::Server as i32);
    assert_eq!(string_attribute(server_span, "rpc.system"), Some("grpc"));
    assert_eq!(
        string_attribute(server_span, "rpc.service"),
        Some("toolplane.v1.ToolInvokeService")
    );
    assert_eq!(
        string_attribute(server_span, "rpc.method"),
        Some("InvokeTool")
    );
    assert_eq!(int_attribute(server_span, "rpc.grpc.status_code"), Some(0));
    let mut attempts: Vec<&Span> = named(&spans, "toolplane.v1.ToolProviderService/CallTool")
        .into_iter()
        .filter(|span| span.parent_span_id == server_span.span_id)
        .collect();
    attempts.sort_by_key(|span| int_attribute(span, "toolplane.attempt"));
    let codes: Vec<(Option<i64>, Option<i64>)> = attempts
        .iter()
        .map(|span| {
            (
                int_attribute(span, "toolplane.attempt"),
                int_attribute(span, "rpc.grpc.status_code"),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [(Some(1), Some(14)), (Some(2), Some(14)), (Some(3), Some(0))]
    );
    for (span, error) in attempts.iter().zip([true, true, false]) {
        assert_eq!(span.kind, SpanKind::Client as i32);
        assert_eq!(hex(&span.trace_id), caller_trace);
        assert_eq!(string_attribute(span, "toolplane.tool_name"), Some("flaky"));
        let code = span.status.as_ref().map_or(0, |status| status.code);
        assert_eq!(code == StatusCode::Error as i32, error, "{span:#?}");
    }
    // The provider was sent each attempt's span as its parent, with the caller's tracestate.
    let seen = probes.traces.lock().expect("lock").clone();
    let sent: Vec<(String, Option<String>)> = attempts
        .iter()
        .map(|span| {
            (
                format!("00-{caller_trace}-{}-01", hex(&span.span_id)),
                Some("congo=t61rcWkgMzE".to_owned()),
            )
        })
        .collect();
    assert_eq!(
        seen[..3],
        sent.into_iter().map(Some).collect::<Vec<_>>()[..]
    );

    // The untraced call began a trace of its own, which its record names.
    let root = invoke_spans
        .iter()
        .find(|span| hex(&span.trace_id) == untraced.trace_id)
        .expect("the untraced call's span");
    assert!(root.parent_span_id.is_empty());
    let (seen_root, _) = seen[3]
        .clone()
        .expect("the provider was sent the new trace");
    assert!(seen_root.contains(&untraced.trace_id), "{seen_root}");

    // NOT_FOUND is the caller's mistake: coded, not an error of the server's.
    let not_found = invoke_spans
        .iter()
        .find(|span| int_attribute(span, "rpc.grpc.status_code") == Some(5))
        .expect("the unknown tool's span");
    let status = not_found.status.as_ref().map_or(0, |status| status.code);
    assert_ne!(status, StatusCode::Error as i32);
}

/// An agent's turn is a server span, and the tool calls and model calls it makes are client
/// spans under it.
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_tool_calls_and_model_calls_are_spans_under_its_turn() {
    use common::agent_fixture::{agents, complete_request, create};
    let (endpoint, collector, collector_task) = start_collector().await;
    let setup = exporting_to(endpoint).await;
    let mut client = agents(&setup.server).await;
    let agent = create(&mut client, "helper", &[]).await;
    let id = agent.status.expect("status").id;
    client
        .complete(complete_request(
            &id,
            r#"call echo {"n": 2}"#,
            "traced-turn",
        ))
        .await
        .expect("turn completes");
    let spans = stop_and_collect(setup, &collector, collector_task).await;

    let turn = first_named(&spans, "toolplane.v1.AgentService/Complete");
    let tool_call = first_named(&spans, "toolplane.v1.ToolProviderService/CallTool");
    assert_eq!(tool_call.parent_span_id, turn.span_id);
    assert_eq!(tool_call.trace_id, turn.trace_id);
    assert_eq!(
        string_attribute(tool_call, "toolplane.tool_name"),
        Some("echo")
    );
    // Both model calls of the turn (asking, then reflecting), as generative-AI client spans.
    let model_calls = named(&spans, "chat");
    assert_eq!(model_calls.len(), 2, "{spans:#?}");
    for call in model_calls {
        assert_eq!(call.parent_span_id, turn.span_id);
        assert_eq!(call.kind, SpanKind::Client as i32);
        assert_eq!(
            string_attribute(call, "gen_ai.operation.name"),
            Some("chat")
        );
        assert_eq!(
            string_attribute(call, "gen_ai.response.model"),
            Some("toolplane-builtin-echo")
        );
        assert!(int_attribute(call, "gen_ai.usage.input_tokens").is_some_and(|n| n > 0));
        assert!(int_attribute(call, "gen_ai.usage.output_tokens").is_some());
    }
}

/// A collector that is not there, or takes connections and never answers, holds up neither
/// calls nor the server's stop: the spans are dropped, and the stop waits for them a few
/// seconds at most.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_silent_collector_holds_up_neither_calls_nor_stop() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let missing = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    // Takes connections (the kernel's backlog) and never reads from them.
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent = format!("http://{}", silent_listener.local_addr().expect("address"));
    for endpoint in [missing, silent] {
        stop_with_collector_at(endpoint).await;
    }
    drop(silent_listener);
}

async fn stop_with_collector_at(endpoint: String) {
    let setup = exporting_to(endpoint).await;
    let mut client = invoker(&setup.server).await;
    client
        .invoke_tool(request("echo", json!({"n": 3})))
        .await
        .expect("echoed");
    setup.provider.stop().await;
    // A bound far past the stop's own (a few seconds), only so that a hang fails the test.
    tokio::time::timeout(std::time::Duration::from_secs(60), setup.server.stop())
        .await
        .expect("the server stops");
}

/// The binary exports to `TOOLPLANE_OTLP_ENDPOINT` over the protocol `TOOLPLANE_OTLP_PROTOCOL`
/// names (gRPC by default, or HTTP), under the service name the SDK's environment gives (here
/// through `OTEL_RESOURCE_ATTRIBUTES`), with the headers `OTEL_EXPORTER_OTLP_HEADERS` names,
/// and sends the last spans as it stops on SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_exports_under_the_service_name_the_environment_gives() {
    use common::process::ServerProcess;
    for protocol in [None, Some("http/protobuf")] {
        let (endpoint, collector, collector_task) = match protocol {
            None => start_collector().await,
            Some(_) => start_http_collector(None).await,
        };
        let mut environment = vec![
            ("TOOLPLANE_OTLP_ENDPOINT", endpoint.as_str()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=tools-east,deployment.environment=test",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=collector-secret"),
        ];
        environment.extend(protocol.map(|protocol| ("TOOLPLANE_OTLP_PROTOCOL", protocol)));
        let server = ServerProcess::start(&environment);
        let channel = tonic::transport::Channel::from_shared(server.endpoint())
            .expect("an endpoint")
            .connect()
            .await
            .expect("connects");
        pb::discovery_service_client::DiscoveryServiceClient::new(channel)
            .list_services(pb::ListServicesRequest {
                meta: meta(0),
                ..Default::default()
            })
            .await
            .expect("listed");
        let stopped = tokio::task::spawn_blocking(move || server.terminate())
            .await
            .expect("joined");
        assert_eq!(stopped.code(), Some(0));
        collector_task.abort();
        let spans = std::mem::take(&mut *collector.spans.lock().expect("lock"));
        let names: Vec<(&str, &str)> = spans
            .iter()
            .map(|(service, span)| (service.as_str(), span.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [("tools-east", "toolplane.v1.DiscoveryService/ListServices")],
            "{protocol:?}"
        );
        assert_eq!(
            *collector.api_keys.lock().expect("lock"),
            ["collector-secret"],
            "{protocol:?}"
        );
    }
}

/// A model call that fails is an error span under the turn, and the turn's span ends
/// UNAVAILABLE, an error of the server's.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_model_call_is_an_error_span() {
    use common::agent_fixture::{agents, complete_request, create};
    let (endpoint, collector, collector_task) = start_collector().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let model_url = format!("http://{}/v1", closed.local_addr().expect("address"));
    drop(closed);
    let setup = setup_with(ServerOptions {
        otlp: Some(toolplane::otlp::OtlpExport {
            endpoint,
            protocol: toolplane::otlp::OtlpProtocol::Grpc,
            tls: Default::default(),
        }),
        model: Some(toolplane::agent::openai::OpenAiConfig {
            base_url: model_url,
            model: "gpt-test".into(),
            api_key: None,
            timeout: std::time::Duration::from_secs(5),
            max_retries: 0,
            max_tokens_field: Default::default(),
        }),
        ..test_options()
    })
    .await;
    let mut client = agents(&setup.server).await;
    let agent = create(&mut client, "helper", &[]).await;
    let id = agent.status.expect("status").id;
    let failed = client
        .complete(complete_request(&id, "hello", "failing-turn"))
        .await
        .expect_err("the model is not there");
    assert_eq!(failed.code(), tonic::Code::Unavailable);
    let spans = stop_and_collect(setup, &collector, collector_task).await;

    let turn = first_named(&spans, "toolplane.v1.AgentService/Complete");
    assert_eq!(int_attribute(turn, "rpc.grpc.status_code"), Some(14));
    let error = StatusCode::Error as i32;
    assert_eq!(turn.status.as_ref().map(|status| status.code), Some(error));
    let model_call = first_named(&spans, "chat");
    assert_eq!(model_call.parent_span_id, turn.span_id);
    assert_eq!(
        model_call.status.as_ref().map(|status| status.code),
        Some(error)
    );
    assert_eq!(
        string_attribute(model_call, "error.type"),
        Some("model_error")
    );
}

/// A model call's span counts the attempts it made (`toolplane.model.attempts`): a call that
/// failed at every attempt (3, the first and two made again), one answered after a failed
/// attempt was made again (2), and one answered at once (1).
#[tokio::test(flavor = "multi_thread")]
async fn a_model_call_made_again_counts_its_attempts_on_its_span() {
    use common::agent_fixture::{agents, complete_request, create};
    use common::model_server::{Misbehaviour, Mock, config, start_mock};
    let (endpoint, collector, collector_task) = start_collector().await;
    let mock = Mock {
        misbehaving: Misbehaviour::FailsFirst {
            status: reqwest::StatusCode::SERVICE_UNAVAILABLE,
            times: 4,
        },
        ..Mock::default()
    };
    let setup = setup_with(ServerOptions {
        otlp: Some(toolplane::otlp::OtlpExport {
            endpoint,
            protocol: toolplane::otlp::OtlpProtocol::Grpc,
            tls: Default::default(),
        }),
        model: Some(config(start_mock(mock).await)),
        ..test_options()
    })
    .await;
    let mut client = agents(&setup.server).await;
    create(&mut client, "helper", &[]).await;
    client
        .complete(complete_request("helper", "hello", "failed-turn"))
        .await
        .expect_err("every attempt failed");
    client
        .complete(complete_request("helper", "hello", "retried-turn"))
        .await
        .expect("answered at the second attempt");
    let spans = stop_and_collect(setup, &collector, collector_task).await;

    // The failed turn's call, then the second turn's two: asking (retried once), reflecting.
    let mut calls = named(&spans, "chat");
    calls.sort_by_key(|call| call.start_time_unix_nano);
    let attempts: Vec<_> = (calls.iter())
        .map(|call| int_attribute(call, "toolplane.model.attempts"))
        .collect();
    assert_eq!(attempts, [Some(3), Some(2), Some(1)], "{spans:#?}");
    let failed = calls[0].status.as_ref().expect("a status");
    assert!(failed.message.contains("at attempt 3"), "{failed:?}");
}
