//! Approving imported tools (`approved_tools` in `[[mcp_imports]]`, seed 003's approval flow),
//! against a real MCP server built with the official MCP Python SDK: only the tools approved
//! at the definition listed are registered, a tool the server adds or changes is held back
//! and counted, and `toolplane config review-imports` prints the hashes that `serve` then
//! takes.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::mcp_server::{PythonMcpServer, importing, invoke, stdio_entry, wait_for, wait_for_at};
use common::process::{ServerProcess, replace_file, toolplane_cli, wait_until};
use common::{TestServer, meta, scraped};
use serde_json::{Value, json};
use tonic::Code;
use toolplane::mcp::approval::ApprovedTools;
use toolplane::mcp::import::McpSource;
use toolplane::pb;
use toolplane::registry::ServiceName;

const SERVICE: &str = "python-tools";
const STALE: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn tool_names(service: Option<&pb::DiscoveryInfo>) -> Vec<String> {
    service
        .map(|service| {
            (service.available_tools.iter())
                .map(|tool| tool.tool_name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Each tool's definition_sha256 as an import without approval registers it.
async fn hashes_imported_plainly(mcp: &PythonMcpServer) -> BTreeMap<String, String> {
    let plain = TestServer::start_with(importing(
        SERVICE,
        McpSource::Http(mcp.url()),
        Duration::from_secs(600),
        None,
    ))
    .await;
    let service = wait_for(&plain, SERVICE, |found| found.is_some())
        .await
        .expect("imported");
    plain.stop().await;
    (service.available_tools.iter())
        .map(|tool| (tool.tool_name.clone(), tool.definition_sha256.clone()))
        .collect()
}

async fn wait_for_held(metrics: std::net::SocketAddr, expected: f64) {
    let (http, url) = (common::http_client(), format!("http://{metrics}/metrics"));
    let sample = "toolplane_mcp_import_held_tools";
    let give_up = Instant::now() + Duration::from_secs(30);
    while scraped(&http, &url, sample).await != expected {
        assert!(Instant::now() < give_up, "held tools never {expected}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Only tools approved at the definition listed are registered and callable; one approved at
/// another definition, one never approved, and one the server adds later are held back.
#[tokio::test(flavor = "multi_thread")]
async fn only_approved_tools_are_imported_and_new_or_changed_ones_are_held_back() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let hashes = hashes_imported_plainly(&mcp).await;
    assert_eq!(hashes.len(), 8, "{hashes:?}");
    let table = BTreeMap::from([
        ("add".to_owned(), hashes["add"].clone()),
        ("grow".to_owned(), hashes["grow"].clone()),
        ("distance".to_owned(), STALE.to_owned()),
    ]);
    let mut options = importing(
        SERVICE,
        McpSource::Http(mcp.url()),
        Duration::from_secs(600),
        None,
    );
    options.mcp_imports[0].approved_tools = Some(
        ApprovedTools::check(&ServiceName::parse(SERVICE).expect("valid"), &table).expect("valid"),
    );
    let (server, metrics) = TestServer::start_with_metrics(options).await;
    let service = wait_for(&server, SERVICE, |found| found.is_some()).await;
    assert_eq!(tool_names(service.as_ref()), ["add", "grow"]);
    wait_for_held(metrics, 6.0).await;

    let changed = invoke(&server, "distance", json!({}))
        .await
        .expect_err("held back");
    assert_eq!(changed.code(), Code::NotFound, "{changed:?}");
    invoke(&server, "grow", json!({"name": "late_tool"}))
        .await
        .expect("grown");
    // Listed again (the server said its list changed): one more tool held, none added.
    wait_for_held(metrics, 7.0).await;
    let mut discovery = server.discovery().await;
    let service = discovery
        .get_service(pb::GetServiceRequest {
            meta: meta(0),
            service_name: SERVICE.into(),
        })
        .await
        .expect("found")
        .into_inner()
        .service;
    assert_eq!(tool_names(service.as_ref()), ["add", "grow"]);
    let late = invoke(&server, "late_tool", json!({}))
        .await
        .expect_err("held back");
    assert_eq!(late.code(), Code::NotFound, "{late:?}");
    server.stop().await;
}

fn config(url: &str, approved: &str) -> String {
    format!(
        "tls_reload_interval = \"200ms\"\n[[mcp_imports]]\nservice = \"{SERVICE}\"\n\
         url = \"{url}\"\napproved_tools = {{ {approved} }}\n"
    )
}

/// `toolplane config review-imports` lists each tool with its hash and standing, and prints
/// the line approving them; `serve` given a hash from it imports that tool and logs the ones
/// it holds back with theirs; approving one more in the file imports it without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn review_imports_prints_the_hashes_that_serve_takes() {
    let Some(mcp) = PythonMcpServer::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("toolplane.toml");
    std::fs::write(&file, config(&mcp.url(), &format!("add = \"{STALE}\""))).expect("written");
    let file = file.to_str().expect("UTF-8");

    let (code, json_text, stderr) =
        toolplane_cli(&["config", "review-imports", "--config", file, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let reviewed: Vec<Value> = serde_json::from_str(&json_text).expect("JSON");
    let standing: BTreeMap<&str, &str> = (reviewed.iter())
        .map(|tool| {
            (
                tool["tool_name"].as_str().expect("a name"),
                tool["approval"].as_str().expect("a standing"),
            )
        })
        .collect();
    assert_eq!(standing.len(), 8, "{json_text}");
    assert_eq!(standing["add"], "changed");
    assert_eq!(standing["shout"], "not_approved");
    let add = reviewed
        .iter()
        .find(|tool| tool["tool_name"] == "add")
        .expect("listed");
    let add_sha = add["definition_sha256"]
        .as_str()
        .expect("a hash")
        .to_owned();
    assert_eq!(add["tool_schema"]["required"], json!(["a", "b"]), "{add}");
    assert_eq!(add["annotations"], json!({"readOnlyHint": true}), "{add}");

    let (code, table, stderr) = toolplane_cli(&["config", "review-imports", "--config", file]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.contains(&format!("add = \"{add_sha}\""))
            && table.contains("approved_tools = {")
            && table.contains("not read-only, idempotent"),
        "{table}"
    );

    let (server, served_dir) = ServerProcess::start_with_config(
        &config(&mcp.url(), &format!("add = \"{add_sha}\"")),
        &[],
        &[],
    );
    let mut discovery =
        pb::discovery_service_client::DiscoveryServiceClient::connect(server.endpoint())
            .await
            .expect("connects");
    let service = wait_for_at(&mut discovery, SERVICE, |found| found.is_some()).await;
    assert_eq!(tool_names(service.as_ref()), ["add"]);
    // The lines were written before the registration; the test reads them on a thread.
    wait_until("seven tools logged as held back", || {
        server.log_lines_with("held back until approved").len() == 7
    });
    let held = server.log_lines_with("held back until approved");
    assert!(
        held.iter()
            .any(|line| line.contains("tool=shout") && line.contains("not_approved")),
        "{held:?}"
    );

    let shout_sha = reviewed
        .iter()
        .find(|tool| tool["tool_name"] == "shout")
        .and_then(|tool| tool["definition_sha256"].as_str())
        .expect("listed");
    replace_file(
        &served_dir.path().join("toolplane.toml"),
        &config(
            &mcp.url(),
            &format!("add = \"{add_sha}\", shout = \"{shout_sha}\""),
        ),
    );
    let service = wait_for_at(&mut discovery, SERVICE, |found| {
        tool_names(found).len() == 2
    })
    .await;
    assert_eq!(tool_names(service.as_ref()), ["add", "shout"]);
    assert!(
        server.log_lines_with("next restart").is_empty(),
        "approvals need no restart: {:?}",
        server.log_lines_with("next restart")
    );

    let (code, _, stderr) = toolplane_cli(&[
        "config",
        "review-imports",
        "--config",
        file,
        "--service",
        "nobody",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no [[mcp_imports]] entry imports service nobody"),
        "{stderr}"
    );
}

/// `config check` says how many tools an import approves; a malformed `approved_tools`
/// keeps the server from starting, naming the entry.
#[test]
fn a_malformed_approval_table_is_refused_at_the_start() {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("toolplane.toml");
    let approved = format!("add = \"{STALE}\", shout = \"{STALE}\"");
    std::fs::write(&file, config("http://127.0.0.1:9/mcp", &approved)).expect("written");
    let (code, summary, stderr) =
        toolplane_cli(&["config", "check", "--config", file.to_str().expect("UTF-8")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        summary.contains("python-tools (http://127.0.0.1:9/mcp; 2 tools approved)"),
        "{summary}"
    );
    std::fs::write(&file, config("http://127.0.0.1:9/mcp", "add = \"abc\"")).expect("written");
    let (code, _, stderr) =
        toolplane_cli(&["config", "check", "--config", file.to_str().expect("UTF-8")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("approved_tools of service python-tools")
            && stderr.contains("64 lowercase hex"),
        "{stderr}"
    );
}

/// `review-imports` reviews a server it starts itself (`command`), and closes it as MCP asks
/// before it exits, standard input first, rather than leaving it to be killed.
#[test]
fn review_imports_closes_a_server_it_started() {
    let dir = tempfile::tempdir().expect("a directory");
    let marker = dir.path().join("ended");
    let Some(command) = PythonMcpServer::stdio_command_noting_its_end(&marker) else {
        return;
    };
    let file = dir.path().join("toolplane.toml");
    std::fs::write(&file, stdio_entry(SERVICE, &command)).expect("written");
    let file = file.to_str().expect("UTF-8");
    let (code, table, stderr) = toolplane_cli(&["config", "review-imports", "--config", file]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.contains("add") && table.contains("not_required"),
        "{table}"
    );
    wait_until("the server ended by itself", || marker.exists());
}

/// `review-imports` lists its servers at once, not one after another: here each of two
/// started servers waits, before it starts, for the other to have been started (as servers
/// fetched by `npx` are waited for together), which one after another never happens (the
/// first gives up after its 60 s to start).
#[test]
fn review_imports_lists_its_servers_at_once() {
    let dir = tempfile::tempdir().expect("a directory");
    let waiting_for = |own: &str, other: &str| {
        let (own, other) = (dir.path().join(own), dir.path().join(other));
        PythonMcpServer::stdio_command_launched_by(&format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.1; done; exec \"$@\"",
            own.display(),
            other.display()
        ))
    };
    let (Some(first), Some(second)) = (
        waiting_for("first", "second"),
        waiting_for("second", "first"),
    ) else {
        return;
    };
    let file = dir.path().join("toolplane.toml");
    let entries = [
        stdio_entry("first-tools", &first),
        stdio_entry("second-tools", &second),
    ];
    std::fs::write(&file, entries.join("\n")).expect("written");
    let file = file.to_str().expect("UTF-8");
    let (code, table, stderr) = toolplane_cli(&["config", "review-imports", "--config", file]);
    assert_eq!(code, 0, "{stderr}");
    let services: Vec<&str> = (table.lines())
        .filter_map(|line| line.strip_prefix("# service "))
        .collect();
    assert_eq!(services.len(), 2, "{table}");
    assert!(services[0].starts_with("first-tools:"), "{table}");
    assert!(services[1].starts_with("second-tools:"), "{table}");
}
