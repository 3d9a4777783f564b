//! toolplane's MCP endpoint (`mcp_listen`): the registered tools served to MCP clients over
//! MCP's Streamable HTTP transport at `/mcp`. The official MCP Python SDK lists and calls them
//! in both protocol eras (`tests/peers/python_mcp_client.py`); plain HTTP requests check what
//! the endpoint refuses and how large tools are paged; and a client with and without a certificate checks it over mutual TLS.
//! The MCP conformance suite's runs are in `tests/mcp_conformance.rs`.

use crate::common;

use std::process::{Command, Output};
use std::time::Duration;

use common::TestServer;
use common::process::{Runtime, peer_script, proto_dir};
use common::provider::start_structs_provider;
use common::tls::TestCa;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::mcp::McpEndpoint;

/// The longest the Python client's checks may run before it is killed and the test fails.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

/// An `initialize` request of protocol 2025-11-25.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"toolplane-tests","version":"1"}}}"#;

/// Runs a peer to the end, killed past [`SCRIPT_LIMIT`], and answers what it printed.
async fn run_to_end(command: Command) -> Output {
    tokio::task::spawn_blocking(move || common::peer_run::run_to_end(command, SCRIPT_LIMIT))
        .await
        .expect("the peer ran")
}

/// Asserts that the metrics endpoint at `metrics` reports the line `expected`.
async fn assert_metric(client: &reqwest::Client, metrics: std::net::SocketAddr, expected: &str) {
    let scraped = (client.get(format!("http://{metrics}/metrics")).send())
        .await
        .expect("scraped")
        .text()
        .await
        .expect("text");
    assert!(scraped.lines().any(|line| line == expected), "{scraped}");
}

fn initialize(client: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
}

/// The MCP Python SDK: tools/list with paging and toolplane's `_meta`; tools/call through the
/// engine (structured output, the invocation record, schema errors as tool errors); names two
/// services offer called as SERVICE.TOOL; tenants by header; tools/list_changed on a
/// 2026-07-28 `subscriptions/listen` stream and on a 2025-11-25 session, whose calls share a
/// correlation id, and which ends with a `DELETE` the SDK takes as ended.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_python_sdk_lists_and_calls_the_registered_tools() {
    let Some(mut command) = peer_script(Runtime::Python, "python_mcp_client.py") else {
        return;
    };
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions::default()).await;
    let provider = start_structs_provider(&server).await;
    command
        .arg(server.addr.to_string())
        .arg(proto_dir())
        .arg(format!("http://{mcp}/mcp"))
        .arg(format!("http://{}", provider.addr));
    let output = run_to_end(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(
        output.status.success() && stdout.trim_end().ends_with("checks passed"),
        "the Python MCP client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    server.stop().await;
}

/// Requests to another Host than the allowed ones are refused (DNS rebinding), other paths are
/// not found, and `*` in `mcp_allowed_hosts` (an empty list here) accepts any host.
#[tokio::test]
async fn the_endpoint_refuses_unknown_hosts_and_other_paths() {
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions::default()).await;
    let client = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let answer = initialize(&client, &url).send().await.expect("answered");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    assert!(answer.headers().contains_key("mcp-session-id"));
    let answer = initialize(&client, &url)
        .header("host", "attacker.example")
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 403);
    let answer = client
        .get(format!("http://{mcp}/metrics"))
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 404);
    server.stop().await;

    let options = ServerOptions {
        mcp: McpEndpoint {
            allowed_hosts: Vec::new(),
            ..McpEndpoint::loopback()
        },
        ..ServerOptions::default()
    };
    let (server, mcp) = TestServer::start_with_mcp(options).await;
    let answer = initialize(&client, &format!("http://{mcp}/mcp"))
        .header("host", "toolplane.tools.svc.cluster.local")
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 200);
    server.stop().await;
}

/// With TLS served, the MCP endpoint is served in TLS too, with the same certificate, and asks
/// for the same client certificates: a client presenting one the CA signed is answered, one
/// presenting none gets no connection.
#[tokio::test]
async fn with_tls_served_the_endpoint_takes_only_callers_with_a_certificate() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = ServerOptions {
        tls: Some(ca.served_to_clients(dir.path())),
        ..ServerOptions::default()
    };
    let (server, mcp) = TestServer::start_with_mcp(options).await;
    let url = format!("https://127.0.0.1:{}/mcp", mcp.port());
    let with_certificate = ca.https_client(Some(&ca.client("mcp-client")));
    let answer = initialize(&with_certificate, &url)
        .send()
        .await
        .expect("answered over TLS");
    assert_eq!(answer.status(), 200);
    let without = ca.https_client(None);
    let refused = initialize(&without, &url).send().await;
    assert!(
        refused.is_err(),
        "answered without a certificate: {refused:?}"
    );
    server.stop().await;
}

