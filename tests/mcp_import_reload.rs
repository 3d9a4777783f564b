//! `[[mcp_imports]]` entries added, changed and removed in the configuration file of a running
//! `toolplane serve` are put in force without a restart, against real MCP servers built with
//! the official MCP Python SDK (one at a URL, one started over stdio): an entry added is
//! imported, an entry moved to another server follows it, an entry removed is deregistered
//! (watchers see `REMOVED`) and the server toolplane started for it is stopped, and a file that
//! does not check is refused with the imports running kept. A server toolplane started is
//! closed gracefully when removed and at a clean stop, which also ends sessions at URLs (the
//! Python SDK's server's and the TypeScript SDK's reference server's).

use crate::common;

use std::time::Duration;

use common::mcp_server::{NodeEverythingServer, PythonMcpServer, output, stdio_entry, wait_for_at};
use common::meta;
use common::process::{ServerProcess, replace_file, running, wait_until};
use serde_json::json;
use tonic::transport::Channel;
use toolplane::json::json_to_struct;
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

const HEADER: &str = "tls_reload_interval = \"200ms\"\n";

fn http_entry(service: &str, url: &str) -> String {
    format!("[[mcp_imports]]\nservice = \"{service}\"\nurl = \"{url}\"\n")
}

/// The pids of the processes `pid` started that still run.
fn children_of(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    let mut children = Vec::new();
    for task in tasks.map_while(Result::ok) {
        let listed = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(listed.split_whitespace().map(str::to_owned));
    }
    children
}

/// `toolplane serve` with the configuration `config` (its directory returned, and a client of
/// its discovery), once it has imported `services`.
async fn serving_imported(
    config: &str,
    services: &[&str],
) -> (
    ServerProcess,
    tempfile::TempDir,
    DiscoveryServiceClient<Channel>,
) {
    let (server, dir) = ServerProcess::start_with_config(config, &[], &[]);
    let mut discovery = DiscoveryServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    for service in services {
        wait_for_at(&mut discovery, service, |found| found.is_some()).await;
    }
    (server, dir, discovery)
}

