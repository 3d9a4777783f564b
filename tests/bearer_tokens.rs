//! Bearer tokens under `[[tenant_access]]`: sent by toolplane's own clients (the `toolplane`
//! CLI's `--token` and `TOOLPLANE_TOKEN`, the example provider's `--control-plane-token`, the
//! Rust client's `ToolplaneClient::with_bearer_token`), and read by the server from a token
//! file again when it changes.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::process::{
    ChildGuard, ServerProcess, invoke_structs_damage, toolplane_cli,
    wait_for_structs_provider_with, wait_until,
};
use common::*;
use tonic::Code;
use toolplane::access::{TenantAccess, TenantAccessRule};
use toolplane::client::{BearerToken, ClientError, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::grpc::ServerOptions;
use toolplane::pb;

/// The token granting tenant 1.
const TOKEN: &str = "planner-token-7d2e";

/// A `toolplane serve` process with the config file `config` (`{dir}` in it is the directory
/// holding it) and `files` (name, content) beside it; `PLANNER_TOKEN` is set to [`TOKEN`] in
/// its environment.
fn serve_with_config(config: &str, files: &[(&str, &str)]) -> (ServerProcess, tempfile::TempDir) {
    ServerProcess::start_with_config(config, files, &[("PLANNER_TOKEN", TOKEN)])
}

/// A `toolplane serve` process whose config grants tenant 1 to callers sending [`TOKEN`].
fn token_guarded_process() -> (ServerProcess, tempfile::TempDir) {
    serve_with_config(
        "[[tenant_access]]\ntoken_env = \"PLANNER_TOKEN\"\ntenants = [1]\n",
        &[],
    )
}

/// `toolplane tools` for tenant 1 of `endpoint` sending `token`: (exit code, stdout, stderr).
fn tools_with_token(endpoint: &str, token: &str) -> (i32, String, String) {
    toolplane_cli(&[
        "tools",
        "--endpoint",
        endpoint,
        "--tenant",
        "1",
        "--token",
        token,
    ])
}

/// Asserts that `toolplane services` with `args` (endpoint, tenant, token) lists the example
/// provider: its lease was renewed.
fn assert_provider_still_listed(args: &[&str]) {
    let mut services = vec!["services"];
    services.extend_from_slice(args);
    let (code, stdout, stderr) = toolplane_cli(&services);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("structs"),
        "the provider's lease lapsed: {stdout}"
    );
}

/// The example provider registers in tenant 1 with its token; the CLI, given the token as a
/// flag or in `TOOLPLANE_TOKEN`, lists and invokes its tools there, and is refused tenant 2
/// (PERMISSION_DENIED naming the token's variable), refused tenant 1 without the token, and
/// refused UNAUTHENTICATED with a token no entry holds. A token a header cannot carry is an
/// error before anything is sent, and is not printed.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_and_the_example_provider_send_their_tokens() {
    let (server, _dir) = token_guarded_process();
    let endpoint = server.endpoint();
    let _provider = ChildGuard::structs_provider_with(
        &endpoint,
        &["--tenant", "1", "--control-plane-token", TOKEN],
    );
    let with_token = ["--endpoint", &endpoint, "--tenant", "1", "--token", TOKEN];
    wait_for_structs_provider_with(&with_token);
    invoke_structs_damage(&with_token);

    let from_variable = |tenant: &str, token: &str| {
        Command::new(env!("CARGO_BIN_EXE_toolplane"))
            .args([
                "tools",
                "--json",
                "--endpoint",
                &endpoint,
                "--tenant",
                tenant,
            ])
            .env("TOOLPLANE_TOKEN", token)
            .output()
            .expect("run toolplane tools")
    };
    let listed = from_variable("1", TOKEN);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    assert!(stdout.contains("structs_calculate_damage"), "{stdout}");

    let refused = from_variable("2", TOKEN);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("PermissionDenied"), "{stderr}");
    assert!(
        stderr.contains("the bearer token of PLANNER_TOKEN"),
        "{stderr}"
    );
    assert!(stderr.contains("[RESOURCE_ACCESS_DENIED]"), "{stderr}");

    let (code, _, stderr) = toolplane_cli(&["tools", "--endpoint", &endpoint, "--tenant", "1"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("PermissionDenied") && stderr.contains("no certificate identity"),
        "{stderr}"
    );

    let unknown = from_variable("1", "guessed");
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Unauthenticated"), "{stderr}");

    let unsendable = from_variable("1", "two words");
    let stderr = String::from_utf8_lossy(&unsendable.stderr);
    assert_eq!(unsendable.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bearer token holds a character"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("words"),
        "the token is not printed: {stderr}"
    );
}

