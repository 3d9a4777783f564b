//! Tool annotations (MCP's hints: a title, read-only, destructive, idempotent, open world)
//! against the real server: declared at registration and returned by every read, counted in
//! the definition hash only when said, refused with the field named when the title is bad
//! (nothing stored changes), served to MCP clients as the tools' annotations, and kept from
//! the tools of an MCP server toolplane imports (the MCP Python SDK's).

use crate::common;

use std::time::Duration;

use common::mcp_server::{PythonMcpServer, importing, wait_for};
use common::*;
use serde_json::{Value, json};
use tonic::Code;
use toolplane::grpc::ServerOptions;
use toolplane::mcp::import::McpSource;
use toolplane::pb;

/// Service `files`: `delete_file` with `delete_hints`, and `list_files` with none (neither
/// declares a capability, so nothing adds hints of its own).
fn files(delete_hints: pb::ToolAnnotations) -> pb::ServiceRegistration {
    let mut delete = tool("delete_file", json!({}));
    delete.annotations = Some(delete_hints);
    let mut list = tool("list_files", json!({}));
    delete.capabilities.clear();
    list.capabilities.clear();
    registration("files", vec![delete, list])
}

fn destructive(title: &str) -> pb::ToolAnnotations {
    pb::ToolAnnotations {
        title: title.into(),
        read_only_hint: Some(false),
        destructive_hint: Some(true),
        ..Default::default()
    }
}

async fn get_tool(server: &TestServer, name: &str) -> pb::ToolRegistration {
    server
        .discovery()
        .await
        .get_tool(pb::GetToolRequest {
            meta: meta(0),
            tool_name: name.into(),
            ..Default::default()
        })
        .await
        .expect("found")
        .into_inner()
        .tool
        .expect("a tool")
}

/// The tools MCP's `tools/list` answers with at `mcp`, by name.
async fn mcp_tools(mcp: std::net::SocketAddr) -> Vec<Value> {
    let text = tools_list(&http_client(), &format!("http://{mcp}/mcp"), "0")
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("a body");
    // The answer comes as a JSON body, or as the data of one server-sent event.
    let data = (text.lines())
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(data.trim()).expect("JSON");
    answer["result"]["tools"]
        .as_array()
        .expect("a list of tools")
        .clone()
}

fn named<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|tool| tool["name"] == name)
        .unwrap_or_else(|| panic!("{name} listed in {tools:?}"))
}

/// Annotations come back as declared, unset hints unset; saying a hint changes the hash and
/// saying none leaves it as the four fields give it; searches find the title's words; MCP
/// clients see them as annotations and a title.
#[tokio::test(flavor = "multi_thread")]
async fn annotations_are_kept_hashed_and_served_to_mcp_clients() {
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions::default()).await;
    let mut discovery = server.discovery().await;
    register_ok(&mut discovery, 0, files(destructive("Shred a file"))).await;
    let delete = get_tool(&server, "delete_file").await;
    assert_eq!(delete.annotations, Some(destructive("Shred a file")));
    let list = get_tool(&server, "list_files").await;
    assert_eq!(list.annotations, None);
    let four_fields = json!({"name": "list_files", "description": "list_files does things",
                             "tool_schema": {}, "output_schema": null});
    assert_eq!(
        list.definition_sha256,
        toolplane::json::canonical_sha256(&four_fields),
        "a tool without annotations hashes as before they were kept"
    );

    // Searches read the title too.
    let found = discovery
        .search_tools(pb::SearchToolsRequest {
            meta: meta(0),
            query: "shredding".into(),
            ..Default::default()
        })
        .await
        .expect("searched")
        .into_inner();
    let names: Vec<_> = (found.matches.iter())
        .filter_map(|found| found.tool.as_ref().map(|tool| tool.tool_name.as_str()))
        .collect();
    assert_eq!(names, ["delete_file"]);

    let listed = mcp_tools(mcp).await;
    let served = named(&listed, "delete_file");
    assert_eq!(served["title"], "Shred a file");
    assert_eq!(
        served["annotations"],
        json!({"title": "Shred a file", "readOnlyHint": false, "destructiveHint": true})
    );
    assert!(named(&listed, "list_files").get("annotations").is_none());

    // The same tool saying it is not destructive is another definition.
    let softer = pb::ToolAnnotations {
        destructive_hint: Some(false),
        ..destructive("Shred a file")
    };
    register_ok(&mut discovery, 0, files(softer.clone())).await;
    let changed = get_tool(&server, "delete_file").await;
    assert_eq!(changed.annotations, Some(softer));
    assert_ne!(changed.definition_sha256, delete.definition_sha256);
    server.stop().await;
}

/// A title with a line break, or over 256 bytes, is INVALID_ARGUMENT naming
/// `registration.tools[0].annotations.title`; the service stays as registered.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_title_is_refused_and_nothing_changes() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    register_ok(&mut discovery, 0, files(destructive("Shred a file"))).await;
    for title in ["Delete\na file".to_owned(), "x".repeat(257)] {
        let refused = register(&mut discovery, 0, files(destructive(&title)))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        let fields: Vec<String> = violations(&refused)
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        assert_eq!(fields, ["registration.tools[0].annotations.title"]);
    }
    let kept = get_tool(&server, "delete_file").await;
    assert_eq!(kept.annotations, Some(destructive("Shred a file")));
    server.stop().await;
}

/// An imported MCP server's annotations are kept (the Python SDK server's `add` is read-only,
/// its `distance` idempotent and not read-only) and served on to toolplane's MCP clients.
#[tokio::test(flavor = "multi_thread")]
async fn imported_tools_keep_their_servers_annotations() {
    let Some(python) = PythonMcpServer::start(0) else {
        return;
    };
    let options = importing(
        "python-tools",
        McpSource::Http(python.url()),
        Duration::from_secs(600),
        None,
    );
    let (server, mcp) = TestServer::start_with_mcp(options).await;
    wait_for(&server, "python-tools", |found| found.is_some()).await;
    let add = get_tool(&server, "add").await;
    assert_eq!(
        add.annotations,
        Some(pb::ToolAnnotations {
            read_only_hint: Some(true),
            ..Default::default()
        })
    );
    let distance = get_tool(&server, "distance").await;
    assert_eq!(
        distance.annotations,
        Some(pb::ToolAnnotations {
            read_only_hint: Some(false),
            idempotent_hint: Some(true),
            ..Default::default()
        })
    );
    assert_eq!(get_tool(&server, "shout").await.annotations, None);
    let listed = mcp_tools(mcp).await;
    assert_eq!(
        named(&listed, "add")["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true}),
        "its own hint, and idempotent as a tool safe to retry"
    );
    server.stop().await;
}
