//! `toolplane serve`'s JSON log (`log_format = "json"`) stays one JSON object per line, with
//! what would otherwise be written beside it logged as events:
//!
//! - what imported MCP servers log, as events naming the server: the lines a server toolplane
//!   started writes to its standard error, and the log messages (`notifications/message`)
//!   servers send over stdio and over Streamable HTTP (a server's standard error was once
//!   written into the log as it came). Real servers: the official MCP Python SDK's;
//! - a server toolplane starts that exits at once: its standard error, and the import's failure
//!   saying where to find it;
//! - a server writing to its standard error without pause: logged up to its budget, the rest
//!   counted;
//! - calls refused without pause: logged up to the budget of refusals, the rest counted;
//! - a panic, as an ERROR event (Rust's own hook writes it to stderr as lines of text).

use crate::common;

use std::time::Duration;

use common::mcp_server::PythonMcpServer;
use common::meta;
use common::process::{ServerProcess, wait_until};
use serde_json::{Value, json};
use toolplane::json::json_to_struct;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// The log events of `server` so far, each line parsed; fails on a line that is not JSON.
fn events(server: &ServerProcess) -> Vec<Value> {
    server
        .log_lines_with("")
        .iter()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|_| panic!("a log line that is not JSON: {line}"))
        })
        .collect()
}

/// The events of `events` logged for the MCP server `endpoint` whose message is `message`.
fn logged_for<'a>(events: &'a [Value], endpoint: &str, message: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|event| {
            event["target"] == "toolplane::mcp_server"
                && event["fields"]["mcp_server"] == endpoint
                && event["fields"]["message"] == message
        })
        .collect()
}

/// `shout` of `service`, called through toolplane, answers `HI`.
async fn shout(invoker: &mut ToolInvokeServiceClient<tonic::transport::Channel>, service: &str) {
    let answer = invoker
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(0),
            service_name: service.into(),
            tool_name: "shout".into(),
            input: json_to_struct(&json!({"text": "hi"})),
            ..Default::default()
        })
        .await
        .expect("shouted")
        .into_inner();
    assert_eq!(common::mcp_server::output(&answer), json!("HI"));
}

/// A server started over stdio and one at a URL: the first's standard error and both servers'
/// log messages are events naming them, and every line of the log is JSON.
#[tokio::test(flavor = "multi_thread")]
async fn what_imported_servers_log_is_in_the_json_log_naming_them() {
    let Some(command) = PythonMcpServer::stdio_command() else {
        return;
    };
    let Some(http_server) = PythonMcpServer::start(0) else {
        return;
    };
    let config = format!(
        "log_format = \"json\"\n\
         [[mcp_imports]]\nservice = \"piped\"\ncommand = {command:?}\n\
         [[mcp_imports]]\nservice = \"remote\"\nurl = \"{}\"\n",
        http_server.url(),
    );
    let (server, _dir) = ServerProcess::start_with_config(&config, &[], &[]);
    let mut discovery = DiscoveryServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    for service in ["piped", "remote"] {
        common::mcp_server::wait_for_at(&mut discovery, service, |found| found.is_some()).await;
    }
    let mut invoker = ToolInvokeServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    shout(&mut invoker, "piped").await;
    shout(&mut invoker, "remote").await;

    let piped = "mcp+stdio://0/piped";
    let remote = format!("mcp+{}", http_server.url());
    wait_until("both servers' log messages are logged", || {
        let events = events(&server);
        !logged_for(&events, piped, "shouting 'hi'").is_empty()
            && !logged_for(&events, &remote, "shouting 'hi'").is_empty()
    });
    // Give a standard error line written out of order with the calls time to arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events = events(&server);

    let started = logged_for(&events, piped, "python-tools: serving MCP over stdio");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["level"], "INFO");
    assert_eq!(started[0]["fields"]["stream"], "stderr");

    for endpoint in [piped, remote.as_str()] {
        let sent = logged_for(&events, endpoint, "shouting 'hi'");
        assert_eq!(sent.len(), 1, "{endpoint}: {sent:?}");
        assert_eq!(sent[0]["level"], "WARN", "{endpoint}");
        assert_eq!(sent[0]["fields"]["mcp_level"], "warning", "{endpoint}");
        assert_eq!(sent[0]["fields"]["logger"], "shout", "{endpoint}");
    }
}

