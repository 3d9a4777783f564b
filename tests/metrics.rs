//! The Prometheus metrics endpoint of the real server on loopback, scraped over HTTP/1.1 as
//! Prometheus does, after real invocations through a real provider.

use crate::common;

use std::net::SocketAddr;

use common::invoke_fixture::request;
use common::provider::start_structs_provider;
use common::*;
use serde_json::json;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

async fn scrape(client: &reqwest::Client, metrics: SocketAddr, path: &str) -> reqwest::Response {
    client
        .get(format!("http://{metrics}{path}"))
        .send()
        .await
        .expect("the metrics endpoint answers")
}

/// The text of a scrape of `/metrics`.
async fn scrape_text(client: &reqwest::Client, metrics: SocketAddr) -> String {
    scrape(client, metrics, "/metrics")
        .await
        .text()
        .await
        .expect("body")
}

/// The value of the sample named exactly `sample` (name and labels), if the text has it.
fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .map(|value| value.parse().expect("a number"))
}

/// A scrape reports the invocations by how they ended, with their durations, the registry's
/// size, whether the server is serving, the calls by gRPC method and code, and the process's
/// CPU, memory, files and threads; other paths and methods are refused; the endpoint closes
/// with the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_reports_invocations_and_the_registry() {
    let (server, metrics) = TestServer::start_with_metrics(test_options()).await;
    let provider = start_structs_provider(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let power = |grams: i64| {
        request(
            "structs_calculate_power",
            json!({"alpha_matter": grams, "generator_type": "reactor"}),
        )
    };
    client.invoke_tool(power(100)).await.expect("succeeds");
    client.invoke_tool(power(7)).await.expect("succeeds");
    client
        .invoke_tool(power(-5))
        .await
        .expect_err("invalid input");
    client
        .invoke_tool(request("no_such_tool", json!({})))
        .await
        .expect_err("rejected");

    let http = http_client();
    let answer = scrape(&http, metrics, "/metrics").await;
    assert_eq!(answer.status(), 200);
    let content_type = answer.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = answer.text().await.expect("body");
    let expected = [
        ("toolplane_invocations_total{status=\"succeeded\"}", 2.0),
        ("toolplane_invocations_total{status=\"invalid_input\"}", 1.0),
        ("toolplane_invocations_total{status=\"rejected\"}", 1.0),
        ("toolplane_invocations_total{status=\"failed\"}", 0.0),
        (
            "toolplane_invocation_duration_seconds_count{status=\"succeeded\"}",
            2.0,
        ),
        (
            "toolplane_invocation_duration_seconds_bucket{le=\"+Inf\",status=\"succeeded\"}",
            2.0,
        ),
        ("toolplane_registered_services", 1.0),
        ("toolplane_registered_instances", 1.0),
        ("toolplane_tenants", 1.0),
        ("toolplane_unhealthy_provider_endpoints", 0.0),
        ("toolplane_serving", 1.0),
        ("toolplane_invocation_record_write_failures_total", 0.0),
        ("toolplane_invocation_record_sync_failures_total", 0.0),
    ];
    for (name, value) in expected {
        assert_eq!(sample(&text, name), Some(value), "{name} in\n{text}");
    }
    // The same calls as gRPC saw them, on the wire path InvokeTool is served by.
    let invoke_tool = "grpc_method=\"InvokeTool\",grpc_service=\"toolplane.v1.ToolInvokeService\",grpc_type=\"unary\"";
    for (code, count) in [("OK", 2.0), ("InvalidArgument", 1.0), ("NotFound", 1.0)] {
        let name = format!("grpc_server_handled_total{{grpc_code=\"{code}\",{invoke_tool}}}");
        assert_eq!(sample(&text, &name), Some(count), "{name} in\n{text}");
    }
    let started = format!("grpc_server_started_total{{{invoke_tool}}}");
    assert_eq!(sample(&text, &started), Some(4.0), "{started} in\n{text}");
    let tools = sample(&text, "toolplane_registered_tools").expect("tools");
    let structs_tools = toolplane::provider::structs::structs_tools()
        .expect("valid")
        .iter()
        .count();
    assert_eq!(tools, structs_tools as f64);
    let duration = sample(
        &text,
        "toolplane_invocation_duration_seconds_sum{status=\"succeeded\"}",
    )
    .expect("sum");
    assert!(duration > 0.0, "{duration}");
    // The server's own process, as every Prometheus client library reports it.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_threads",
        "process_start_time_seconds",
    ] {
        let value = sample(&text, name).unwrap_or_else(|| panic!("{name} in\n{text}"));
        assert!(value > 0.0, "{name} {value}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");

    let elsewhere = scrape(&http, metrics, "/").await;
    assert_eq!(elsewhere.status(), 404);
    for probe in ["/livez", "/readyz"] {
        assert_eq!(scrape(&http, metrics, probe).await.status(), 200, "{probe}");
    }
    let posted = http
        .post(format!("http://{metrics}/metrics"))
        .send()
        .await
        .expect("answered");
    assert_eq!(posted.status(), 405);
    assert_eq!(posted.headers()["allow"], "GET, HEAD");

    provider.stop().await;
    server.stop().await;
    // The endpoint's task is aborted as the server returns, and dropped soon after.
    let short = toolplane::grpc::outgoing_tls::http_client_builder(None)
        .timeout(std::time::Duration::from_secs(1))
        .build()
        .expect("client");
    eventually("the endpoint closes with the server", || {
        let short = short.clone();
        async move {
            short
                .get(format!("http://{metrics}/metrics"))
                .send()
                .await
                .is_err()
        }
    })
    .await;
}