/// Past `mcp_max_sessions` sessions, an `initialize` is refused 503 with `Retry-After` and a
/// JSON-RPC error naming the setting, until a session ends (`DELETE`, answered 200; 404 once
/// it has ended); requests of 2026-07-28 clients, which open no session, are answered all the
/// same. `toolplane_mcp_sessions` counts them.
#[tokio::test]
async fn sessions_past_the_limit_are_refused_until_one_ends() {
    let options = ServerOptions {
        mcp: McpEndpoint {
            max_sessions: 2,
            ..McpEndpoint::loopback()
        },
        ..ServerOptions::default()
    };
    let (server, mcp, metrics) = TestServer::start_with_mcp_and_metrics(options).await;
    let client = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let answer = initialize(&client, &url).send().await.expect("answered");
        assert_eq!(answer.status(), 200);
        sessions.push(answer.headers()["mcp-session-id"].clone());
    }
    assert_metric(&client, metrics, "toolplane_mcp_sessions 2").await;
    let refused = initialize(&client, &url).send().await.expect("answered");
    assert_eq!(refused.status(), 503);
    let counted = r#"toolplane_mcp_requests_refused_total{reason="sessions_limit"} 1"#;
    assert_metric(&client, metrics, counted).await;
    assert_eq!(refused.headers()["retry-after"], "5");
    let error: serde_json::Value = refused.json().await.expect("JSON");
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(message.contains("mcp_max_sessions"), "{message}");

    let sessionless = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{
                "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        )
        .send()
        .await
        .expect("answered");
    assert_eq!(sessionless.status(), 200);
    let listed = sessionless.text().await.expect("a body");
    assert!(listed.contains(r#""tools":[]"#), "{listed}");

    let end = || {
        client
            .delete(&url)
            .header("mcp-session-id", sessions[0].clone())
            .send()
    };
    assert_eq!(end().await.expect("answered").status(), 200);
    // Once ended, the session is not found: by a DELETE as by its other requests.
    let gone = end().await.expect("answered");
    assert_eq!(gone.status(), 404);
    assert_eq!(
        gone.text().await.expect("a body"),
        "Not Found: Session not found"
    );
    let listed = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", sessions[0].clone())
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#)
        .send()
        .await
        .expect("answered");
    assert_eq!(listed.status(), 404);
    let answer = initialize(&client, &url).send().await.expect("answered");
    assert_eq!(answer.status(), 200);
    server.stop().await;
}

/// Past `mcp_max_sessions_per_tenant` sessions of one tenant (by the `toolplane-tenant-id` of
/// their `initialize`), that tenant's next `initialize` is refused 429 with `Retry-After` and a
/// JSON-RPC error naming the setting, while other tenants open theirs, until one of its
/// sessions ends. An `initialize` whose tenant header is not one is refused 400.
#[tokio::test]
async fn one_tenants_sessions_past_its_limit_leave_room_for_others() {
    let options = ServerOptions {
        mcp: McpEndpoint {
            max_sessions: 10,
            max_sessions_per_tenant: 2,
            ..McpEndpoint::loopback()
        },
        ..ServerOptions::default()
    };
    let (server, mcp, metrics) = TestServer::start_with_mcp_and_metrics(options).await;
    let client = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let of_tenant = |tenant: &str| initialize(&client, &url).header("toolplane-tenant-id", tenant);
    let mut ones = Vec::new();
    for _ in 0..2 {
        let answer = of_tenant("1").send().await.expect("answered");
        assert_eq!(answer.status(), 200);
        ones.push(answer.headers()["mcp-session-id"].clone());
    }
    let refused = of_tenant("1").send().await.expect("answered");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let error: serde_json::Value = refused.json().await.expect("JSON");
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(message.contains("tenant 1 "), "{message}");
    assert!(message.contains("mcp_max_sessions_per_tenant"), "{message}");
    let counted = r#"toolplane_mcp_requests_refused_total{reason="tenant_sessions_limit"} 1"#;
    assert_metric(&client, metrics, counted).await;

    for tenant in ["2", "2"] {
        let answer = of_tenant(tenant).send().await.expect("answered");
        assert_eq!(answer.status(), 200, "tenant {tenant}");
    }
    // Without the header: tenant 0.
    let answer = initialize(&client, &url).send().await.expect("answered");
    assert_eq!(answer.status(), 200);
    let unreadable = of_tenant("one").send().await.expect("answered");
    assert_eq!(unreadable.status(), 400);
    let error: serde_json::Value = unreadable.json().await.expect("JSON");
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(message.contains("toolplane-tenant-id"), "{message}");

    let ended = client
        .delete(&url)
        .header("mcp-session-id", ones[0].clone())
        .header("toolplane-tenant-id", "1")
        .send()
        .await
        .expect("answered");
    assert!(ended.status().is_success(), "{}", ended.status());
    let answer = of_tenant("1").send().await.expect("answered");
    assert_eq!(answer.status(), 200);
    server.stop().await;
}

/// A body that is not a JSON-RPC message is answered 400 with JSON-RPC's error for it (Parse
/// error, Invalid Request, Invalid params), echoing the request's id when it has one; one over
/// the SDK's 4 MiB is answered 413 in the same words; a body that is not JSON by its
/// Content-Type stays 415. The endpoint answers the next request as ever.
#[tokio::test]
async fn bodies_that_are_no_json_rpc_message_get_json_rpc_errors() {
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions::default()).await;
    let client = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let post = |body: String| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
    };
    for (body, status, code, id, says) in [
        (
            "{bad json",
            400,
            -32700,
            json!(null),
            "Parse error: key must be a string",
        ),
        ("[]", 400, -32600, json!(null), "batch"),
        (
            r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
            400,
            -32600,
            json!("a"),
            "\"2.0\"",
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#,
            400,
            -32600,
            json!(7),
            "\"params\" of \"tools/call\" must be an object",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"notifications/initialized","params":[1]}"#,
            400,
            -32600,
            json!(8),
            "must be an object",
        ),
    ] {
        let answer = post(body.to_owned()).await.expect("answered");
        assert_eq!(answer.status(), status, "{body}");
        assert_eq!(
            answer.headers()["content-type"],
            "application/json",
            "{body}"
        );
        let error: serde_json::Value = answer.json().await.expect("JSON");
        assert_eq!(error["jsonrpc"], "2.0", "{body}");
        assert_eq!(error["id"], id, "{body}");
        assert_eq!(error["error"]["code"], code, "{body}: {error}");
        let message = error["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{body}: {message}");
    }

    let mut too_large = " ".repeat(4 * 1024 * 1024);
    too_large.push_str(INITIALIZE);
    let answer = post(too_large).await.expect("answered");
    assert_eq!(answer.status(), 413);
    let error: serde_json::Value = answer.json().await.expect("JSON");
    assert_eq!(error["error"]["code"], -32600, "{error}");

    let text = client
        .post(&url)
        .header("content-type", "text/plain")
        .header("accept", "application/json, text/event-stream")
        .body(INITIALIZE)
        .send()
        .await
        .expect("answered");
    assert_eq!(text.status(), 415);

    let answer = initialize(&client, &url).send().await.expect("answered");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    server.stop().await;
}

