//! The MCP conformance suite (`@modelcontextprotocol/conformance`, run with the Node 22 the test
//! script installs for it) against both of toolplane's MCP roles: the endpoint that serves the
//! registered tools to MCP clients (server scenarios, with the suite's test tools offered by a
//! gRPC provider, and by an MCP server toolplane imports), and the importer that registers the
//! tools of MCP servers (client scenarios, with `tests/peers/mcp_conformance_client.sh` serving
//! an import of the suite's server and calling its tool through the toolplane CLI).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::TestServer;
use common::mcp_server::{importing_command, wait_for};
use common::process::peer;
use common::provider::{TestProvider, start_structs_provider};
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::provider::{
    RegisteredTools, ToolDescriptor, ToolError, ToolInvocation, ToolOutput, ToolRegistry, handler,
};

/// The longest one scenario may run before it is killed and the test fails.
const SCENARIO_LIMIT: Duration = Duration::from_secs(120);

/// The suite's Node and its entry point, or `None` (the test skipped) when not installed.
fn suite() -> Option<(PathBuf, PathBuf)> {
    Some((
        peer("mcp-conformance/node_modules/.bin/node")?,
        peer("mcp-conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js")?,
    ))
}

/// Runs one scenario to the end; the test fails unless some check ran and every check passed
/// with no warning.
async fn run_scenario(node: &PathBuf, suite: &PathBuf, args: &[&str], scenario: &str) {
    let mut command = Command::new(node);
    command.arg(suite).args(args).args(["--scenario", scenario]);
    let output =
        tokio::task::spawn_blocking(move || common::peer_run::run_to_end(command, SCENARIO_LIMIT))
            .await
            .expect("the suite ran");
    // The server scenarios report on stdout, the client ones on stderr.
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success()
            && printed.contains(", 0 failed, 0 warnings")
            && !printed.contains("Passed: 0/")
            && !printed.contains("Client exited with code"),
        "scenario {scenario} failed ({}):\n{}\n\nwhat the suite printed:\n{printed}",
        output.status,
        checks_not_passed(&printed),
    );
}

/// The checks that failed or warned, and a client that timed out or exited with an error, as
/// the suite lists them at the end of a run, on a few lines ahead of its whole printout: the
/// printout, with each scenario's description, is long, and the test script repeats only the
/// first lines of a failure at the end of its output (which is what CI shows).
fn checks_not_passed(printed: &str) -> String {
    let listed: Vec<&str> = (printed.lines())
        .filter(|line| {
            line.starts_with("  - ")
                || line.starts_with("    Error: ")
                || line.starts_with("    Warning: ")
                || line.contains("CLIENT TIMED OUT")
                || line.contains("CLIENT EXITED WITH ERROR")
        })
        .collect();
    if listed.is_empty() {
        return "(the suite listed no failed check)".to_owned();
    }
    listed.join("\n")
}

/// The scenarios of the MCP conformance suite that toolplane's endpoint passes: those of a
/// server of tools, and those calling the suite's own test tools that a gRPC provider can offer
/// ([`conformance_tools`]); the others need resources, prompts, logging, progress or requests
/// to the client, which toolplane does not serve.
const SERVER_SCENARIOS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "json-schema-2020-12",
    "dns-rebinding-protection",
    "server-sse-multiple-streams",
    "server-sse-polling",
];

/// The conformance suite's test tools that a gRPC provider can offer, as the suite describes
/// them: `test_simple_text` answers a text, `test_error_handling` always fails, and
/// `json_schema_2020_12_tool`'s schema (Draft 2020-12, with `$defs` and a `$ref`) must reach
/// MCP clients as it was registered. `test_reconnection` answers at once: the suite's server
/// would close the call's stream midway, which a tool cannot make toolplane do, so
/// `server-sse-polling` checks what toolplane's streams start with (a priming event with an id,
/// and a `retry` field).
fn conformance_tools() -> RegisteredTools {
    let no_arguments = json!({"type": "object", "properties": {}});
    let schema_2020_12 = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
            }
        },
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": false
    });
    ToolRegistry::new()
        .register(
            ToolDescriptor::new(
                "test_simple_text",
                "Answers a simple text",
                no_arguments.clone(),
            ),
            handler(|_call: ToolInvocation| async {
                Ok(ToolOutput::new(json!(
                    "This is a simple text response for testing."
                )))
            }),
        )
        .and_then(|tools| {
            tools.register(
                ToolDescriptor::new("test_error_handling", "Always fails", no_arguments.clone()),
                handler(|_call: ToolInvocation| async {
                    Err::<ToolOutput, _>(ToolError::new(
                        "TOOL_FAILED",
                        "This tool intentionally returns an error for testing",
                    ))
                }),
            )
        })
        .and_then(|tools| {
            tools.register(
                ToolDescriptor::new("test_reconnection", "Answers at once", no_arguments),
                handler(|_call: ToolInvocation| async { Ok(ToolOutput::new(json!("answered"))) }),
            )
        })
        .and_then(|tools| {
            tools.register(
                ToolDescriptor::new(
                    "json_schema_2020_12_tool",
                    "Tool with JSON Schema 2020-12 features",
                    schema_2020_12,
                ),
                handler(|call: ToolInvocation| async move { Ok(ToolOutput::new(call.input)) }),
            )
        })
        .expect("the conformance tools are valid")
        .freeze()
}