/// A scrape reports every call by method and gRPC code, as grpc-go's Prometheus interceptors
/// do: methods not yet called at 0, a call to a path no service has under `unknown`, a watch
/// the caller closes as `Canceled` and one the server ends at its deadline as
/// `DeadlineExceeded`, with handling times for each method called.
#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_reports_calls_by_method_and_code() {
    let (server, metrics) = TestServer::start_with_metrics(test_options()).await;
    let mut discovery = server.discovery().await;
    register_ok(&mut discovery, 0, story_generator()).await;
    let missing = discovery
        .get_tool(toolplane::pb::GetToolRequest {
            meta: meta(0),
            tool_name: "no_such_tool".into(),
            ..Default::default()
        })
        .await
        .expect_err("not registered");
    assert_eq!(missing.code(), tonic::Code::NotFound);

    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("ready");
    let unknown = grpc
        .unary(
            tonic::Request::new(()),
            http::uri::PathAndQuery::from_static("/toolplane.v1.DiscoveryService/Nope"),
            tonic_prost::ProstCodec::<(), ()>::default(),
        )
        .await
        .expect_err("no such method");
    assert_eq!(unknown.code(), tonic::Code::Unimplemented);

    let watch = |timeout: Option<std::time::Duration>| {
        let mut discovery = discovery.clone();
        async move {
            let mut request = tonic::Request::new(toolplane::pb::WatchServicesRequest {
                meta: meta(0),
                service_name: String::new(),
            });
            if let Some(timeout) = timeout {
                request.set_timeout(timeout);
            }
            let mut stream = discovery
                .watch_services(request)
                .await
                .expect("watch starts")
                .into_inner();
            stream.message().await.expect("an event").expect("open");
            stream
        }
    };
    drop(watch(None).await);
    // The server ends a watch at the caller's deadline (tonic's client would leave it open).
    let mut late = watch(Some(std::time::Duration::from_millis(300))).await;
    let ended = loop {
        match late.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("a watch does not end OK"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    assert!(ended.message().contains("stream ends here"), "{ended:?}");

    let http = http_client();
    let watch_services = "grpc_method=\"WatchServices\",grpc_service=\"toolplane.v1.DiscoveryService\",grpc_type=\"server_stream\"";
    let get_tool = "grpc_method=\"GetTool\",grpc_service=\"toolplane.v1.DiscoveryService\",grpc_type=\"unary\"";
    let expected = [
        format!("grpc_server_handled_total{{grpc_code=\"Canceled\",{watch_services}}}"),
        format!("grpc_server_handled_total{{grpc_code=\"DeadlineExceeded\",{watch_services}}}"),
        format!("grpc_server_handled_total{{grpc_code=\"NotFound\",{get_tool}}}"),
        "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"RegisterService\",grpc_service=\"toolplane.v1.DiscoveryService\",grpc_type=\"unary\"}".to_owned(),
        "grpc_server_handled_total{grpc_code=\"Unimplemented\",grpc_method=\"unknown\",grpc_service=\"unknown\",grpc_type=\"unknown\"}".to_owned(),
        format!("grpc_server_handling_seconds_count{{{get_tool}}}"),
        format!("grpc_server_handling_seconds_bucket{{le=\"+Inf\",{get_tool}}}"),
    ];
    // The watches are counted as the server sees their streams end, soon after the caller.
    eventually("every call is counted", || {
        let http = http.clone();
        let expected = expected.clone();
        async move {
            let text = scrape_text(&http, metrics).await;
            expected.iter().all(|name| sample(&text, name) == Some(1.0))
        }
    })
    .await;
    let text = scrape_text(&http, metrics).await;
    for (name, value) in [
        (format!("grpc_server_started_total{{{watch_services}}}"), 2.0),
        (format!("grpc_server_started_total{{{get_tool}}}"), 1.0),
        (
            "grpc_server_started_total{grpc_method=\"ListAgents\",grpc_service=\"toolplane.v1.AgentService\",grpc_type=\"unary\"}".to_owned(),
            0.0,
        ),
        (
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Check\",grpc_service=\"grpc.health.v1.Health\",grpc_type=\"unary\"}".to_owned(),
            0.0,
        ),
        (format!("grpc_server_handled_total{{grpc_code=\"OK\",{get_tool}}}"), 0.0),
    ] {
        assert_eq!(sample(&text, &name), Some(value), "{name} in\n{text}");
    }
    assert!(
        !text.contains("grpc_server_handling_seconds_count{grpc_method=\"ListAgents\""),
        "a method's times appear once it is called:\n{text}"
    );
    assert!(
        !text.contains("ToolProviderService"),
        "only served services are listed:\n{text}"
    );
    server.stop().await;
}

/// A scrape reports the agents by state, the turns running and what their conversations hold,
/// across tenants.
#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_reports_the_agents_and_their_conversations() {
    use common::agent_fixture::{agents, complete_request, create};
    let (server, metrics) = TestServer::start_with_metrics(test_options()).await;
    let mut client = agents(&server).await;
    let talker = create(&mut client, "talker", &[]).await;
    create(&mut client, "quiet", &[]).await;
    let id = talker.status.expect("status").id;
    client
        .complete(complete_request(&id, "hello", "metrics-turn"))
        .await
        .expect("turn completes");

    let http = http_client();
    let text = scrape_text(&http, metrics).await;
    for (name, value) in [
        ("toolplane_agents{state=\"idle\"}", 2.0),
        ("toolplane_agents{state=\"thinking\"}", 0.0),
        ("toolplane_agents{state=\"toolcall\"}", 0.0),
        ("toolplane_agents{state=\"reflecting\"}", 0.0),
        ("toolplane_agent_turns_running", 0.0),
        ("toolplane_agent_conversation_messages", 2.0),
    ] {
        assert_eq!(sample(&text, name), Some(value), "{name} in\n{text}");
    }
    let bytes = sample(&text, "toolplane_agent_conversation_bytes").expect("bytes");
    assert!(bytes >= "hello".len() as f64 * 2.0, "{bytes}");
    server.stop().await;
}

