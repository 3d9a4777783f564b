//! Importing the tools of an MCP server (`[[mcp_imports]]`): a real MCP server built with the
//! official MCP Python SDK (`tests/peers/python_mcp_server.py`) has its tools registered as a
//! service, discovered and invoked through toolplane over MCP, followed when it says its tool
//! list changed, and expired while it is gone. (Servers toolplane starts: `mcp_import_stdio.rs`;
//! what MCP clients of toolplane get from imported servers: `mcp_gateway.rs`.)

use crate::common;

use std::time::Duration;

use common::mcp_server::{
    PythonMcpServer, importing, importing_with, invoke, output, register_add_at, wait_for,
};
use common::{TestServer, meta, reason};
use serde_json::json;
use tonic::Code;
use toolplane::grpc::ServerOptions;
use toolplane::json::struct_to_json;
use toolplane::mcp::import::{MAX_LISTING_PAGES, McpSource, ServerAuth};
use toolplane::pb;

fn import_of(server: &PythonMcpServer, refresh_interval: Duration) -> ServerOptions {
    import_with_token(server, refresh_interval, None)
}

fn import_with_token(
    server: &PythonMcpServer,
    refresh_interval: Duration,
    token: Option<&str>,
) -> ServerOptions {
    importing(
        "python-tools",
        McpSource::Http(server.url()),
        refresh_interval,
        token,
    )
}

/// The tools the Python server offers, by name.
const PYTHON_TOOLS: [&str; 8] = [
    "add", "distance", "fail", "getenv", "grow", "quit", "shout", "wait",
];

/// The names of a service's tools, sorted.
fn tool_names(service: &pb::DiscoveryInfo) -> Vec<&str> {
    let mut names: Vec<&str> = service
        .available_tools
        .iter()
        .map(|tool| tool.tool_name.as_str())
        .collect();
    names.sort_unstable();
    names
}

/// The imported service, once `ready` says it is as expected (within 30 s).
async fn wait_for_service(
    server: &TestServer,
    ready: impl Fn(Option<&pb::DiscoveryInfo>) -> bool,
) -> Option<pb::DiscoveryInfo> {
    wait_for(server, "python-tools", ready).await
}

/// The Python MCP server started with `args` (stopped when dropped), a server importing it
/// (refreshed every minute), and its service once imported; `None` when the Python peers are
/// not installed (the test is skipped).
async fn imported_from(args: &[&str]) -> Option<(PythonMcpServer, TestServer, pb::DiscoveryInfo)> {
    let mcp = PythonMcpServer::start_with(0, args)?;
    let server = TestServer::start_with(import_of(&mcp, Duration::from_secs(60))).await;
    let service = wait_for_service(&server, |found| found.is_some())
        .await
        .expect("imported");
    Some((mcp, server, service))
}

