//! Importing an MCP server that takes only OAuth access tokens, got with client credentials
//! (`oauth_client_credentials` of an `[[mcp_imports]]` entry). The server is the official MCP
//! Python SDK's, as its resource server (protected resource metadata and 401 challenges),
//! with the script's own authorization server beside it, granting client credentials for short
//! lifetimes (`tests/peers/python_mcp_server.py --oauth-client`). The conformance suite's
//! client-credentials scenarios (`mcp_conformance.rs`) check the requests themselves: HTTP
//! Basic, and a JWT assertion signed with an ES256 key. Here the peer also asks for more
//! scopes (403 `insufficient_scope`) and checks JWT assertions against a key file that is
//! rotated.

use crate::common;

use std::time::Duration;

use common::mcp_server::{PythonMcpServer, importing_with, invoke, output, wait_for};
use common::process::{ServerProcess, wait_until};
use common::{TestServer, meta, scraped};
use serde_json::{Value, json};
use toolplane::mcp::client_credentials::{ClientCredentials, ClientProof, SigningAlgorithm};
use toolplane::mcp::import::{McpSource, Secret, ServerAuth};
use toolplane::pb;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;

/// The OAuth client the peer is started with.
const CLIENT: &str = "toolplane:s3cret";

/// The peer, taking OAuth tokens granted to [`CLIENT`], started with `args` too.
fn oauth_peer(args: &[&str]) -> Option<PythonMcpServer> {
    let mut all = vec!["--oauth-client", CLIENT];
    all.extend_from_slice(args);
    PythonMcpServer::start_with(0, &all)
}

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
    start_importing_as(mcp, ClientProof::Secret(Secret("s3cret".into())))
        .await
        .0
}

/// A server importing `mcp` as the peer's client, proven with `proof` (the issuer pinned),
/// serving metrics too, once the import is registered; and its metrics URL.
async fn start_importing_as(mcp: &PythonMcpServer, proof: ClientProof) -> (TestServer, String) {
    let credentials = ClientCredentials {
        client_id: "toolplane".into(),
        proof,
        scopes: Vec::new(),
        authorization_server: Some(mcp.url().replace("/mcp", "/issuer")),
    };
    let (server, metrics) = TestServer::start_with_metrics(importing_with(
        "python-tools",
        McpSource::Http(mcp.url()),
        Duration::from_secs(1),
        Some(ServerAuth::ClientCredentials(credentials)),
    ))
    .await;
    wait_for(&server, "python-tools", |found| found.is_some())
        .await
        .expect("imported");
    (server, format!("http://{metrics}/metrics"))
}

/// The count of token requests for `reason` that ended as `outcome`, as `metrics` says.
async fn token_requests(metrics: &str, reason: &str, outcome: &str) -> f64 {
    let sample = format!(
        "toolplane_mcp_import_token_requests_total{{reason=\"{reason}\",outcome=\"{outcome}\"}}"
    );
    scraped(&common::http_client(), metrics, &sample).await
}

