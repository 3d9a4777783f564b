//! Large registrations: validated off the serving threads, in the pool of heavy work, as large
//! inputs are (`grpc::registration_size`), and answered with the tools as registered.

use crate::common;
use crate::large_inputs::{check_request, large_input, register_slow_tool_of};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::json;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

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
    let threads = toolplane::invoke::heavy::default_permits();
    let answered = Arc::new(AtomicUsize::new(0));
    let mut checks = tokio::task::JoinSet::new();
    let channel = server.channel().await;
    for _ in 0..threads {
        let mut client = ToolInvokeServiceClient::new(channel.clone());
        let (request, answered) = (check_request(TENANT, &large_input()), answered.clone());
        checks.spawn(async move {
            let answer = client.validate_tool_input(request).await;
            answered.fetch_add(1, Ordering::SeqCst);
            answer
        });
    }
    // The checks reach the pool first.
    tokio::time::sleep(Duration::from_millis(500)).await;
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