/// `add` of `service` called through toolplane.
async fn add(
    invoker: &mut ToolInvokeServiceClient<Channel>,
    service: &str,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    invoker
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(0),
            service_name: service.into(),
            tool_name: "add".into(),
            input: json_to_struct(&json!({"a": 2, "b": 3})),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

/// `tool` of tenant 0 called with `input` through the toolplane at `endpoint`.
async fn call_at(
    endpoint: String,
    tool: &'static str,
    input: serde_json::Value,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    let mut invoker = ToolInvokeServiceClient::connect(endpoint)
        .await
        .expect("connects");
    invoker
        .invoke_tool(common::invoke_fixture::request(tool, input))
        .await
        .map(tonic::Response::into_inner)
}

/// The next event of `events` (see [`common::next_event`]), as its type and service. Each is
/// awaited after the change it reports has been seen through GetService, so it has arrived.
async fn next_event(
    events: &mut tonic::Streaming<pb::WatchServicesResponse>,
) -> (pb::ServiceEventType, String) {
    let event = common::next_event(events).await;
    (event.r#type(), event.service_name)
}

/// Imports added to the file are imported, one moved to another server follows it, one removed
/// is deregistered and its stdio server stopped; a broken file changes nothing; none of it is
/// logged as waiting for a restart.
#[tokio::test(flavor = "multi_thread")]
async fn imports_follow_the_configuration_file_without_a_restart() {
    let Some(command) = PythonMcpServer::stdio_command() else {
        return;
    };
    let Some(first) = PythonMcpServer::start(0) else {
        return;
    };
    let second = PythonMcpServer::start(0).expect("a second server");

    let (server, dir) = ServerProcess::start_with_config(HEADER, &[], &[]);
    let file = dir.path().join("toolplane.toml");
    let mut discovery = DiscoveryServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    let mut invoker = ToolInvokeServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    let mut events = common::watch(&mut discovery, 0, "").await;
    assert_eq!(
        next_event(&mut events).await.0,
        pb::ServiceEventType::Synced
    );

    // Two imports added while the server runs.
    let both = format!(
        "{HEADER}{}{}",
        http_entry("alpha", &first.url()),
        stdio_entry("beta", &command)
    );
    replace_file(&file, &both);
    let alpha = wait_for_at(&mut discovery, "alpha", |found| found.is_some()).await;
    assert_eq!(
        alpha.expect("imported").endpoint,
        format!("mcp+{}", first.url())
    );
    let beta = wait_for_at(&mut discovery, "beta", |found| found.is_some()).await;
    assert_eq!(beta.expect("imported").endpoint, "mcp+stdio://0/beta");
    let mut added = vec![next_event(&mut events).await, next_event(&mut events).await];
    added.sort_by(|one, other| one.1.cmp(&other.1));
    assert_eq!(
        added,
        [
            (pb::ServiceEventType::Added, "alpha".to_owned()),
            (pb::ServiceEventType::Added, "beta".to_owned())
        ]
    );
    add(&mut invoker, "beta").await.expect("called over stdio");
    let pid = server.child.id();
    assert_eq!(children_of(pid).len(), 1, "the stdio server runs");

    // beta's environment changed: its server is started again with it.
    let with_env = format!(
        "{HEADER}{}{}env = {{ TOOLPLANE_TEST_SET = \"second\" }}\n",
        http_entry("alpha", &first.url()),
        stdio_entry("beta", &command)
    );
    replace_file(&file, &with_env);
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = invoker
            .invoke_tool(pb::InvokeToolRequest {
                meta: meta(0),
                service_name: "beta".into(),
                tool_name: "getenv".into(),
                input: json_to_struct(&json!({"name": "TOOLPLANE_TEST_SET"})),
                ..Default::default()
            })
            .await
            .map(tonic::Response::into_inner);
        if answer.is_ok_and(|answer| output(&answer) == json!({"result": "second"})) {
            break;
        }
        assert!(std::time::Instant::now() < give_up, "never restarted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_until("one stdio server runs", || children_of(pid).len() == 1);

    // alpha moved to the second server, beta removed.
    let moved = format!("{HEADER}{}", http_entry("alpha", &second.url()));
    replace_file(&file, &moved);
    wait_for_at(&mut discovery, "beta", |found| found.is_none()).await;
    let alpha = wait_for_at(&mut discovery, "alpha", |found| {
        found.is_some_and(|service| service.endpoint == format!("mcp+{}", second.url()))
    })
    .await;
    assert_eq!(alpha.expect("moved").available_tools.len(), 8);
    wait_until("the stdio server stopped", || children_of(pid).is_empty());
    let mut changes = Vec::new();
    while !changes.contains(&(pb::ServiceEventType::Removed, "beta".to_owned())) {
        changes.push(next_event(&mut events).await);
    }
    assert!(
        !changes
            .iter()
            .any(|(kind, _)| *kind == pb::ServiceEventType::Expired),
        "{changes:?}"
    );
    let gone = add(&mut invoker, "beta").await.expect_err("deregistered");
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
    // Calls go to the second server: the first is stopped.
    drop(first);
    let answer = add(&mut invoker, "alpha").await.expect("called");
    assert_eq!(output(&answer), json!({"result": 5}));

    // An entry that does not check: refused, and alpha kept as it is.
    let broken = format!(
        "{HEADER}{}command = [\"true\"]\n",
        http_entry("alpha", &second.url())
    );
    replace_file(&file, &broken);
    wait_until("the file refused", || {
        !server.log_lines_with("cannot be used").is_empty()
    });
    add(&mut invoker, "alpha").await.expect("still imported");

    // Every import removed.
    replace_file(&file, HEADER);
    wait_for_at(&mut discovery, "alpha", |found| found.is_none()).await;
    assert!(
        server.log_lines_with("next restart").is_empty(),
        "imports need no restart: {:?}",
        server.log_lines_with("next restart")
    );
}

/// The server toolplane started for a stdio import is stopped as soon as the entry is
/// removed, with no other MCP session opened or used after it (the sessions' cache once kept
/// a removed session, and its server running, until it was used again).
#[tokio::test(flavor = "multi_thread")]
async fn a_removed_stdio_imports_server_stops_at_once() {
    let Some(command) = PythonMcpServer::stdio_command() else {
        return;
    };
    let config = format!("{HEADER}{}", stdio_entry("beta", &command));
    let (server, dir, mut discovery) = serving_imported(&config, &["beta"]).await;
    let pid = server.child.id();
    assert_eq!(children_of(pid).len(), 1, "the stdio server runs");

    replace_file(&dir.path().join("toolplane.toml"), HEADER);
    wait_for_at(&mut discovery, "beta", |found| found.is_none()).await;
    wait_until("the stdio server stopped", || children_of(pid).is_empty());
}

/// A stdio import removed while the server toolplane started for it is still starting (here
/// for 12 s) stops that start at once: it no longer went on to leave a server running that no
/// import uses (until toolplane exited).
#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_import_removed_while_its_server_starts_stops_it() {
    let Some(command) = PythonMcpServer::slow_stdio_command() else {
        return;
    };
    let config = format!("{HEADER}{}", stdio_entry("slow", &command));
    let (server, dir) = ServerProcess::start_with_config(&config, &[], &[]);
    let pid = server.child.id();
    wait_until("the stdio server started", || children_of(pid).len() == 1);

    replace_file(&dir.path().join("toolplane.toml"), HEADER);
    // Within 20 s, while the start (12 s, then the server's own) would still be under way or
    // just done: with the start going on, its server was running then and kept running.
    wait_until("the stdio server stopped", || children_of(pid).is_empty());
    let log = server.log_lines_with("closed while it was opening");
    assert!(!log.is_empty(), "the log says why the start ended");
}

/// A server toolplane started is closed as MCP asks, its standard input closed and given time
/// to end by itself, when its import is removed and at a clean stop (SIGTERM). At a stop it
/// was killed.
#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_server_is_closed_gracefully_when_removed_and_at_a_stop() {
    let dir = tempfile::tempdir().expect("a directory");
    let (removed, stopped) = (dir.path().join("removed"), dir.path().join("stopped"));
    let (Some(removed_command), Some(stopped_command)) = (
        PythonMcpServer::stdio_command_noting_its_end(&removed),
        PythonMcpServer::stdio_command_noting_its_end(&stopped),
    ) else {
        return;
    };
    let kept = stdio_entry("kept", &stopped_command);
    let config = format!("{HEADER}{kept}{}", stdio_entry("gone", &removed_command));
    let (server, config_dir, _) = serving_imported(&config, &["gone", "kept"]).await;

    replace_file(
        &config_dir.path().join("toolplane.toml"),
        &format!("{HEADER}{kept}"),
    );
    wait_until("the removed import's server ended by itself", || {
        removed.exists()
    });
    assert!(!stopped.exists());
    assert!(server.terminate().success());
    wait_until("the server ended by itself at the stop", || {
        stopped.exists()
    });
}

/// The ID of the one session the Python MCP server has opened.
fn only_session(mcp: &PythonMcpServer) -> String {
    only_id(&mcp.log_lines_with("Created new transport with session ID: "))
}

/// The ID ending the one line of a server's log noting a session opened.
fn only_id(opened: &[String]) -> String {
    let [opened] = opened else {
        panic!("one session: {opened:?}");
    };
    opened.rsplit(' ').next().expect("an ID").to_owned()
}

/// At a clean stop (SIGTERM), toolplane ends its session with a server at a URL as MCP asks of
/// a client (with a `DELETE` of it), so the server need not keep it until it times out, and
/// waits for the answer (up to 7 s) before it exits: the server here answers 2 s late, and
/// toolplane exits after it began to answer. This guards `McpCaller::close_all`: left to the
/// session's drop, the `DELETE` raced the process's end, and the process ended first.
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_stop_ends_the_session_at_a_url_and_waits_for_its_end() {
    let Some(mcp) = PythonMcpServer::start_with(0, &["--slow-delete", "2"]) else {
        return;
    };
    let config = format!("{HEADER}{}", http_entry("alpha", &mcp.url()));
    let (server, _dir, _) = serving_imported(&config, &["alpha"]).await;
    let id = only_session(&mcp);
    assert!(server.terminate().success());
    let exited = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs_f64();
    let answering = "python-tools: answering a DELETE at ";
    wait_until("the session was never ended", || {
        !mcp.log_lines_with(answering).is_empty()
    });
    let line = &mcp.log_lines_with(answering)[0];
    let answered: f64 = (line.rsplit(' ').next())
        .and_then(|time| time.parse().ok())
        .expect("a time");
    assert!(
        answered <= exited,
        "toolplane exited {:.3} s before the server answered its DELETE",
        answered - exited
    );
    // The server's log is read on a thread of the test's: its line may come a moment later.
    let ended = format!("Terminating session: {id}");
    wait_until("the session was ended", || {
        !mcp.log_lines_with(&ended).is_empty()
    });
}

/// The TypeScript SDK's reference server (`@modelcontextprotocol/server-everything`) at a URL
/// is imported and called, and at a clean stop its session is ended with a `DELETE` too.
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_stop_ends_the_session_at_a_typescript_server() {
    let Some(everything) = NodeEverythingServer::start() else {
        return;
    };
    let config = format!("{HEADER}{}", http_entry("everything", &everything.url()));
    let (server, _dir, _) = serving_imported(&config, &["everything"]).await;
    let sum = call_at(server.endpoint(), "get-sum", json!({"a": 2, "b": 3}))
        .await
        .expect("summed");
    assert_eq!(output(&sum), json!("The sum of 2 and 3 is 5."));
    let id = only_id(&everything.log_lines_with("Session initialized with ID: "));
    assert!(server.terminate().success());
    let ended = format!("Received session termination request for session {id}");
    wait_until("the session was ended", || {
        !everything.log_lines_with(&ended).is_empty()
    });
}

/// A session a call still uses when the drain's grace is over is ended as the others are
/// (here with a `DELETE`), waited for up to their bound, before the process exits. (It was
/// cancelled and not waited for: the process often ended before the session's end was sent,
/// in 4 of 9 runs of this test.)
#[tokio::test(flavor = "multi_thread")]
async fn a_session_still_in_use_after_the_grace_is_ended_too() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let config = format!(
        "{HEADER}drain_grace = \"1s\"\n{}",
        http_entry("alpha", &mcp.url())
    );
    let (server, dir, _) = serving_imported(&config, &["alpha"]).await;
    let id = only_session(&mcp);
    let marker = dir.path().join("cancelled");
    let input = json!({"seconds": 60, "marker": marker.to_str().expect("UTF-8")});
    let waiting = tokio::spawn(call_at(server.endpoint(), "wait", input));
    let started = dir.path().join("cancelled.started");
    wait_until("the call reached the server", || started.exists());
    assert!(server.terminate().success());
    waiting.abort();
    let ended = format!("Terminating session: {id}");
    wait_until("the session was ended", || {
        !mcp.log_lines_with(&ended).is_empty()
    });
}