/// The Rust client sends its token on every call it makes and on the generated clients it
/// hands out; without one it is refused, and the server's refusal comes back typed.
#[tokio::test(flavor = "multi_thread")]
async fn the_rust_client_sends_its_token_on_every_call() {
    let rules = [TenantAccessRule {
        token_env: "PLANNER_TOKEN".to_owned(),
        tenants: vec![1],
        ..TenantAccessRule::default()
    }];
    let access =
        TenantAccess::from_rules_with(&rules, |_| Some(TOKEN.to_owned())).expect("valid rules");
    let server = TestServer::start_with(ServerOptions {
        tenant_access: access,
        ..test_options()
    })
    .await;
    let without = ToolplaneClient::connect(&server.endpoint(), TenantId(1))
        .await
        .expect("connected");
    let client = without
        .clone()
        .with_bearer_token(BearerToken::new(TOKEN).expect("a valid token"));

    client
        .discovery()
        .register_service(pb::RegisterServiceRequest {
            meta: client.meta(),
            registration: Some(story_generator()),
        })
        .await
        .expect("granted on the generated Discovery client");
    let services = client.all_services().await.expect("granted");
    assert_eq!(services.len(), 1);
    assert_eq!(client.all_tools(None).await.expect("granted").len(), 2);
    client.health("story-generator").await.expect("granted");
    client
        .records(&Default::default(), 0)
        .await
        .expect("granted");
    client
        .agents()
        .list_agents(pb::ListAgentsRequest {
            meta: client.meta(),
            ..Default::default()
        })
        .await
        .expect("granted on the generated Agent client");

    match without.all_services().await {
        Err(ClientError::Rpc(status)) => {
            assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
            assert_eq!(reason(&status), "RESOURCE_ACCESS_DENIED");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    server.stop().await;
}

/// A `token_file` entry's tokens are read again when the file changes: after a rotation the
/// new token is granted and the old one refused UNAUTHENTICATED, without a restart; a file
/// rewritten empty is logged and the tokens held before stay.
#[test]
fn a_rotated_token_file_needs_no_restart() {
    let (server, dir) = serve_with_config(
        "tls_reload_interval = \"100ms\"\n\
         [[tenant_access]]\ntoken_file = \"{dir}/tokens\"\ntenants = [1]\n",
        &[("tokens", "first-token\n")],
    );
    let tokens = dir.path().join("tokens");
    let endpoint = server.endpoint();
    let tools = |token: &str| tools_with_token(&endpoint, token);
    assert_eq!(
        tools("first-token").0,
        0,
        "granted by the file read at the start"
    );
    assert_eq!(tools("second-token").0, 2);

    std::fs::write(&tokens, "second-token\n").expect("rotate the token");
    wait_until("the rotated token was never read", || {
        tools("second-token").0 == 0
    });
    let (code, _, stderr) = tools("first-token");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Unauthenticated"), "{stderr}");
    let reloaded = server.log_lines_with("files changed: reloaded");
    assert!(
        reloaded
            .iter()
            .any(|line| line.contains("tenant_access token files")),
        "{reloaded:?}"
    );

    std::fs::write(&tokens, "\n").expect("empty the file");
    wait_until("the emptied file was never read", || {
        !server.log_lines_with("holds no token").is_empty()
    });
    assert_eq!(tools("second-token").0, 0, "the tokens held before stay");
}

/// A token rotated on both sides without a restart: the server's token file holds the old and
/// new token while the provider's file (`--control-plane-token-file`) moves to the new one;
/// once the server's holds only the new token, the provider's heartbeats still renew its lease
/// past its TTL, so it sends the new token. The CLI reads its token from a file too.
#[test]
fn a_provider_follows_its_rotated_token_file() {
    let (server, dir) = serve_with_config(
        "tls_reload_interval = \"100ms\"\n\
         [[tenant_access]]\ntoken_file = \"{dir}/tokens\"\ntenants = [1]\n",
        &[("tokens", "old-token\n"), ("provider-token", "old-token\n")],
    );
    let (served, sent) = (dir.path().join("tokens"), dir.path().join("provider-token"));
    let endpoint = server.endpoint();
    let sent_path = sent.to_str().expect("a UTF-8 path");
    let _provider = ChildGuard::structs_provider_with(
        &endpoint,
        &[
            "--tenant",
            "1",
            "--tls-reload-interval",
            "100ms",
            "--control-plane-token-file",
            sent_path,
        ],
    );
    let cli_token = dir.path().join("cli-token");
    std::fs::write(&cli_token, "old-token\n").expect("write");
    let cli_token = cli_token.to_str().expect("a UTF-8 path");
    let with_file = [
        "--endpoint",
        &endpoint,
        "--tenant",
        "1",
        "--token-file",
        cli_token,
    ];
    wait_for_structs_provider_with(&with_file);

    let listed_with = |token: &str| tools_with_token(&endpoint, token).0 == 0;
    std::fs::write(&served, "old-token\nnew-token\n").expect("add the new token");
    wait_until("the server never read the new token", || {
        listed_with("new-token")
    });
    std::fs::write(&sent, "new-token\n").expect("move the provider over");
    // The provider reads its file every 100 ms; a heartbeat goes every ~1.7 s.
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&served, "new-token\n").expect("drop the old token");
    wait_until("the server never dropped the old token", || {
        !listed_with("old-token")
    });
    // Past the provider's 5 s TTL: its lease was renewed with the new token, or it is gone.
    std::thread::sleep(Duration::from_secs(7));
    std::fs::write(dir.path().join("cli-token"), "new-token\n").expect("write");
    assert_provider_still_listed(&with_file);
}

/// SIGHUP reads the token files on both sides, which with `tls_reload_interval = "0s"` are read
/// only at the start and on SIGHUP: the server, sent SIGHUP, drops the old token from its file;
/// the provider, sent SIGHUP after its file moved to the new token, sends the new one from its
/// next heartbeat, so its lease is renewed past its 5 s TTL.
#[test]
fn sighup_reads_the_rotated_token_files_on_both_sides() {
    let (server, dir) = serve_with_config(
        "tls_reload_interval = \"0s\"\n\
         [[tenant_access]]\ntoken_file = \"{dir}/tokens\"\ntenants = [1]\n",
        &[
            ("tokens", "old-token\nnew-token\n"),
            ("provider-token", "old-token\n"),
        ],
    );
    let (served, sent) = (dir.path().join("tokens"), dir.path().join("provider-token"));
    let endpoint = server.endpoint();
    let provider = ChildGuard::structs_provider_with(
        &endpoint,
        &[
            "--tenant",
            "1",
            "--tls-reload-interval",
            "0s",
            "--control-plane-token-file",
            sent.to_str().expect("a UTF-8 path"),
        ],
    );
    let with_new = [
        "--endpoint",
        &endpoint,
        "--tenant",
        "1",
        "--token",
        "new-token",
    ];
    wait_for_structs_provider_with(&with_new);

    std::fs::write(&sent, "new-token\n").expect("move the provider over");
    provider.hang_up();
    std::fs::write(&served, "new-token\n").expect("drop the old token");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        tools_with_token(&endpoint, "old-token").0,
        0,
        "not read unasked"
    );
    server.hang_up();
    wait_until("the server never dropped the old token", || {
        tools_with_token(&endpoint, "old-token").0 == 2
    });
    // Past the provider's 5 s TTL: its lease was renewed with the new token, or it is gone.
    std::thread::sleep(Duration::from_secs(7));
    assert_provider_still_listed(&with_new);
}