/// A server toolplane starts that exits before answering is reported as such, pointing to the
/// log, where what it wrote to its standard error is.
#[test]
fn a_started_server_that_exits_at_once_is_reported_with_where_to_look() {
    let config = "log_format = \"json\"\n\
         [[mcp_imports]]\nservice = \"broken\"\n\
         command = [\"sh\", \"-c\", \"echo no module named tools >&2; exit 1\"]\n";
    let (server, _dir) = ServerProcess::start_with_config(config, &[], &[]);
    let endpoint = "mcp+stdio://0/broken";
    wait_until(
        "the failed import and the server's words are logged",
        || {
            let events = events(&server);
            !logged_for(&events, endpoint, "no module named tools").is_empty()
                && events.iter().any(|event| {
                    event["fields"]["message"] == "cannot reach the MCP server to import"
                })
        },
    );
    let events = events(&server);
    let failed = events
        .iter()
        .find(|event| event["fields"]["message"] == "cannot reach the MCP server to import")
        .expect("logged");
    let error = failed["fields"]["error"].as_str().expect("an error");
    assert!(
        error.contains("ended before answering the initialize request")
            && error.contains(&format!("mcp_server={endpoint}")),
        "{error}"
    );
}

/// A started server writing without pause to its standard error fills toolplane's log only up
/// to its budget (10,000 lines in 30 s): the rest are counted, a WARN says so as they begin
/// and another how many were left out once its standard error ended. The server started again
/// afterwards is logged as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_writing_without_pause_fills_the_log_only_up_to_its_budget() {
    let dir = tempfile::tempdir().expect("a directory");
    let chattered = dir.path().join("chattered");
    // The first start writes 12,000 lines and ends; the next starts the server.
    let script = format!(
        "if [ ! -e {0} ]; then touch {0}; i=0; while [ $i -lt 12000 ]; do \
         echo \"chatter $i\" >&2; i=$((i+1)); done; exit 1; fi; exec \"$@\"",
        chattered.display()
    );
    let Some(command) = PythonMcpServer::stdio_command_launched_by(&script) else {
        return;
    };
    let config = format!(
        "log_format = \"json\"\n{}",
        common::mcp_server::stdio_entry("chatty", &command)
    );
    let (server, _dir) = ServerProcess::start_with_config(&config, &[], &[]);
    let mut discovery = DiscoveryServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    common::mcp_server::wait_for_at(&mut discovery, "chatty", |found| found.is_some()).await;
    let endpoint = "mcp+stdio://0/chatty";
    let serving = "python-tools: serving MCP over stdio";
    wait_until("the server started again is logged", || {
        !logged_for(&events(&server), endpoint, serving).is_empty()
    });
    let events = events(&server);
    let of_server: Vec<&Value> = (events.iter())
        .filter(|event| event["fields"]["mcp_server"] == endpoint)
        .collect();
    let chatter = (of_server.iter())
        .filter(|event| {
            event["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("chatter "))
        })
        .count();
    assert_eq!(chatter, 10_000);
    let limited: Vec<&&Value> = (of_server.iter())
        .filter(|event| event["level"] == "WARN")
        .collect();
    assert_eq!(limited.len(), 2, "{limited:?}");
    assert_eq!(limited[0]["fields"]["limit"], 10_000);
    assert_eq!(limited[1]["fields"]["left_out"], 2_000);
    assert_eq!(
        logged_for(&events, endpoint, serving).len(),
        1,
        "the server started again has a budget of its own"
    );
}