/// A server toolplane started through a launcher (here a shell) that does not end when its
/// standard input closes (here a process the launcher started and waits for) is stopped whole
/// when its import is removed: SIGTERM reaches its process group. (It reached the launcher
/// alone, and the rest ran on.)
#[tokio::test(flavor = "multi_thread")]
async fn a_removed_stdio_servers_whole_process_group_is_stopped() {
    let launch = "\"$@\"; wait";
    let Some((_server, config_dir, pid)) = serving_with_a_sleeper("lingering", launch).await else {
        return;
    };
    replace_file(&config_dir.path().join("toolplane.toml"), HEADER);
    wait_until("the launcher's process stopped", || !running(&pid));
}

/// `toolplane serve` importing `service`, a server started by a shell that starts `sleep 300`
/// in the background, then runs `launch` (which starts the server as `"$@"`), and the pid of
/// that `sleep`, running; `None` when the Python peers are not installed.
async fn serving_with_a_sleeper(
    service: &str,
    launch: &str,
) -> Option<(ServerProcess, tempfile::TempDir, String)> {
    let dir = tempfile::tempdir().expect("a directory");
    let pid_file = dir.path().join("pid");
    let script = format!("sleep 300 & echo $! > {}; {launch}", pid_file.display());
    let command = PythonMcpServer::stdio_command_launched_by(&script)?;
    let config = format!("{HEADER}{}", stdio_entry(service, &command));
    let (server, config_dir, _) = serving_imported(&config, &[service]).await;
    let pid = std::fs::read_to_string(&pid_file).expect("the pid");
    let pid = pid.trim().to_owned();
    assert!(running(&pid));
    Some((server, config_dir, pid))
}

/// A server toolplane started that ends by itself when its standard input closes (as the
/// Python SDK's does), leaving a process it started running, has that process ended too at a
/// clean stop: SIGTERM reaches what is left of its process group. (It ran on, with nothing to
/// stop it.)
#[tokio::test(flavor = "multi_thread")]
async fn what_a_stdio_server_leaves_running_is_ended_with_it() {
    let launch = "exec \"$@\"";
    let Some((server, _config_dir, pid)) = serving_with_a_sleeper("leaving", launch).await else {
        return;
    };
    assert!(server.terminate().success());
    wait_until("the process the server left was not ended", || {
        !running(&pid)
    });
}