/// The server's tools are registered (pydantic schemas with `$defs` and `$ref` included) at
/// its URL after `mcp+`, checked by toolplane against their schemas, and called over MCP:
/// structured answers, text answers, the tool's own failure, each recorded. Tools annotated
/// read-only or idempotent declare the retry capability.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_servers_tools_are_imported_and_invoked_through_toolplane() {
    let Some((mcp, server, service)) = imported_from(&[]).await else {
        return;
    };
    assert_eq!(service.endpoint, format!("mcp+{}", mcp.url()));
    assert_eq!(tool_names(&service), PYTHON_TOOLS);
    // Read-only and idempotent tools (MCP annotations) are safe to retry; the others are not.
    let retry = pb::ServiceCapability::Retry as i32;
    for tool in &service.available_tools {
        let safe = matches!(tool.tool_name.as_str(), "add" | "distance");
        assert_eq!(
            tool.capabilities.contains(&retry),
            safe,
            "{}: {:?}",
            tool.tool_name,
            tool.capabilities
        );
    }
    let distance = server
        .discovery()
        .await
        .get_tool(pb::GetToolRequest {
            meta: meta(0),
            tool_name: "distance".into(),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner()
        .tool
        .expect("a tool");
    let schema = struct_to_json(distance.tool_schema.as_ref().expect("a schema")).expect("JSON");
    assert!(schema["$defs"]["Point"].is_object(), "{schema}");

    let added = invoke(&server, "add", json!({"a": 2, "b": 40}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 42}));
    let record = added.record.expect("a record");
    assert_eq!(
        (record.service_name.as_str(), record.status()),
        ("python-tools", pb::InvocationStatus::Succeeded)
    );
    let far = json!({"start": {"x": 0, "y": 0}, "end": {"x": 3, "y": 4}});
    let measured = invoke(&server, "distance", far).await.expect("measured");
    assert_eq!(output(&measured)["result"].as_f64(), Some(5.0));
    let shouted = invoke(&server, "shout", json!({"text": "hi"}))
        .await
        .expect("shouted");
    assert_eq!(output(&shouted), json!("HI"));

    // Checked here against the imported schema ($ref into $defs): the server is not called.
    let refused = invoke(
        &server,
        "distance",
        json!({"start": {"x": 0}, "end": {"x": 1, "y": 1}}),
    )
    .await
    .expect_err("a point without y");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let failed = invoke(&server, "fail", json!({"why": "on purpose"}))
        .await
        .expect_err("the tool fails");
    assert_eq!(failed.code(), Code::Unknown, "{failed:?}");
    assert_eq!(reason(&failed), "TOOL_FAILED");
    server.stop().await;
}

/// A tool whose input schema would make validation exponential (a reference applied twice
/// under a property, 2^n evaluations for an input n levels deep) is left out of the import;
/// the server's other tools are imported and called as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_whose_schema_makes_validation_exponential_is_left_out() {
    let Some((_mcp, server, service)) = imported_from(&["--exponential-schema"]).await else {
        return;
    };
    assert_eq!(tool_names(&service), PYTHON_TOOLS, "nested_filter left out");
    let refused = invoke(&server, "nested_filter", json!({"where": {}}))
        .await
        .expect_err("not imported");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    let added = invoke(&server, "add", json!({"a": 1, "b": 2}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 3}));
    server.stop().await;
}

/// An MCP server's answer larger, as the protobuf Value InvokeTool answers with, than a gRPC
/// client reads (450,000 zeros: 0.9 MB of JSON, 4.95 MB as a Value) fails the call
/// OUT_OF_RANGE. It was recorded SUCCEEDED, and the caller's client refused the answer.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_answer_too_large_for_the_caller_is_a_failure() {
    let Some((_mcp, server, _service)) = imported_from(&["--large-answers"]).await else {
        return;
    };
    let failed = invoke(&server, "zeros", json!({"count": 450_000}))
        .await
        .expect_err("too large to answer");
    assert_eq!(failed.code(), Code::OutOfRange, "{failed:?}");
    assert!(failed.message().contains("larger than"), "{failed:?}");
    let answered = invoke(&server, "zeros", json!({"count": 1000}))
        .await
        .expect("answered");
    assert_eq!(
        output(&answered)["result"].as_array().map(Vec::len),
        Some(1000)
    );
    server.stop().await;
}

/// A server whose tool list holds a name twice has its tools imported, that one once (two
/// tools of one name would have the registration refused whole, and nothing imported).
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_listed_twice_is_imported_once() {
    let Some((_mcp, server, service)) = imported_from(&["--list-twice", "add"]).await else {
        return;
    };
    assert_eq!(tool_names(&service), PYTHON_TOOLS);
    let added = invoke(&server, "add", json!({"a": 1, "b": 2}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 3}));
    server.stop().await;
}

/// A server whose tool list names a next page on every page has the pages read until one
/// names a cursor given before (a cursor loop), or for at most `MAX_LISTING_PAGES` pages:
/// its tools are imported, and a listing stops there rather than asking for pages without
/// end.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_list_whose_pages_never_end_is_read_no_further() {
    for (cursors, pages) in [("same", 2), ("new", MAX_LISTING_PAGES as u64)] {
        let Some((_mcp, server, service)) = imported_from(&["--endless-pages", cursors]).await
        else {
            return;
        };
        assert!(tool_names(&service).contains(&"pages_listed"));
        let listed = invoke(&server, "pages_listed", json!({}))
            .await
            .expect("called");
        let asked = output(&listed)["result"].as_u64().expect("a count");
        assert!(
            asked.is_multiple_of(pages) && (1..=2).contains(&(asked / pages)),
            "{cursors} cursors: {pages} pages a listing, not {asked}"
        );
        server.stop().await;
    }
}