/// Calls refused without pause (a caller sending a token no rule holds) are logged up to the
/// budget of refusals (100 in 10 s); a WARN says so as the rest begin to be left out, another
/// how many were left out once the window ended (no refusal follows to say it), and the next
/// window logs refusals again.
#[tokio::test(flavor = "multi_thread")]
async fn calls_refused_without_pause_fill_the_log_only_up_to_the_budget() {
    use toolplane::client::{BearerToken, ClientError, ToolplaneClient};
    let config = "log_format = \"json\"\n\
         [[tenant_access]]\ntoken_env = \"PLANNER_TOKEN\"\ntenants = [1]\n";
    let (server, _dir) =
        ServerProcess::start_with_config(config, &[], &[("PLANNER_TOKEN", "right-token")]);
    let wrong = BearerToken::new("wrong-token").expect("a token");
    let client = ToolplaneClient::connect(&server.endpoint(), toolplane::envelope::TenantId(1))
        .await
        .expect("connects")
        .with_bearer_token(wrong);
    let refused = toolplane::access::REFUSALS_BURST + 50;
    for _ in 0..refused {
        match client.all_services().await {
            Err(ClientError::Rpc(status)) => {
                assert_eq!(status.code(), tonic::Code::Unauthenticated)
            }
            other => panic!("refused as unauthenticated, got {other:?}"),
        }
    }
    let refusals_logged = |events: &[Value]| {
        (events.iter())
            .filter(|event| event["fields"]["message"] == "call refused")
            .count()
    };
    let left_out = |events: &[Value]| {
        (events.iter())
            .filter_map(|event| event["fields"]["left_out"].as_u64())
            .collect::<Vec<_>>()
    };
    wait_until("what the window left out was never said", || {
        !left_out(&events(&server)).is_empty()
    });
    let logged = events(&server);
    assert_eq!(refusals_logged(&logged), 100);
    let limits: Vec<&Value> = (logged.iter())
        .filter(|event| event["fields"]["limit"].is_u64())
        .collect();
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!(limits[0]["level"], "WARN");
    assert_eq!(limits[0]["fields"]["limit"], 100);
    assert_eq!(left_out(&logged), [50]);

    client.all_services().await.expect_err("refused");
    wait_until("a refusal in the next window was not logged", || {
        refusals_logged(&events(&server)) == 101
    });
}

/// Set in the environment of this test binary run again as a child that sets up toolplane's
/// JSON log and panics.
const PANICKING_CHILD: &str = "TOOLPLANE_TEST_PANICKING_CHILD";

/// A panic on any thread is one ERROR event with its message and where it happened.
#[test]
fn a_panic_is_logged_as_one_json_event() {
    if std::env::var_os(PANICKING_CHILD).is_some() {
        let _log = toolplane::cli::serve::init_tracing(toolplane::config::LogFormat::Json);
        let panicked = std::thread::spawn(|| panic!("a panic on purpose")).join();
        assert!(panicked.is_err());
        return;
    }
    // The harness names a test by its path below the crate (`json_log::...`).
    let module = module_path!()
        .split_once("::")
        .map(|(_, below)| format!("{below}::"));
    let exact_name = format!(
        "{}a_panic_is_logged_as_one_json_event",
        module.unwrap_or_default()
    );
    let child = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", &exact_name, "--nocapture"])
        .env(PANICKING_CHILD, "1")
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the test run again");
    assert!(child.status.success(), "{child:?}");
    let stderr = String::from_utf8(child.stderr).expect("UTF-8");
    let events: Vec<Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|_| panic!("a log line that is not JSON: {line}"))
        })
        .collect();
    assert_eq!(events.len(), 1, "{stderr}");
    assert_eq!(events[0]["level"], "ERROR");
    assert_eq!(events[0]["fields"]["panic.payload"], "a panic on purpose");
    let location = events[0]["fields"]["panic.location"].as_str();
    assert!(
        location.is_some_and(|location| location.starts_with("tests/json_log.rs:")),
        "{location:?}"
    );
}
