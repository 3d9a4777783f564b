//! An imported MCP server's answers, through toolplane's own MCP endpoint, reach MCP clients
//! (rmcp's) as the server gave them: text as its text, images as images, content blocks beside
//! structured content, tool errors as the server's own blocks; and a call toolplane gives up on
//! is cancelled at the server. Real servers: the TypeScript SDK's reference servers
//! (`server-everything`, `server-filesystem`) and one built with the official Python SDK.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::mcp_server::{
    PythonMcpServer, importing, importing_command, invoke, node_reference_server, output, wait_for,
};
use common::{TestServer, client_timed_out, meta};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use tonic::Code;
use toolplane::mcp::import::McpSource;
use toolplane::pb;

/// Through toolplane, the reference server's answers reach an MCP client (rmcp's, at toolplane's
/// MCP endpoint) as the server gave them: a text as its text, and an answer of several blocks,
/// an image among them, as those blocks; the same answers over gRPC are a JSON string and the
/// blocks as a JSON array.
#[tokio::test(flavor = "multi_thread")]
async fn an_imported_tools_content_reaches_mcp_clients_as_its_server_gave_it() {
    let Some(command) = node_reference_server("server-everything", &["stdio"]) else {
        return;
    };
    let (server, mcp) =
        TestServer::start_with_mcp(importing_command("everything", &command, &[])).await;
    wait_for(&server, "everything", |found| found.is_some())
        .await
        .expect("imported");
    let client = mcp_client(mcp).await;

    let sum = call(&client, "get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        serde_json::to_value(&sum.content).expect("blocks"),
        json!([{"type": "text", "text": "The sum of 2 and 3 is 5."}])
    );

    let image = call(&client, "get-tiny-image", json!({})).await;
    let blocks = serde_json::to_value(&image.content).expect("blocks");
    assert_eq!(blocks.as_array().map(Vec::len), Some(3), "{blocks}");
    assert_eq!(blocks[0]["text"], "Here's the image you requested:");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["mimeType"], "image/png");
    assert!(
        blocks[1]["data"]
            .as_str()
            .is_some_and(|data| data.starts_with("iVBORw0KGgo")),
        "a PNG, base64: {blocks}"
    );
    assert_eq!(blocks[2]["text"], "The image above is the MCP logo.");

    let over_grpc = invoke(&server, "get-tiny-image", json!({}))
        .await
        .expect("an image over gRPC");
    assert_eq!(
        output(&over_grpc),
        blocks,
        "gRPC callers get the blocks as JSON"
    );
    client.cancel().await.expect("the session ends");
    server.stop().await;
}

/// The reference filesystem server (`@modelcontextprotocol/server-filesystem`), whose answers
/// carry both `structuredContent` and content blocks: through toolplane an MCP client gets
/// both as the server gave them (a file's text as that text, an image as an image block, a tool
/// error as the server's own error blocks), while gRPC callers get the structured content as
/// the output.
#[tokio::test(flavor = "multi_thread")]
async fn an_imported_servers_blocks_reach_mcp_clients_beside_its_structured_content() {
    let files = tempfile::tempdir().expect("a directory");
    let root = files.path().canonicalize().expect("its path");
    let Some(command) = node_reference_server("server-filesystem", &[&root.display().to_string()])
    else {
        return;
    };
    std::fs::write(root.join("notes.txt"), "two\nlines\n").expect("a text file");
    std::fs::write(root.join("red.png"), RED_PIXEL_PNG).expect("an image file");
    let (server, mcp) = TestServer::start_with_mcp(importing_command("files", &command, &[])).await;
    wait_for(&server, "files", |found| found.is_some())
        .await
        .expect("imported");
    let client = mcp_client(mcp).await;
    let path = |name: &str| json!({"path": root.join(name).display().to_string()});

    let text = call(&client, "read_text_file", path("notes.txt")).await;
    assert_eq!(
        serde_json::to_value(&text.content).expect("blocks"),
        json!([{"type": "text", "text": "two\nlines\n"}])
    );
    assert_eq!(
        text.structured_content,
        Some(json!({"content": "two\nlines\n"}))
    );

    let image = call(&client, "read_media_file", path("red.png")).await;
    let blocks = serde_json::to_value(&image.content).expect("blocks");
    assert_eq!(blocks[0]["type"], "image", "{blocks}");
    assert_eq!(blocks[0]["mimeType"], "image/png");
    let data = blocks[0]["data"].as_str().expect("base64 data");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64"),
        RED_PIXEL_PNG
    );
    assert_eq!(
        image
            .structured_content
            .as_ref()
            .map(|structured| &structured["content"]),
        Some(&blocks),
        "the server's structured content, unchanged"
    );

    // A tool error: the server's own blocks, as the server answers a client of its own.
    let missing = path("missing.txt");
    let refused = answer(&client, "read_text_file", missing.clone()).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let direct = ()
        .serve(
            TokioChildProcess::new({
                let mut started = tokio::process::Command::new("node");
                started.args(&command[1..]);
                started
            })
            .expect("the server started"),
        )
        .await
        .expect("a session with the server itself");
    let told = answer(&direct, "read_text_file", missing).await;
    assert_eq!(told.is_error, Some(true));
    assert_eq!(
        refused.content, told.content,
        "the server's own error blocks"
    );
    let meta = refused.meta.expect("toolplane's _meta");
    assert_eq!(meta.0["toolplane/error_reason"], "TOOL_FAILED");
    direct.cancel().await.expect("the direct session ends");

    let over_grpc = invoke(&server, "read_text_file", path("notes.txt"))
        .await
        .expect("read over gRPC");
    assert_eq!(output(&over_grpc), json!({"content": "two\nlines\n"}));
    client.cancel().await.expect("the session ends");
    server.stop().await;
}