/// toolplane finds the server's authorization server from its metadata, gets a token with its
/// client secret, and keeps calling as tokens expire (renewed before they do) and after every
/// token is revoked (the server's 401 answered with a new token, and the request sent again).
#[tokio::test(flavor = "multi_thread")]
async fn an_import_gets_access_tokens_with_client_credentials_and_renews_them() {
    let Some(mcp) = oauth_peer(&["--token-lifetime", "4"]) else {
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

/// A token whose `expires_in` is more than the clock counts (2^64 - 1 seconds) is used, and
/// kept (never renewed). Working out when to renew it panicked, so no token was ever had and
/// the import never registered.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_living_longer_than_the_clock_counts_is_used() {
    let Some(mcp) = oauth_peer(&["--token-lifetime", &u64::MAX.to_string()]) else {
        return;
    };
    let server = start_importing(&mcp).await;
    adds(&server).await;
    adds(&server).await;
    assert_eq!(oauth_counts(&server).await, (1, 0), "one token, kept");
    server.stop().await;
}

/// A server whose protected resource metadata is not at its well-known location is found
/// where its 401 challenge (`WWW-Authenticate: ... resource_metadata=...`) says, as MCP's
/// authorization asks of clients first.
#[tokio::test(flavor = "multi_thread")]
async fn the_metadata_is_found_where_the_servers_challenge_names_it() {
    let Some(mcp) = oauth_peer(&["--resource-metadata-path", "/custom/resource-metadata.json"])
    else {
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
    let Some(mcp) = oauth_peer(&["--required-scope", "tools:call"]) else {
        return;
    };
    let server = start_importing(&mcp).await;
    adds(&server).await;
    server.stop().await;
}

/// A server answering a tool's call 403 `insufficient_scope` for a scope the token lacks
/// (naming that scope alone) is sent the call again with a token asked for with that scope
/// and the ones asked for before (the server still requires those), as MCP's step-up
/// authorization says; later tokens keep it, so the next call needs no new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_scope_the_server_asks_for_is_added_and_the_call_sent_again() {
    let Some(mcp) = oauth_peer(&[
        "--required-scope",
        "tools:call",
        "--tool-scope",
        "add=tools:admin",
        "--token-lifetime",
        "600",
    ]) else {
        return;
    };
    let (server, metrics) =
        start_importing_as(&mcp, ClientProof::Secret(Secret("s3cret".into()))).await;
    let (issued, _) = oauth_counts(&server).await;
    adds(&server).await;
    adds(&server).await;
    let (after, refused) = oauth_counts(&server).await;
    assert_eq!(after, issued + 1, "one token with the scope added");
    assert_eq!(refused, 0);
    assert_eq!(
        token_requests(&metrics, "insufficient_scope", "granted").await,
        1.0
    );
    assert_eq!(
        token_requests(&metrics, "insufficient_scope", "failed").await,
        0.0
    );
    server.stop().await;
}

/// A step-up that cannot be had fails the call, saying why, and asks for nothing more: a scope
/// the authorization server refuses (`invalid_scope`) leaves the scopes asked for as they
/// were, and one it leaves out of the token it grants is not asked for again (the server's
/// second 403 stands, rather than a loop of token requests).
#[tokio::test(flavor = "multi_thread")]
async fn a_scope_that_cannot_be_had_fails_the_call_without_a_loop() {
    let Some(mcp) = oauth_peer(&[
        "--tool-scope",
        "add=tools:admin",
        "--tool-scope",
        "distance=geo:admin",
        "--refused-scope",
        "tools:admin",
        "--withheld-scope",
        "geo:admin",
        "--token-lifetime",
        "600",
    ]) else {
        return;
    };
    let (server, metrics) =
        start_importing_as(&mcp, ClientProof::Secret(Secret("s3cret".into()))).await;

    let refused = invoke(&server, "add", json!({"a": 1, "b": 2}))
        .await
        .expect_err("the scope is refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let message = refused.message();
    assert!(
        message.contains("asked for scope tools:admin (403 insufficient_scope)")
            && message.contains("invalid_scope"),
        "{message}"
    );
    // The scopes asked for are as before: tools without a scope of their own are called.
    let (issued, _) = oauth_counts(&server).await;
    assert_eq!(
        token_requests(&metrics, "insufficient_scope", "failed").await,
        1.0
    );

    let points = json!({"start": {"x": 0, "y": 0}, "end": {"x": 3, "y": 4}});
    for _ in 0..2 {
        let withheld = invoke(&server, "distance", points.clone())
            .await
            .expect_err("the scope is withheld");
        assert_eq!(withheld.code(), tonic::Code::PermissionDenied);
        assert!(
            withheld.message().contains("insufficient_scope"),
            "{}",
            withheld.message()
        );
    }
    let (after, _) = oauth_counts(&server).await;
    assert_eq!(after, issued + 1, "one token asked for with geo:admin");
    server.stop().await;
}

/// A private key read from its file again before each token request: after the file is
/// rotated (and the authorization server trusts only the new key), the next token is signed
/// with the new key; a file that then holds no key leaves the last one in use.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_private_key_is_used_for_the_next_token() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (key_file, public_file) = (dir.path().join("key.pem"), dir.path().join("public.pem"));
    let install = |key: &rcgen::KeyPair| {
        std::fs::write(&key_file, key.serialize_pem()).expect("key written");
        std::fs::write(&public_file, key.public_key_pem()).expect("public key written");
    };
    let first = rcgen::KeyPair::generate().expect("a P-256 key");
    install(&first);
    let public = public_file.to_str().expect("a UTF-8 path");
    let Some(mcp) = oauth_peer(&["--client-public-key", public, "--token-lifetime", "600"]) else {
        return;
    };
    let proof = ClientProof::PrivateKey {
        pem: Secret(first.serialize_pem()),
        file: key_file.clone(),
        algorithm: SigningAlgorithm::Es256,
    };
    let (server, _) = start_importing_as(&mcp, proof).await;
    adds(&server).await;

    install(&rcgen::KeyPair::generate().expect("a P-256 key"));
    invoke(&server, "revoke_tokens", json!({}))
        .await
        .expect("revoked");
    adds(&server).await;

    std::fs::write(&key_file, "not a key").expect("key file spoiled");
    invoke(&server, "revoke_tokens", json!({}))
        .await
        .expect("revoked");
    adds(&server).await;
    let (issued, refused) = oauth_counts(&server).await;
    assert_eq!(
        issued, 3,
        "a token for the session and one after each revocation"
    );
    assert!(refused >= 2, "refused {refused}");
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
    let Some(mcp) = oauth_peer(&[]) else {
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