/// An HTTP/2 connection to the MCP endpoint whose client went silent without closing it (its
/// host vanished) is pinged after `keepalive_interval` and closed when the PING goes
/// unanswered, as on the gRPC port.
#[tokio::test]
async fn a_silent_http2_connection_is_pinged_and_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (server, mcp) = TestServer::start_with_mcp(ServerOptions {
        keepalive_interval: Duration::from_millis(200),
        keepalive_timeout: Duration::from_secs(1),
        ..common::test_options()
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(mcp).await.expect("connect");
    silent
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface");
    let mut received = Vec::new();
    // Generous: the server closes it about 1.2 s after the preface.
    let closed =
        tokio::time::timeout(Duration::from_secs(8), silent.read_to_end(&mut received)).await;
    assert!(closed.is_ok(), "the silent connection is still open");
    server.stop().await;
}

/// A `tools/list` page ends where its tools' JSON would pass 4 MiB, and `nextCursor` goes on
/// from there: 200 tools of 30 KB schemas come in two pages, each tool once (one page of 1000
/// such tools of 60 KB was a 60 MB answer, built whole in the server's memory).
#[tokio::test(flavor = "multi_thread")]
async fn tools_list_pages_end_before_4_mib() {
    let (server, mcp) = TestServer::start_with_mcp(common::test_options()).await;
    let mut client = server.discovery().await;
    for service in 0..4 {
        let schema = json!({"type": "object", "description": "x".repeat(30_000)});
        let tools = (0..50)
            .map(|tool| common::tool(&format!("t{service}_{tool:02}"), schema.clone()))
            .collect();
        let registration = common::registration(&format!("svc{service}"), tools);
        common::register_ok(&mut client, 0, registration).await;
    }
    let http = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let (mut names, mut pages, mut cursor) = (Vec::new(), Vec::new(), None::<String>);
    loop {
        let mut params = json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}});
        if let Some(cursor) = &cursor {
            params["cursor"] = json!(cursor);
        }
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
        let answer = common::tools_list(&http, &url, "0")
            .body(request.to_string())
            .send()
            .await
            .expect("answered");
        assert_eq!(answer.status(), 200);
        let body = answer.bytes().await.expect("a body");
        // One server-sent event: `data: {JSON}`.
        let event = std::str::from_utf8(&body).expect("UTF-8");
        let data = event.trim().strip_prefix("data: ").expect("one event");
        let page: serde_json::Value = serde_json::from_str(data).expect("JSON");
        let tools = page["result"]["tools"].as_array().expect("tools");
        pages.push((tools.len(), body.len()));
        names.extend(
            tools
                .iter()
                .map(|tool| tool["name"].as_str().expect("a name").to_owned()),
        );
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(
        pages.iter().all(|(_, bytes)| *bytes <= 4 << 20),
        "{pages:?}"
    );
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!((names.len(), distinct.len()), (200, 200));
    server.stop().await;
}
