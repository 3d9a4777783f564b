//! Importing an MCP server that takes only OAuth access tokens, got with client credentials
//! (`oauth_client_credentials` of an `[[mcp_imports]]` entry). The server is the official MCP
//! Python SDK's, as its resource server (protected resource metadata and 401 challenges),
//! with the script's own authorization server beside it, granting client credentials for short
//! lifetimes (`tests/peers/python_mcp_server.py --oauth-client`). The conformance suite's
//! client-credentials scenarios (`mcp_conformance.rs`) check the requests themselves: HTTP
//! Basic, and a JWT assertion signed with an ES256 key.

mod common;

use std::time::Duration;

use common::mcp_server::{PythonMcpServer, importing_with, invoke, output, wait_for};
use common::process::{ServerProcess, wait_until};
use common::{TestServer, meta};
use serde_json::{Value, json};
use toolplane::mcp::client_credentials::{ClientCredentials, ClientProof};
use toolplane::mcp::import::{McpSource, Secret, ServerAuth};
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;

/// The OAuth client the peer is started with.
const CLIENT: &str = "toolplane:s3cret";

/// The peer's counts: access tokens issued, and requests whose token it refused.
async fn oauth_counts(server: &TestServer) -> (u64, u64) {
    let answer = invoke(server, "oauth_counts", json!({}))
        .await
        .expect("counted");
    let counts = output(&answer);
    let count = |name: &str| {
        counts[name]
            .as_u64()
            .unwrap_or_else(|| panic!("a count: {counts}"))
    };
    (count("issued"), count("refused"))
}

/// `add` of the imported server answers through toolplane.
async fn adds(server: &TestServer) {
    let added = invoke(server, "add", json!({"a": 20, "b": 22}))
        .await
        .expect("added");
    assert_eq!(output(&added), json!({"result": 42}));
}

/// A server importing `mcp` with the peer's client credentials (its issuer pinned), once the
/// import is registered.
async fn start_importing(mcp: &PythonMcpServer) -> TestServer {
    let credentials = ClientCredentials {
        client_id: "toolplane".into(),
        proof: ClientProof::Secret(Secret("s3cret".into())),
        scopes: Vec::new(),
        authorization_server: Some(mcp.url().replace("/mcp", "/issuer")),
    };
    let server = TestServer::start_with(importing_with(
        "python-tools",
        McpSource::Http(mcp.url()),
        Duration::from_secs(1),
        Some(ServerAuth::ClientCredentials(credentials)),
    ))
    .await;
    wait_for(&server, "python-tools", |found| found.is_some())
        .await
        .expect("imported");
    server
}

/// toolplane finds the server's authorization server from its metadata, gets a token with its
/// client secret, and keeps calling as tokens expire (renewed before they do) and after every
/// token is revoked (the server's 401 answered with a new token, and the request sent again).
#[tokio::test(flavor = "multi_thread")]
async fn an_import_gets_access_tokens_with_client_credentials_and_renews_them() {
    let Some(mcp) =
        PythonMcpServer::start_with(0, &["--oauth-client", CLIENT, "--token-lifetime", "4"])
    else {
        return;
    };
    let server = start_importing(&mcp).await;
    adds(&server).await;
    let (issued, _) = oauth_counts(&server).await;
    assert!(issued >= 1, "issued {issued}");

    // Past the first token's lifetime: calls go on, with tokens got before the ones in use
    // expired (halfway through their lifetimes, 2 s before), so none was refused.
    tokio::time::sleep(Duration::from_secs(5)).await;
    adds(&server).await;
    let (renewed, refused) = oauth_counts(&server).await;
    assert!(renewed > issued, "issued {issued}, then {renewed}");
    assert_eq!(refused, 0, "renewed only once refused");

    invoke(&server, "revoke_tokens", json!({}))
        .await
        .expect("revoked");
    adds(&server).await;
    let (after_revoking, refused) = oauth_counts(&server).await;
    assert!(refused >= 1, "a revoked token was refused");
    assert!(
        after_revoking > renewed,
        "issued {renewed}, then {after_revoking}"
    );
    server.stop().await;
}