/// A 1x1 red pixel, PNG.
const RED_PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A session of rmcp's MCP client with toolplane's MCP endpoint at `mcp`.
async fn mcp_client(mcp: std::net::SocketAddr) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::with_client(
        common::http_client(),
        StreamableHttpClientTransportConfig::with_uri(format!("http://{mcp}/mcp")),
    ))
    .await
    .expect("a session with toolplane's endpoint")
}

/// Calls `tool` with `arguments` over `client`'s session; the call must succeed.
async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let result = answer(client, tool, arguments).await;
    assert_eq!(result.is_error, Some(false), "{tool}: {result:?}");
    result
}

/// The answer to `tool` called with `arguments` over `client`'s session, a tool error or not.
async fn answer(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let arguments = arguments.as_object().cloned().expect("an object");
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .expect("answered")
}

/// A call toolplane gives up on, at its deadline or when its caller goes away (a gRPC caller, or
/// an MCP client at toolplane's endpoint), is cancelled at the MCP server too
/// (`notifications/cancelled`), which stops the tool's work, as a gRPC provider's call is.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_toolplane_gives_up_on_is_cancelled_at_the_mcp_server() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let import = importing(
        "python-tools",
        McpSource::Http(mcp.url()),
        Duration::from_secs(60),
        None,
    );
    let (server, endpoint) = TestServer::start_with_mcp(import).await;
    wait_for(&server, "python-tools", |found| found.is_some())
        .await
        .expect("imported");
    let markers = tempfile::tempdir().expect("a directory");
    let wait = |marker: &str| pb::InvokeToolRequest {
        meta: meta(0),
        tool_name: "wait".into(),
        input: common::schema(json!({
            "seconds": 30,
            "marker": markers.path().join(marker).display().to_string()
        })),
        ..Default::default()
    };
    let mut invoker = common::invoke_fixture::invoker(&server).await;

    let mut timed = tonic::Request::new(wait("timed-out"));
    timed.set_timeout(Duration::from_millis(500));
    let timed_out = invoker
        .invoke_tool(timed)
        .await
        .expect_err("past its deadline");
    // Answered at its deadline, or left by the client as its deadline passed: cancelled at the
    // MCP server either way (below).
    if !client_timed_out(&timed_out) {
        assert_eq!(timed_out.code(), Code::DeadlineExceeded, "{timed_out:?}");
    }

    let left = tokio::time::timeout(
        Duration::from_millis(500),
        invoker.invoke_tool(wait("left")),
    )
    .await;
    assert!(left.is_err(), "the caller stopped waiting first");

    // An MCP client's call (rmcp's asks for progress, so it takes the path that passes
    // progress on) that the client gives up on.
    let client = mcp_client(endpoint).await;
    let arguments = json!({
        "seconds": 30,
        "marker": markers.path().join("left-over-mcp").display().to_string()
    });
    let call = client.call_tool(
        CallToolRequestParams::new("wait")
            .with_arguments(arguments.as_object().cloned().expect("an object")),
    );
    let left = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(left.is_err(), "the MCP client stopped waiting first");

    for marker in ["timed-out", "left", "left-over-mcp"] {
        let path = markers.path().join(marker);
        let noted = async {
            while !path.exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), noted)
            .await
            .unwrap_or_else(|_| panic!("the {marker} call was not cancelled at the server"));
    }
    client.cancel().await.expect("the session ends");
    server.stop().await;
}
