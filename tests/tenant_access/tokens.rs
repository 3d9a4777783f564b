//! Tenant access by bearer token alone (no client certificates): the generated Rust client,
//! grpcurl with -H, and the MCP endpoint.

use super::*;

/// A server in plain text whose one rule grants tenant 1 to callers sending [`PLANNER_TOKEN`].
async fn token_guarded() -> (TestServer, SocketAddr) {
    let rules = [TenantAccessRule {
        token_env: "PLANNER_TOKEN".to_owned(),
        tenants: vec![1],
        ..TenantAccessRule::default()
    }];
    let access = TenantAccess::from_rules_with(&rules, |variable| {
        (variable == "PLANNER_TOKEN").then(|| PLANNER_TOKEN.to_owned())
    })
    .expect("valid rules");
    TestServer::start_with_mcp(ServerOptions {
        tenant_access: access,
        ..test_options()
    })
    .await
}

/// A ListServices request for `tenant`, sending `authorization` when given.
fn list_request(
    tenant: u64,
    authorization: Option<&str>,
) -> tonic::Request<pb::ListServicesRequest> {
    let mut request = tonic::Request::new(pb::ListServicesRequest {
        meta: meta(tenant),
        ..Default::default()
    });
    if let Some(value) = authorization {
        request
            .metadata_mut()
            .insert("authorization", value.parse().expect("ascii"));
    }
    request
}

/// Without client certificates, a bearer token grants its entry's tenants: a call sending it
/// acts for tenant 1 and is refused tenant 2; a call sending none is granted no tenant; a token
/// no entry holds is UNAUTHENTICATED. grpcurl sends it with -H.
#[tokio::test(flavor = "multi_thread")]
async fn a_bearer_token_grants_its_tenants() {
    let (server, _) = token_guarded().await;
    let bearer = format!("Bearer {PLANNER_TOKEN}");
    let mut discovery = server.discovery().await;
    let mut registering = tonic::Request::new(pb::RegisterServiceRequest {
        meta: meta(1),
        registration: Some(story_generator()),
    });
    registering
        .metadata_mut()
        .insert("authorization", bearer.parse().expect("ascii"));
    discovery
        .register_service(registering)
        .await
        .expect("granted by the token");
    let listed = discovery
        .list_services(list_request(1, Some(&bearer)))
        .await
        .expect("granted");
    assert_eq!(listed.into_inner().services.len(), 1);
    let refused = discovery
        .list_services(list_request(2, Some(&bearer)))
        .await
        .expect_err("tenant 2 is not the token's");
    assert_refused(
        &refused,
        2,
        "the bearer token of PLANNER_TOKEN",
        "tenants 1",
    );
    let refused = discovery
        .list_services(list_request(1, None))
        .await
        .expect_err("no token");
    assert_refused(
        &refused,
        1,
        "no certificate identity or bearer token",
        "no tenant",
    );
    let unknown = discovery
        .list_services(list_request(1, Some("Bearer guessed")))
        .await
        .expect_err("a token no entry holds");
    assert_eq!(unknown.code(), Code::Unauthenticated, "{unknown:?}");
    assert_eq!(reason(&unknown), "RESOURCE_ACCESS_DENIED");
    assert!(!unknown.message().contains(PLANNER_TOKEN), "{unknown:?}");

    if let Some(grpcurl) = peer("venv/bin/grpcurl") {
        let run = |authorization: String| {
            let (grpcurl, addr) = (grpcurl.clone(), server.addr.to_string());
            tokio::task::spawn_blocking(move || {
                Command::new(grpcurl)
                    .args(["-plaintext", "-H", &authorization])
                    .args(["-d", r#"{"meta": {"tenant_id": 1}}"#])
                    .args([addr.as_str(), "toolplane.v1.DiscoveryService/ListServices"])
                    .output()
                    .expect("run grpcurl")
            })
        };
        let listed = run(format!("authorization: {bearer}")).await.expect("ran");
        let stdout = String::from_utf8_lossy(&listed.stdout);
        assert!(listed.status.success(), "{stdout}");
        assert!(stdout.contains("story-generator"), "{stdout}");
        let refused = run("authorization: Bearer guessed".to_owned())
            .await
            .expect("ran");
        // Refused at once: reflection, which grpcurl asks first, takes the same header.
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("code = Unauthenticated"), "{stderr}");
        assert!(
            stderr.contains("not a bearer token tenant_access holds"),
            "{stderr}"
        );
    }
    server.stop().await;
}

/// The MCP endpoint takes the same bearer tokens: a request sending one is answered for its
/// tenants and refused 403 for others; one sending a token no entry holds is refused 401 with
/// `WWW-Authenticate: Bearer`.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_endpoint_takes_bearer_tokens() {
    let (server, mcp) = token_guarded().await;
    let client = common::http_client();
    let url = format!("http://{mcp}/mcp");
    let list = |tenant: &str, authorization: &str| {
        tools_list(&client, &url, tenant)
            .header("authorization", authorization)
            .send()
    };
    let bearer = format!("Bearer {PLANNER_TOKEN}");
    let granted = list("1", &bearer).await.expect("answered");
    assert_eq!(granted.status(), 200);
    let refused = list("2", &bearer).await.expect("answered");
    assert_eq!(refused.status(), 403);
    let unknown = list("1", "Bearer guessed").await.expect("answered");
    assert_eq!(unknown.status(), 401);
    assert_eq!(unknown.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = unknown.json().await.expect("a JSON-RPC error");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("not a bearer token tenant_access holds"),
        "{message}"
    );
    server.stop().await;
}