/// A server whose protected resource metadata is not at its well-known location is found
/// where its 401 challenge (`WWW-Authenticate: ... resource_metadata=...`) says, as MCP's
/// authorization asks of clients first.
#[tokio::test(flavor = "multi_thread")]
async fn the_metadata_is_found_where_the_servers_challenge_names_it() {
    let Some(mcp) = PythonMcpServer::start_with(
        0,
        &[
            "--oauth-client",
            CLIENT,
            "--resource-metadata-path",
            "/custom/resource-metadata.json",
        ],
    ) else {
        return;
    };
    let server = start_importing(&mcp).await;
    adds(&server).await;
    server.stop().await;
}

/// With no `scopes` configured, toolplane asks for the ones the server's metadata names
/// (`scopes_supported`), as MCP's scope selection says: the server refuses tokens without
/// them (403 `insufficient_scope`).
#[tokio::test(flavor = "multi_thread")]
async fn the_scopes_the_server_names_are_asked_for() {
    let Some(mcp) = PythonMcpServer::start_with(
        0,
        &["--oauth-client", CLIENT, "--required-scope", "tools:call"],
    ) else {
        return;
    };
    let server = start_importing(&mcp).await;
    adds(&server).await;
    server.stop().await;
}

/// The log events of `server` whose message is `message`, each line parsed.
fn warnings(server: &ServerProcess, message: &str) -> Vec<Value> {
    server
        .log_lines_with(message)
        .iter()
        .map(|line| serde_json::from_str(line).expect("a JSON log line"))
        .collect()
}

/// The error an import of `service` failed with, once logged.
fn import_failure(server: &ServerProcess, service: &str) -> String {
    let failed = |events: &[Value]| {
        events
            .iter()
            .find(|event| event["fields"]["service"] == service)
            .map(|event| event["fields"]["error"].as_str().unwrap_or("").to_owned())
    };
    wait_until(&format!("the import of {service} fails"), || {
        failed(&warnings(server, "cannot reach the MCP server to import")).is_some()
    });
    failed(&warnings(server, "cannot reach the MCP server to import")).expect("logged")
}

/// From the configuration file: the secret is read from the environment variable named; a
/// wrong secret is refused by the authorization server, and an authorization server other
/// than the one configured is not sent the credentials; each import's failure says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_config_files_client_credentials_are_used_and_their_failures_named() {
    let Some(mcp) = PythonMcpServer::start_with(0, &["--oauth-client", CLIENT]) else {
        return;
    };
    let url = mcp.url();
    let entry = |service: &str, table: &str| {
        format!(
            "[[mcp_imports]]\nservice = \"{service}\"\nurl = \"{url}\"\n\
             [mcp_imports.oauth_client_credentials]\nclient_id = \"toolplane\"\n{table}\n"
        )
    };
    let config = format!(
        "log_format = \"json\"\n{}{}{}",
        entry("granted", "client_secret_env = \"CRM_SECRET\""),
        entry("refused", "client_secret_env = \"WRONG_SECRET\""),
        entry(
            "elsewhere",
            "client_secret_env = \"CRM_SECRET\"\n\
             authorization_server = \"https://auth.example.com\""
        ),
    );
    let (server, _dir) = ServerProcess::start_with_config(
        &config,
        &[],
        &[("CRM_SECRET", "s3cret"), ("WRONG_SECRET", "guessed")],
    );
    let mut discovery = DiscoveryServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    common::mcp_server::wait_for_at(&mut discovery, "granted", |found| found.is_some()).await;

    let refused = import_failure(&server, "refused");
    assert!(
        refused
            .contains("cannot get an access token from the authorization server's token endpoint")
            && refused.contains("invalid_client")
            && refused.contains(&url.replace("/mcp", "/issuer/token")),
        "{refused}"
    );
    let elsewhere = import_failure(&server, "elsewhere");
    assert!(
        elsewhere.contains("not the authorization_server configured (https://auth.example.com)"),
        "{elsewhere}"
    );
    for service in ["refused", "elsewhere"] {
        let missing = discovery
            .get_service(pb::GetServiceRequest {
                meta: meta(0),
                service_name: service.into(),
            })
            .await
            .expect_err("never imported");
        assert_eq!(missing.code(), tonic::Code::NotFound, "{service}");
    }
}