/// Under `[[tenant_access]]`, refused calls are counted by method and code like the rest: a
/// call sending a bearer token no entry holds (refused as its connection reads it, before the
/// services) as `Unauthenticated`, and a call naming a tenant its token is not granted as
/// `PermissionDenied`, so an alert on either sees guessing and misconfigured callers.
#[tokio::test(flavor = "multi_thread")]
async fn refused_calls_are_counted_by_code() {
    use toolplane::access::{TenantAccess, TenantAccessRule};
    let rules = [TenantAccessRule {
        token_env: "PLANNER_TOKEN".to_owned(),
        tenants: vec![1],
        ..TenantAccessRule::default()
    }];
    let access =
        TenantAccess::from_rules_with(&rules, |_| Some("planner-token".to_owned())).expect("valid");
    let (server, metrics) = TestServer::start_with_metrics(toolplane::grpc::ServerOptions {
        tenant_access: access,
        ..test_options()
    })
    .await;
    let mut discovery = server.discovery().await;
    for (tenant, token, code) in [
        (1, "Bearer guessed", tonic::Code::Unauthenticated),
        (1, "Bearer other-guess", tonic::Code::Unauthenticated),
        (2, "Bearer planner-token", tonic::Code::PermissionDenied),
    ] {
        let mut request = tonic::Request::new(toolplane::pb::ListServicesRequest {
            meta: meta(tenant),
            ..Default::default()
        });
        request
            .metadata_mut()
            .insert("authorization", token.parse().expect("ascii"));
        let refused = discovery.list_services(request).await.expect_err("refused");
        assert_eq!(refused.code(), code, "{refused:?}");
    }
    let text = scrape_text(&http_client(), metrics).await;
    let list_services = "grpc_method=\"ListServices\",grpc_service=\"toolplane.v1.DiscoveryService\",grpc_type=\"unary\"";
    for (code, count) in [("Unauthenticated", 2.0), ("PermissionDenied", 1.0)] {
        let name = format!("grpc_server_handled_total{{grpc_code=\"{code}\",{list_services}}}");
        assert_eq!(sample(&text, &name), Some(count), "{name} in\n{text}");
    }
    let started = format!("grpc_server_started_total{{{list_services}}}");
    assert_eq!(sample(&text, &started), Some(3.0), "{text}");
    server.stop().await;
}

