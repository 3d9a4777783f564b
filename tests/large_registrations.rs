//! Large registrations: validated off the serving threads, in the pool of heavy work, as large
//! inputs are (`grpc::registration_size`), and answered with the tools as registered; and the
//! listings of MCP imports, worked out in the same pool.

use crate::common;
use crate::large_inputs::{check_request, large_input, register_slow_tool_of};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::mcp_server::{PythonMcpServer, importing, invoke, wait_for};
use common::*;
use serde_json::json;
use tokio::task::JoinSet;
use toolplane::mcp::import::McpSource;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// Starts a slow check of `tenant`'s for each thread of the pool of heavy work; each counts in
/// `answered` when it is answered.
async fn busy_pool(
    server: &TestServer,
    tenant: u64,
    answered: &Arc<AtomicUsize>,
) -> JoinSet<Result<tonic::Response<toolplane::pb::ValidateToolInputResponse>, tonic::Status>> {
    let mut checks = JoinSet::new();
    let channel = server.channel().await;
    for _ in 0..toolplane::invoke::heavy::default_permits() {
        let mut client = ToolInvokeServiceClient::new(channel.clone());
        let (request, answered) = (check_request(tenant, &large_input()), answered.clone());
        checks.spawn(async move {
            let answer = client.validate_tool_input(request).await;
            answered.fetch_add(1, Ordering::SeqCst);
            answer
        });
    }
    // The checks reach the pool first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    checks
}

/// 30 tools of about 1 KB of schema each: past the 16 KiB from which a registration is
/// validated off the serving threads.
fn large_registration() -> toolplane::pb::ServiceRegistration {
    let properties: serde_json::Map<_, _> = (0..24)
        .map(|n| {
            (
                format!("field_{n:02}"),
                json!({"type": "string", "maxLength": 64}),
            )
        })
        .collect();
    let schema = json!({"type": "object", "properties": properties});
    let tools = (0..30).map(|n| tool(&format!("tool_{n:02}"), schema.clone()));
    registration("large", tools.collect())
}

/// With every thread of the pool of heavy work busy with one of a tenant's slow checks (seconds
/// each in a debug build), a small registration of the tenant's is answered at once, while a
/// large one waits for its turn in the pool, after a check: it is validated there, not on the
/// thread serving it, whose other calls it held up for as long as it took (0.45 s for 4 MB in
/// a release build). Its answer echoes every tool, as registered.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_registration_is_validated_in_the_pool_of_heavy_work() {
    const TENANT: u64 = 1;
    let server = TestServer::start().await;
    register_slow_tool_of(&server, TENANT).await;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut checks = busy_pool(&server, TENANT, &answered).await;
    let mut discovery = server.discovery().await;
    let small = registration("small", vec![simple_tool("one")]);
    register_ok(&mut discovery, TENANT, small).await;
    let waited = "the small registration waited for the pool";
    assert_eq!(answered.load(Ordering::SeqCst), 0, "{waited}");

    let large = large_registration();
    let answer = register_ok(&mut discovery, TENANT, large.clone()).await;
    let ran_in_place = "the large registration was validated in place";
    assert!(answered.load(Ordering::SeqCst) >= 1, "{ran_in_place}");
    let names: Vec<&str> = (answer.tools.iter())
        .map(|t| t.tool_name.as_str())
        .collect();
    let registered: Vec<&str> = (large.tools.iter()).map(|t| t.tool_name.as_str()).collect();
    assert_eq!(names, registered);
    assert_eq!(answer.tools[3].tool_schema, large.tools[3].tool_schema);
    assert_eq!(answer.tools[3].service_name, "large");
    checks.abort_all();
}

/// An MCP import's changed listing is checked and validated in the pool of heavy work, by the
/// import's tenant in turns: with every thread of the pool busy with one of the tenant's slow
/// checks, a tool the server adds (announcing `list_changed`, so it is listed again at once)
/// is registered only after a check is answered. Before, the listing was checked and
/// registered on the import's task, on a thread serving calls, at once.
#[tokio::test(flavor = "multi_thread")]
async fn an_imports_changed_listing_is_worked_out_in_the_pool_of_heavy_work() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let refresh = Duration::from_secs(600);
    let options = importing("python-tools", McpSource::Http(mcp.url()), refresh, None);
    let server = TestServer::start_with(options).await;
    wait_for(&server, "python-tools", |found| found.is_some()).await;
    // The import's tenant is 0.
    register_slow_tool_of(&server, 0).await;
    let answered = Arc::new(AtomicUsize::new(0));
    let mut checks = busy_pool(&server, 0, &answered).await;
    invoke(&server, "grow", json!({"name": "late_tool"}))
        .await
        .expect("grown");
    wait_for(&server, "python-tools", |found| {
        found.is_some_and(|service| {
            (service.available_tools.iter()).any(|tool| tool.tool_name == "late_tool")
        })
    })
    .await;
    let in_place = "the changed listing was worked out in place";
    assert!(answered.load(Ordering::SeqCst) >= 1, "{in_place}");
    checks.abort_all();
    server.stop().await;
}