/// The Rust client reads its token file again (`with_bearer_token_file`): once the server's
/// file holds only the new token, the client is refused until its own file holds it too, and
/// then granted on the same client, without building a new one.
#[tokio::test(flavor = "multi_thread")]
async fn the_rust_client_follows_its_rotated_token_file() {
    let (server, dir) = serve_with_config(
        "tls_reload_interval = \"100ms\"\n\
         [[tenant_access]]\ntoken_file = \"{dir}/tokens\"\ntenants = [1]\n",
        &[("tokens", "old-token\n"), ("client-token", "old-token\n")],
    );
    let endpoint = server.endpoint();
    let client = ToolplaneClient::connect(&endpoint, TenantId(1))
        .await
        .expect("connected")
        .with_bearer_token_file(&dir.path().join("client-token"), Duration::from_millis(50))
        .expect("a readable token file");
    client
        .all_services()
        .await
        .expect("granted with the old token");

    std::fs::write(dir.path().join("tokens"), "new-token\n").expect("rotate on the server");
    wait_until("the server never dropped the old token", || {
        tools_with_token(&endpoint, "old-token").0 == 2
    });
    match client.all_services().await {
        Err(ClientError::Rpc(status)) => assert_eq!(status.code(), Code::Unauthenticated),
        other => panic!("the old token is refused now, got {other:?}"),
    }

    std::fs::write(dir.path().join("client-token"), "new-token\n").expect("rotate the client's");
    eventually("the client never sent the new token", || async {
        client.all_services().await.is_ok()
    })
    .await;
}