/// The MCP conformance suite (`@modelcontextprotocol/conformance`) passes the endpoint in each
/// scenario that applies to it, with the Structs provider's tools and the suite's own test
/// tools registered by gRPC providers.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_conformance_suite_passes_the_endpoint() {
    let Some((node, suite)) = suite() else {
        return;
    };
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions::default()).await;
    let _structs = start_structs_provider(&server).await;
    let _conformance = TestProvider::start(
        conformance_tools(),
        &server.endpoint(),
        "conformance",
        Duration::from_secs(5),
    )
    .await;
    common::wait_registered(&server, "conformance").await;
    let url = format!("http://{mcp}/mcp");
    for scenario in SERVER_SCENARIOS {
        run_scenario(&node, &suite, &["server", "--url", &url], scenario).await;
    }
    server.stop().await;
}

/// The server scenarios that the MCP server `tests/peers/conformance_tools_server.js` offers the
/// tools of; run against toolplane's endpoint while toolplane imports that server, they check
/// what crosses toolplane both ways: the listing, text, images, audio, embedded resources, a
/// mix of them, a tool error, progress reports during a call, and a Draft 2020-12 schema.
const IMPORTED_SCENARIOS: &[&str] = &[
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "json-schema-2020-12",
];

/// toolplane as a gateway between MCP servers and MCP clients: the suite's test tools, served
/// by an MCP server of the TypeScript SDK that toolplane imports over stdio, pass the suite's
/// scenarios at toolplane's own endpoint.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_conformance_suite_passes_the_tools_of_an_imported_mcp_server() {
    let (Some((node, suite)), Some(_)) = (suite(), peer("node_modules/@modelcontextprotocol/sdk"))
    else {
        return;
    };
    let node_modules = peer("node_modules").expect("installed with the SDK");
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/conformance_tools_server.js");
    let command = ["node".to_owned(), script.display().to_string()];
    let node_path = node_modules.display().to_string();
    let (server, mcp) = TestServer::start_with_mcp(importing_command(
        "conformance",
        &command,
        &[("NODE_PATH", &node_path)],
    ))
    .await;
    wait_for(&server, "conformance", |found| {
        found.is_some_and(|service| service.available_tools.len() == 8)
    })
    .await
    .expect("the eight tools imported");
    let url = format!("http://{mcp}/mcp");
    for scenario in IMPORTED_SCENARIOS {
        run_scenario(&node, &suite, &["server", "--url", &url], scenario).await;
    }
    server.stop().await;
}

/// The client scenarios that apply to an importer of tools, which initializes, lists and
/// calls tools and takes the answers, authenticating as a service: with OAuth client
/// credentials (the others ask for a user's OAuth authorization, or for answers to the
/// server's own requests, elicitation, which an importer does not give).
const CLIENT_SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "sse-retry",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
];

/// The suite passes toolplane's importer as an MCP client: its `initialize` (protocol version,
/// client info), a tool call with the arguments given (`tools_call`), an answer that comes
/// over a new GET stream after the server closed the call's stream (`sse-retry`: reconnecting
/// after the `retry` the server asked for, with `Last-Event-ID`), and a server that takes only
/// OAuth access tokens, got with client credentials from the authorization server its metadata
/// names: a client secret sent with HTTP Basic (`auth/client-credentials-basic`), or a JWT
/// assertion signed with the client's ES256 key (`auth/client-credentials-jwt`).
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_conformance_suite_passes_the_importer_as_a_client() {
    let Some((node, suite)) = suite() else {
        return;
    };
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_conformance_client.sh");
    let client = format!(
        "bash {} {}",
        script.display(),
        env!("CARGO_BIN_EXE_toolplane")
    );
    assert_eq!(
        client.split(' ').count(),
        3,
        "the suite splits the command at spaces, so its paths may hold none: {client}"
    );
    for scenario in CLIENT_SCENARIOS {
        run_scenario(&node, &suite, &["client", "--command", &client], scenario).await;
    }
}
