//! `[[tenant_access]]` read again from the configuration file while `toolplane serve` runs:
//! granting and taking away tenants, adding token files, needs no restart, and applies to
//! connections open before the change (the generated Rust client's one connection, the MCP
//! endpoint); a change that cannot be used is logged and the rules in force stay.

use crate::common;

use std::path::Path;

use common::process::{ServerProcess, replace_file, toolplane_cli, wait_until};
use common::{http_client, meta, scraped, tools_list};
use tonic::Code;
use toolplane::client::{BearerToken, ToolplaneClient};
use toolplane::envelope::TenantId;
use toolplane::pb;

/// The token of the `PLANNER_TOKEN` entry.
const TOKEN: &str = "planner-token-51c9";

/// The settings of every configuration here: watched every 100 ms, MCP and metrics served.
const SERVED: &str = "tls_reload_interval = \"100ms\"\nmcp_listen = \"127.0.0.1:0\"\n\
                      metrics_listen = \"127.0.0.1:0\"\n";

/// The configuration with the planner's token granting `tenants`, and `extra` after it.
fn config(tenants: &str, extra: &str) -> String {
    format!(
        "{SERVED}[[tenant_access]]\ntoken_env = \"PLANNER_TOKEN\"\ntenants = [{tenants}]\n{extra}"
    )
}

/// Replaces the configuration file in `dir` (see [`replace_file`]).
fn rewrite(dir: &Path, text: &str) {
    replace_file(&dir.join("toolplane.toml"), text);
}

/// Whether the generated Discovery client, on the Rust client's one connection, may list
/// the services of `tenant`; any refusal but PERMISSION_DENIED fails the test.
async fn lists(client: &ToolplaneClient, tenant: u64) -> bool {
    let answer = client
        .discovery()
        .list_services(pb::ListServicesRequest {
            meta: meta(tenant),
            ..Default::default()
        })
        .await;
    match answer {
        Ok(_) => true,
        Err(status) if status.code() == Code::PermissionDenied => false,
        Err(status) => panic!("unexpected refusal: {status:?}"),
    }
}