/// A server saying its tool list changed is listed again at once, not at the next refresh.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_list_change_the_server_announces_is_imported_at_once() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let server = TestServer::start_with(import_of(&mcp, Duration::from_secs(600))).await;
    wait_for_service(&server, |found| found.is_some()).await;
    invoke(&server, "grow", json!({"name": "late_tool"}))
        .await
        .expect("grown");
    wait_for_service(&server, |found| {
        found.is_some_and(|service| {
            service
                .available_tools
                .iter()
                .any(|tool| tool.tool_name == "late_tool")
        })
    })
    .await;
    let late = invoke(&server, "late_tool", json!({}))
        .await
        .expect("called");
    assert_eq!(output(&late), json!("late_tool"));
    server.stop().await;
}

/// While the server is gone its service expires (its lease is no longer renewed), and it is
/// imported again when the server is back; `toolplane_mcp_imports` follows.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_servers_service_expires_and_comes_back_with_it() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let port = mcp.port;
    let (server, metrics) =
        TestServer::start_with_metrics(import_of(&mcp, Duration::from_secs(1))).await;
    let imports = |state: &'static str| async move {
        let text = common::http_client()
            .get(format!("http://{metrics}/metrics"))
            .send()
            .await
            .expect("scraped")
            .text()
            .await
            .expect("a body");
        let sample = format!("toolplane_mcp_imports{{state=\"{state}\"}} 1");
        text.lines().any(|line| line == sample)
    };
    wait_for_service(&server, |found| found.is_some()).await;
    assert!(imports("imported").await);
    drop(mcp);
    wait_for_service(&server, |found| found.is_none()).await;
    assert!(imports("not_imported").await);
    let unavailable = invoke(&server, "add", json!({"a": 1, "b": 1}))
        .await
        .expect_err("nothing to call");
    assert_eq!(unavailable.code(), Code::NotFound, "{unavailable:?}");
    let _back = PythonMcpServer::start(port).expect("started again");
    wait_for_service(&server, |found| found.is_some()).await;
    assert!(imports("imported").await);
    let added = invoke(&server, "add", json!({"a": 1, "b": 1}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 2}));
    server.stop().await;
}

/// A server asking for a bearer token is imported and called with the one configured (and is
/// not imported without it).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_asking_for_a_bearer_token_is_sent_the_one_configured() {
    let Some(mcp) = PythonMcpServer::start_with(0, &["s3cret"]) else {
        return;
    };
    let without = TestServer::start_with(import_of(&mcp, Duration::from_secs(1))).await;
    let with = TestServer::start_with(import_with_token(
        &mcp,
        Duration::from_secs(1),
        Some("s3cret"),
    ))
    .await;
    wait_for_service(&with, |found| found.is_some()).await;
    let added = invoke(&with, "add", json!({"a": 20, "b": 22}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 42}));
    // Refused all along: the import without the token has tried at least twice by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut discovery = without.discovery().await;
    let missing = discovery
        .get_service(pb::GetServiceRequest {
            meta: meta(0),
            service_name: "python-tools".into(),
        })
        .await
        .expect_err("never imported");
    assert_eq!(missing.code(), Code::NotFound);
    with.stop().await;
    without.stop().await;
}