/// A lapsed lease is counted, with how late it was removed, in
/// `toolplane_lease_expiry_lateness_seconds`; leases deregistered or still live are not.
#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_reports_how_late_lapsed_leases_were_removed() {
    let (server, metrics) = TestServer::start_with_metrics(test_options()).await;
    let http = http_client();
    let count = "toolplane_lease_expiry_lateness_seconds_count";
    assert_eq!(sample(&scrape_text(&http, metrics).await, count), Some(0.0));

    let mut client = server.discovery().await;
    let mut stream = watch(&mut client, 0, "").await;
    assert_eq!(
        next_event(&mut stream).await.r#type,
        toolplane::pb::ServiceEventType::Synced as i32
    );
    let ttl = std::time::Duration::from_millis(300);
    register_ok(
        &mut client,
        0,
        with_ttl(registration("lapsing", vec![simple_tool("t")]), ttl),
    )
    .await;
    register_ok(&mut client, 0, registration("kept", vec![simple_tool("t")])).await;
    let gone = register_ok(&mut client, 0, registration("gone", vec![simple_tool("t")])).await;
    deregister(&mut client, 0, "gone", gone.lease_id)
        .await
        .expect("deregistered");
    loop {
        let event = next_event(&mut stream).await;
        if event.r#type == toolplane::pb::ServiceEventType::Expired as i32 {
            assert_eq!(event.service_name, "lapsing");
            break;
        }
    }

    let text = scrape_text(&http, metrics).await;
    assert_eq!(sample(&text, count), Some(1.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "toolplane_lease_expiry_lateness_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(1.0),
        "{text}"
    );
    let late = sample(&text, "toolplane_lease_expiry_lateness_seconds_sum").expect("sum");
    assert!(late >= 0.0, "{late}");
}
