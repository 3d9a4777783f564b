//! Importing the tools of MCP servers toolplane starts itself (`command`), spoken to over their
//! standard input and output: the Python SDK's server (`tests/peers/python_mcp_server.py`),
//! one slow to start, and the TypeScript SDK's reference server.

use crate::common;

use std::time::{Duration, Instant};

use common::invoke_fixture::invoker;
use common::mcp_server::{
    PythonMcpServer, importing_command, invoke, node_reference_server, output, wait_for,
};
use common::{TestServer, meta};
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;
use toolplane::json::json_to_struct;
use toolplane::mcp::import::INHERITED_ENV;
use toolplane::pb;
use toolplane::pb::health_service_client::HealthServiceClient;

/// A server importing, as `service`, the MCP server that `command` starts with the variables
/// `env` (refreshed every minute), and the service once imported.
async fn import_started(
    service: &str,
    command: &[String],
    env: &[(&str, &str)],
) -> (TestServer, pb::DiscoveryInfo) {
    let server = TestServer::start_with(importing_command(service, command, env)).await;
    let imported = wait_for(&server, service, |found| found.is_some())
        .await
        .expect("imported");
    (server, imported)
}

/// A server toolplane starts itself (`command`) is spoken to over its standard input and
/// output: its tools are imported under `mcp+stdio://TENANT/SERVICE` and called, and it is
/// started again after its process ended, the import following the new process.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_started_by_command_is_imported_over_stdio() {
    let Some(command) = PythonMcpServer::stdio_command() else {
        return;
    };
    let env = [("TOOLPLANE_TEST_SET", "set-value")];
    let (server, service) = import_started("python-stdio", &command, &env).await;
    assert_eq!(service.endpoint, "mcp+stdio://0/python-stdio");
    // Its environment: the variables its entry sets, and of toolplane's only the few every
    // MCP SDK's stdio client hands on.
    let getenv = async |name: &str| {
        let answer = invoke(&server, "getenv", json!({ "name": name }))
            .await
            .expect("getenv");
        output(&answer)["result"]
            .as_str()
            .expect("a string")
            .to_owned()
    };
    assert_eq!(getenv("TOOLPLANE_TEST_SET").await, "set-value");
    assert_eq!(getenv("PATH").await, std::env::var("PATH").expect("PATH"));
    let (withheld, _) = std::env::vars()
        .find(|(name, value)| !INHERITED_ENV.contains(&name.as_str()) && !value.is_empty())
        .expect("a variable of the test's environment beyond the inherited ones");
    assert_eq!(getenv(&withheld).await, "", "{withheld} was handed on");
    let added = invoke(&server, "add", json!({"a": 5, "b": 6}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 11}));
    // The server's process ends in the middle of a call: that call fails, the next starts it
    // again.
    let crashed = invoke(&server, "quit", json!({}))
        .await
        .expect_err("the server is gone");
    assert_eq!(crashed.code(), Code::Unavailable, "{crashed:?}");
    assert!(
        crashed
            .message()
            .contains("the MCP server's process ended during the call")
            && crashed
                .message()
                .contains("mcp_server=mcp+stdio://0/python-stdio"),
        "says what happened and where to look: {crashed:?}"
    );
    let again = invoke(&server, "add", json!({"a": 1, "b": 2}))
        .await
        .expect("started again");
    assert_eq!(output(&again), json!({"result": 3}));
    // The import follows the new process's session: its list_changed is heard at once, not at
    // the next refresh (a minute away).
    invoke(&server, "grow", json!({"name": "after_restart"}))
        .await
        .expect("grown");
    wait_for(&server, "python-stdio", |found| {
        found.is_some_and(|service| {
            (service.available_tools.iter()).any(|tool| tool.tool_name == "after_restart")
        })
    })
    .await;
    server.stop().await;
}

/// A server toolplane starts that takes longer than 10 s to answer the initialize request (as
/// one `npx` or `uvx` fetches first may) is imported and called: it has a minute. With the 10 s
/// a session at a URL has to open, it was stopped at 10 s and started again, never imported.
/// When its process ends, a health check starts it again without waiting that long: the check
/// fails after 11 s saying the session is still opening (calls are refused at once meanwhile,
/// as for any provider failing its check; a check that pinged the ended session first fails
/// saying so), and a later check finds it started. (A round of
/// health checks, every endpoint's, was held up until it started.)
#[tokio::test(flavor = "multi_thread")]
async fn a_server_slow_to_start_is_imported_and_its_restart_not_waited_for() {
    let Some(command) = PythonMcpServer::slow_stdio_command() else {
        return;
    };
    let mut options = importing_command("slow-start", &command, &[]);
    options.provider_health_interval = Duration::from_secs(1);
    let server = TestServer::start_with(options).await;
    let service = wait_for(&server, "slow-start", |found| found.is_some())
        .await
        .expect("imported");
    assert_eq!(service.endpoint, "mcp+stdio://0/slow-start");
    let added = invoke(&server, "add", json!({"a": 2, "b": 3}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 5}));

    invoke(&server, "quit", json!({}))
        .await
        .expect_err("the server is gone");
    let health = HealthServiceClient::new(server.channel().await);
    health_becomes(&health, pb::HealthState::Unhealthy).await;
    // A check that pinged the session before it saw its process end fails first with the
    // ping's reason (the transport closed); the check after it starts the server again.
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let refused = invoke(&server, "add", json!({"a": 1, "b": 1}))
            .await
            .expect_err("refused while it starts");
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        if refused
            .message()
            .contains("the MCP session is still opening")
        {
            break;
        }
        assert!(Instant::now() < give_up, "{refused:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    health_becomes(&health, pb::HealthState::Healthy).await;
    let added = invoke(&server, "add", json!({"a": 1, "b": 1}))
        .await
        .expect("started again");
    assert_eq!(output(&added), json!({"result": 2}));
    server.stop().await;
}