/// An import's `bearer_token_file` is read again at once when the server refuses the token
/// read before: a token rotated at the server and then in the file is sent on the session
/// open, long before the file's reread interval (an hour here) and with no SIGHUP. While the
/// file holds a token the server no longer takes, calls fail, saying so.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_rotated_in_its_file_is_sent_once_the_server_refuses_the_old_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (taken, sent) = (dir.path().join("taken"), dir.path().join("sent"));
    let rotate = |file: &std::path::Path, token: &str| {
        std::fs::write(file, format!("{token}\n")).expect("write the token");
    };
    rotate(&taken, "one");
    rotate(&sent, "one");
    let taken_arg = taken.to_str().expect("a UTF-8 path");
    let Some(mcp) = PythonMcpServer::start_with(0, &["--token-file", taken_arg]) else {
        return;
    };
    let auth = ServerAuth::BearerFile {
        path: sent.clone(),
        every: Duration::from_secs(3600),
    };
    let source = McpSource::Http(mcp.url());
    let refresh = Duration::from_secs(60);
    let server =
        TestServer::start_with(importing_with("python-tools", source, refresh, Some(auth))).await;
    wait_for_service(&server, |found| found.is_some()).await;
    let add = async |a: i64| invoke(&server, "add", json!({"a": a, "b": 1})).await;
    assert_eq!(output(&add(1).await.expect("added")), json!({"result": 2}));
    rotate(&taken, "two");
    rotate(&sent, "two");
    assert_eq!(
        output(&add(2).await.expect("sent the token rotated")),
        json!({"result": 3})
    );
    rotate(&taken, "three");
    let refused = add(3).await.expect_err("the file holds the old token");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("authorization required"),
        "{}",
        refused.message()
    );
    rotate(&sent, "three");
    assert_eq!(output(&add(4).await.expect("added")), json!({"result": 5}));
    server.stop().await;
}

/// An import's bearer token is sent only for the service the import registered: another
/// service a provider registers at the same URL is called without it (and refused by a server
/// that asks for one), while the import's own calls go on with it.
#[tokio::test(flavor = "multi_thread")]
async fn an_imports_token_is_not_lent_to_other_services_at_its_url() {
    let Some(mcp) = PythonMcpServer::start_with(0, &["s3cret"]) else {
        return;
    };
    let server = TestServer::start_with(import_with_token(
        &mcp,
        Duration::from_secs(60),
        Some("s3cret"),
    ))
    .await;
    wait_for_service(&server, |found| found.is_some()).await;
    register_add_at(&server, "borrowed", &mcp.url()).await;
    let mut invoker = common::invoke_fixture::invoker(&server).await;
    let mut add_of = async |service: &str| {
        invoker
            .invoke_tool(pb::InvokeToolRequest {
                meta: meta(0),
                tool_name: "add".into(),
                service_name: service.into(),
                input: toolplane::json::json_to_struct(&json!({"a": 2, "b": 3})),
                ..Default::default()
            })
            .await
    };
    let refused = add_of("borrowed")
        .await
        .expect_err("sent without the token");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("authorization required"),
        "{}",
        refused.message()
    );
    let added = add_of("python-tools").await.expect("sent with the token");
    assert_eq!(output(&added.into_inner()), json!({"result": 5}));
    server.stop().await;
}

/// A provider may register an MCP server's URL after `mcp+` itself: the tools it lists are
/// called over MCP.
#[tokio::test(flavor = "multi_thread")]
async fn a_registration_with_an_mcp_endpoint_is_called_over_mcp() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let server = TestServer::start().await;
    register_add_at(&server, "registered-mcp", &mcp.url()).await;
    let added = invoke(&server, "add", json!({"a": 3, "b": 4}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 7}));
    server.stop().await;
}

/// A server restarted (a new process at the same URL, as a rollout does), which no longer
/// knows the session toolplane had with it, is called over a new session.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_is_called_over_a_new_session() {
    let Some((mcp, server, _)) = imported_from(&[]).await else {
        return;
    };
    let port = mcp.port;
    let added = invoke(&server, "add", json!({"a": 1, "b": 1}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 2}));
    drop(mcp);
    let _back = PythonMcpServer::start(port).expect("started again");
    let added = invoke(&server, "add", json!({"a": 2, "b": 2}))
        .await
        .expect("added by the new process");
    assert_eq!(output(&added), json!({"result": 4}));
    server.stop().await;
}
