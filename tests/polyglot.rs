//! toolplane used from the gRPC implementations of other languages, as the teams calling it
//! would: Python's grpcio with stubs grpcio-tools generates from proto/, and Node's grpc-js
//! with proto/ loaded at run time by proto-loader. Each runs a script of checks
//! (`tests/peers/`) against a real server with the example Structs provider registered:
//! registration, paging, pre-flight, invocation, google.rpc error details, deadlines, server
//! streams and, from Python, grpc.health.v1 Check and Watch and an agent's streamed turn.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::TestServer;
use common::process::{Runtime, peer_script, proto_dir};
use common::provider::start_structs_provider;

/// The longest a peer's script may run before it is killed and the test fails.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

/// Runs a peer's script to the end (killed past [`SCRIPT_LIMIT`]) and fails the test, with
/// everything it printed, unless it exits 0 and its last line says how many checks passed.
fn run_checks(command: Command, peer_name: &str) {
    let output = common::peer_run::run_to_end(command, SCRIPT_LIMIT);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    eprintln!("{stdout}");
    assert!(
        output.status.success(),
        "the {peer_name} client failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(peer_name) && last.ends_with("checks passed"),
        "the {peer_name} client did not finish its checks:\n{stdout}\n{stderr}"
    );
}

/// Starts a server and the Structs provider, then runs `command` (given the server's address
/// and the proto directory as its last two arguments) against them.
async fn run_against_a_server(mut command: Command, peer_name: &'static str) {
    let server = TestServer::start().await;
    let _provider = start_structs_provider(&server).await;
    command.arg(server.addr.to_string()).arg(proto_dir());
    tokio::task::spawn_blocking(move || run_checks(command, peer_name))
        .await
        .expect("the checks ran");
    server.stop().await;
}

/// Python's grpcio with generated stubs: every RPC family works and the rich error details
/// (ErrorInfo, BadRequest) decode with grpcio-status, a request over 4 MiB is
/// RESOURCE_EXHAUSTED with its size, a method not served is UNIMPLEMENTED naming it;
/// grpc.health.v1 Watch keeps an unknown
/// name's stream open and follows it through registration and deregistration; an agent's
/// StreamComplete turn streams its states, its tool call (recorded under the turn's
/// correlation id) and deltas that add up to the answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_python_grpcio_client_registers_discovers_invokes_and_reads_error_details() {
    let Some(command) = peer_script(Runtime::Python, "python_client.py") else {
        return;
    };
    run_against_a_server(command, "python grpcio").await;
}

/// Node's grpc-js with proto-loader: Struct schemas and inputs round-trip, error details decode,
/// the caller's deadline bounds the provider's work (and the record says so), and a
/// WatchServices stream delivers a registration as it happens.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_grpc_js_client_registers_discovers_invokes_and_reads_error_details() {
    let Some(command) = peer_script(Runtime::Node, "node_client.js") else {
        return;
    };
    run_against_a_server(command, "node grpc-js").await;
}