/// Calls whose deadline (3 s) is shorter than the start of a server toolplane starts again get
/// an answer once it has started: the start goes on when a call gives up on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_giving_up_on_a_slow_start_does_not_stop_it() {
    let Some(command) = PythonMcpServer::slow_stdio_command() else {
        return;
    };
    // Its health is checked once a day (`importing_with`): no check opens the session meanwhile.
    let (server, _) = import_started("slow-start", &command, &[]).await;
    invoke(&server, "quit", json!({}))
        .await
        .expect_err("the server is gone");
    let mut client = invoker(&server).await;
    let give_up = Instant::now() + Duration::from_secs(45);
    let mut given_up = 0;
    let answer = loop {
        let mut request = tonic::Request::new(pb::InvokeToolRequest {
            meta: meta(0),
            tool_name: "add".into(),
            input: json_to_struct(&json!({"a": 1, "b": 1})),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(3));
        match client.invoke_tool(request).await {
            Ok(answer) => break answer.into_inner(),
            // The server's answer at the deadline, or the client's own timeout a moment after.
            Err(status) => assert!(
                matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
                "{status:?}"
            ),
        }
        given_up += 1;
        assert!(Instant::now() < give_up, "never answered");
    };
    assert_eq!(output(&answer), json!({"result": 2}));
    assert!(given_up > 0, "the first calls waited for the start");
    server.stop().await;
}

/// A server toolplane started that stops answering `tools/list` (made to here) does not hold
/// its import for good: the listing is given up at the end of the lease it would renew (3 s
/// with a refresh every second; 60 s at most), and the server is stopped and started again,
/// its new process imported. (The import waited on the listing for good, its service gone.)
#[tokio::test(flavor = "multi_thread")]
async fn a_server_stuck_listing_its_tools_is_started_again() {
    let Some(mut command) = PythonMcpServer::stdio_command() else {
        return;
    };
    command.push("--freezable-listing".into());
    let mut options = importing_command("stuck", &command, &[]);
    options.mcp_imports[0].refresh_interval = Duration::from_secs(1);
    let server = TestServer::start_with(options).await;
    wait_for(&server, "stuck", |found| found.is_some())
        .await
        .expect("imported");
    invoke(&server, "freeze_listing", json!({}))
        .await
        .expect("frozen");
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        // Refused while the service is gone (its lease ended) or its server is starting.
        let frozen = invoke(&server, "listing_frozen", json!({})).await;
        if frozen.is_ok_and(|answer| output(&answer) == json!({"result": false})) {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the stuck server was never started again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop().await;
}

/// Waits (up to 40 s) until `slow-start` is reported `state`.
async fn health_becomes(health: &HealthServiceClient<Channel>, state: pb::HealthState) {
    let give_up = Instant::now() + Duration::from_secs(40);
    loop {
        let request = pb::GetServiceHealthRequest {
            meta: meta(0),
            service_name: "slow-start".into(),
        };
        let answer = health.clone().get_service_health(request).await;
        if answer.is_ok_and(|answer| answer.into_inner().status == state as i32) {
            return;
        }
        assert!(Instant::now() < give_up, "never {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The MCP reference server of the TypeScript SDK (`@modelcontextprotocol/server-everything`),
/// started over stdio: its tools are imported (as their names and schemas say) and called, a
/// text answer and a structured one.
#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_reference_server_is_imported_over_stdio() {
    let Some(command) = node_reference_server("server-everything", &["stdio"]) else {
        return;
    };
    let (server, service) = import_started("everything", &command, &[]).await;
    let names: Vec<&str> = service
        .available_tools
        .iter()
        .map(|tool| tool.tool_name.as_str())
        .collect();
    assert!(
        names.contains(&"get-sum") && names.contains(&"echo"),
        "{names:?}"
    );
    let sum = invoke(&server, "get-sum", json!({"a": 2, "b": 3}))
        .await
        .expect("summed");
    assert_eq!(output(&sum), json!("The sum of 2 and 3 is 5."));
    let weather = invoke(
        &server,
        "get-structured-content",
        json!({"location": "New York"}),
    )
    .await
    .expect("structured");
    assert!(
        output(&weather)["temperature"].is_number(),
        "{:?}",
        output(&weather)
    );
    let refused = invoke(&server, "get-sum", json!({"a": "two", "b": 3}))
        .await
        .expect_err("a is a number");
    assert_eq!(refused.code(), Code::InvalidArgument);
    server.stop().await;
}