/// Polls `lists` until it answers `expected` for `tenant`; fails with `what` after 20 s.
async fn until_lists(client: &ToolplaneClient, tenant: u64, expected: bool, what: &str) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lists(client, tenant).await != expected {
        assert!(std::time::Instant::now() < give_up, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The URL of an endpoint the server logged (`what`, such as `MCP served at /mcp`) at `path`.
fn logged_url(server: &ServerProcess, what: &str, path: &str) -> String {
    let lines = server.log_lines_with(what);
    let address = lines
        .first()
        .and_then(|line| line.split("address=").nth(1))
        .expect("the address is logged");
    format!("http://{}{path}", address.trim())
}

/// Tenants granted and taken away in the file take effect on the Rust client's open
/// connection, the CLI and the MCP endpoint without a restart; a file that is not a valid
/// configuration, and one with no entry left, are logged and change nothing; a changed
/// setting that is read only at the start is named in the log.
#[tokio::test(flavor = "multi_thread")]
async fn tenants_granted_in_the_file_take_effect_on_open_connections() {
    let (server, dir) =
        ServerProcess::start_with_config(&config("1", ""), &[], &[("PLANNER_TOKEN", TOKEN)]);
    let endpoint = server.endpoint();
    let client = ToolplaneClient::connect(&endpoint, TenantId(1))
        .await
        .expect("connected")
        .with_bearer_token(BearerToken::new(TOKEN).expect("a valid token"));
    let (mcp, http) = (
        logged_url(&server, "MCP served at /mcp", "/mcp"),
        http_client(),
    );
    let metrics = logged_url(&server, "metrics served at /metrics", "/metrics");
    let config_reloads = |result: &str| {
        format!(
            "toolplane_file_reloads_total{{files=\"tenant_access_config\",result=\"{result}\"}}"
        )
    };
    let failing = "toolplane_file_reload_failing{files=\"tenant_access_config\"}";
    let mcp_status = |tenant: &'static str| {
        let request = tools_list(&http, &mcp, tenant).bearer_auth(TOKEN);
        async move { request.send().await.expect("answered").status().as_u16() }
    };
    assert!(lists(&client, 1).await);
    assert!(!lists(&client, 2).await);
    assert_eq!(mcp_status("2").await, 403);

    rewrite(dir.path(), &config("1, 2", ""));
    until_lists(&client, 2, true, "tenant 2 was never granted").await;
    assert_eq!(mcp_status("2").await, 200);
    let cli = |tenant: &str| {
        toolplane_cli(&[
            "tools",
            "--endpoint",
            &endpoint,
            "--tenant",
            tenant,
            "--token",
            TOKEN,
        ])
        .0
    };
    assert_eq!(cli("2"), 0);
    let reloaded = server.log_lines_with("files changed: reloaded");
    assert!(
        reloaded
            .iter()
            .any(|line| line.contains("tenant_access in the configuration file")),
        "{reloaded:?}"
    );

    rewrite(dir.path(), &config("2", ""));
    until_lists(&client, 1, false, "tenant 1 was never taken away").await;
    assert_eq!(mcp_status("1").await, 403);
    assert_eq!(cli("1"), 2);

    rewrite(
        dir.path(),
        "[[tenant_access]]\ntoken_env = \"PLANNER_TOKEN\"\n",
    );
    // Every part read again refuses the file; the tenant access watch logs so once it has
    // counted the refusal.
    wait_until("the invalid file was never refused", || {
        server
            .log_lines_with("cannot be used")
            .iter()
            .any(|line| line.contains("tenant_access in the") && line.contains("grants nothing"))
    });
    assert!(lists(&client, 2).await, "the rules in force stay");
    assert_eq!(scraped(&http, &metrics, failing).await, 1.0);
    assert_eq!(
        scraped(&http, &metrics, &config_reloads("refused")).await,
        1.0
    );
    assert_eq!(
        scraped(&http, &metrics, &config_reloads("reloaded")).await,
        2.0
    );
    let not_granted = "toolplane_mcp_requests_refused_total{reason=\"tenant_not_granted\"}";
    assert_eq!(scraped(&http, &metrics, not_granted).await, 2.0);

    rewrite(dir.path(), SERVED);
    wait_until("the emptied rules were never logged", || {
        !server.log_lines_with("takes a restart").is_empty()
    });
    assert!(!lists(&client, 1).await, "tenant 1 is still not granted");
    assert!(lists(&client, 2).await, "tenant 2 still is");

    rewrite(
        dir.path(),
        &config("2, 3", "").replace(
            "tls_reload_interval",
            "default_ttl = \"45s\"\ntls_reload_interval",
        ),
    );
    until_lists(&client, 3, true, "tenant 3 was never granted").await;
    // The change is counted once it is in force.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while scraped(&http, &metrics, failing).await != 0.0 {
        assert!(std::time::Instant::now() < give_up, "still failing");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let restart = server.log_lines_with("take effect at the next restart");
    assert!(
        restart.iter().any(|line| line.contains("default_ttl")),
        "{restart:?}"
    );
}

/// A `token_file` entry added to the file is read with it, and its file is watched from then
/// on: a token rotated in it is granted without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_file_added_to_the_file_is_watched() {
    let (server, dir) = ServerProcess::start_with_config(
        &config("1", ""),
        &[("tokens", "first-token\n")],
        &[("PLANNER_TOKEN", TOKEN)],
    );
    let endpoint = server.endpoint();
    let with = |token: &str| {
        toolplane_cli(&[
            "tools",
            "--endpoint",
            &endpoint,
            "--tenant",
            "4",
            "--token",
            token,
        ])
        .0
    };
    assert_eq!(with("first-token"), 2, "no entry holds it yet");

    let tokens = dir.path().join("tokens");
    let entry = format!(
        "[[tenant_access]]\ntoken_file = \"{}\"\ntenants = [4]\n",
        tokens.display()
    );
    rewrite(dir.path(), &config("1", &entry));
    wait_until("the added token file was never read", || {
        with("first-token") == 0
    });

    std::fs::write(&tokens, "second-token\n").expect("rotate the token");
    wait_until("the rotated token was never read", || {
        with("second-token") == 0
    });
    assert_eq!(with("first-token"), 2, "the old token is refused");
}

/// A server that started without rules checks no call until rules are added to its file;
/// then they are put in force, on the Rust client's connection opened before and on the MCP
/// endpoint; taking every rule away again is refused (that takes a restart) and they stay.
#[tokio::test(flavor = "multi_thread")]
async fn rules_added_to_a_server_without_rules_are_put_in_force() {
    let (server, dir) = ServerProcess::start_with_config(SERVED, &[], &[("PLANNER_TOKEN", TOKEN)]);
    let anyone = ToolplaneClient::connect(&server.endpoint(), TenantId(9))
        .await
        .expect("connected");
    let (mcp, http) = (
        logged_url(&server, "MCP served at /mcp", "/mcp"),
        http_client(),
    );
    let mcp_status = |tenant: &'static str| {
        let request = tools_list(&http, &mcp, tenant);
        async move { request.send().await.expect("answered").status().as_u16() }
    };
    assert!(lists(&anyone, 9).await, "no rules: any tenant");
    assert_eq!(mcp_status("9").await, 200);

    rewrite(dir.path(), &config("1", ""));
    until_lists(&anyone, 9, false, "the added rules were never put in force").await;
    assert_eq!(mcp_status("9").await, 403);
    let planner = ToolplaneClient::connect(&server.endpoint(), TenantId(1))
        .await
        .expect("connected")
        .with_bearer_token(BearerToken::new(TOKEN).expect("a valid token"));
    assert!(lists(&planner, 1).await, "the token grants tenant 1");

    rewrite(dir.path(), SERVED);
    wait_until("removing every rule was never refused", || {
        !server.log_lines_with("takes a restart").is_empty()
    });
    assert!(!lists(&anyone, 9).await, "the rules stay in force");
}
