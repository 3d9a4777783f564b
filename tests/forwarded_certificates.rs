//! Tenant access behind a proxy that terminates TLS (a mesh sidecar): on connections from the
//! addresses in `forwarded_client_cert_proxies`, a call's identities are those of the
//! certificate the proxy names in `x-forwarded-client-cert` (Envoy's format), or the mesh
//! identity in `l5d-client-id` (Linkerd's) when `forwarded_client_cert_header` says so; from
//! anyone else the header is ignored. Over gRPC (the generated Rust client and grpcurl) and the
//! MCP endpoint.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::process::peer;
use common::*;
use tonic::Code;
use toolplane::access::{ForwardedIdentityHeader, TenantAccess, TenantAccessRule, parse_proxies};
use toolplane::grpc::ServerOptions;
use toolplane::pb;

/// The planner's identity, granted tenant 1.
const PLANNER: &str = "spiffe://cluster.local/ns/agents/sa/planner";

/// What Istio's sidecar sends for a caller presenting the planner's certificate.
fn forwarded_planner() -> String {
    format!(
        "By=spiffe://cluster.local/ns/toolplane/sa/toolplane;Hash=4f1b2c;\
         Subject=\"\";URI={PLANNER}"
    )
}

/// A server granting [`PLANNER`] tenant 1 and every identity under
/// `spiffe://cluster.local/ns/ops/` tenant 3, believing forwarded certificates from `proxies`.
async fn behind(proxies: &str) -> (TestServer, SocketAddr) {
    let rules = TenantAccess::from_rules(&[
        TenantAccessRule {
            identity: PLANNER.to_owned(),
            tenants: vec![1],
            ..TenantAccessRule::default()
        },
        TenantAccessRule {
            identity_prefix: "spiffe://cluster.local/ns/ops/".to_owned(),
            tenants: vec![3],
            ..TenantAccessRule::default()
        },
    ])
    .expect("valid rules")
    .with_forwarded_client_cert_proxies(parse_proxies(proxies).expect("addresses"));
    TestServer::start_with_mcp(ServerOptions {
        tenant_access: rules,
        ..test_options()
    })
    .await
}

/// A ListServices call for `tenant` forwarding `certificate` when given.
async fn list(
    server: &TestServer,
    tenant: u64,
    certificate: Option<&str>,
) -> Result<usize, tonic::Status> {
    let header = certificate.map(|value| ("x-forwarded-client-cert", value));
    list_with(server, tenant, header).await
}

/// A ListServices call for `tenant` with the header (name, value) when given.
async fn list_with(
    server: &TestServer,
    tenant: u64,
    header: Option<(&'static str, &str)>,
) -> Result<usize, tonic::Status> {
    let mut request = tonic::Request::new(pb::ListServicesRequest {
        meta: meta(tenant),
        ..Default::default()
    });
    if let Some((name, value)) = header {
        request
            .metadata_mut()
            .insert(name, value.parse().expect("ascii"));
    }
    let answer = server.discovery().await.list_services(request).await?;
    Ok(answer.into_inner().services.len())
}

/// From a listed proxy (this test, on 127.0.0.1): the forwarded certificate's identity acts
/// for its tenant (or its prefix's) and is refused another, naming it; a call forwarding none has no identity; a
/// header that cannot be read is UNAUTHENTICATED. grpcurl, sending the header as the proxy
/// would, is held to the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_listed_proxy_s_forwarded_certificate_names_the_caller() {
    let (server, _) = behind("127.0.0.1, ::1").await;
    let planner = forwarded_planner();
    assert_eq!(list(&server, 1, Some(&planner)).await.expect("granted"), 0);
    let refused = list(&server, 2, Some(&planner))
        .await
        .expect_err("not granted");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains(PLANNER), "{refused:?}");
    let oncall = "URI=spiffe://cluster.local/ns/ops/sa/oncall";
    assert_eq!(
        list(&server, 3, Some(oncall)).await.expect("by its prefix"),
        0
    );
    list(&server, 1, Some(oncall))
        .await
        .expect_err("not granted");
    let refused = list(&server, 1, None).await.expect_err("no identity");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("no certificate identity"),
        "{refused:?}"
    );
    let unreadable = list(&server, 1, Some("URI=\"unterminated"))
        .await
        .expect_err("unreadable");
    assert_eq!(unreadable.code(), Code::Unauthenticated, "{unreadable:?}");
    assert!(
        unreadable
            .message()
            .contains("x-forwarded-client-cert header"),
        "{unreadable:?}"
    );

    if let Some(grpcurl) = peer("venv/bin/grpcurl") {
        let run = |tenant: u64| {
            let (grpcurl, addr) = (grpcurl.clone(), server.addr.to_string());
            let header = format!("x-forwarded-client-cert: {}", forwarded_planner());
            tokio::task::spawn_blocking(move || {
                Command::new(grpcurl)
                    .args(["-plaintext", "-H", &header])
                    .args(["-d", &format!(r#"{{"meta": {{"tenant_id": {tenant}}}}}"#)])
                    .args([addr.as_str(), "toolplane.v1.DiscoveryService/ListServices"])
                    .output()
                    .expect("run grpcurl")
            })
        };
        let granted = run(1).await.expect("ran");
        assert!(granted.status.success(), "{granted:?}");
        let refused = run(2).await.expect("ran");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("Code: PermissionDenied"), "{stderr}");
        assert!(stderr.contains(PLANNER), "{stderr}");
    }
    server.stop().await;
}

/// The MCP endpoint reads the forwarded certificate the same way: 200 for the identity's
/// tenant, 403 for another, 400 for a header that cannot be read.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_endpoint_reads_forwarded_certificates() {
    let (server, mcp) = behind("127.0.0.0/8").await;
    let client = http_client();
    let url = format!("http://{mcp}/mcp");
    let list = |tenant: &str, certificate: String| {
        tools_list(&client, &url, tenant)
            .header("x-forwarded-client-cert", certificate)
            .send()
    };
    let granted = list("1", forwarded_planner()).await.expect("answered");
    assert_eq!(granted.status(), 200);
    let refused = list("2", forwarded_planner()).await.expect("answered");
    assert_eq!(refused.status(), 403);
    let unreadable = list("1", "URI=\"unterminated".to_owned())
        .await
        .expect("answered");
    assert_eq!(unreadable.status(), 400);
    server.stop().await;
}

/// From an address not listed, the header is anyone's to write and is ignored: the call has no
/// identity and is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_header_is_ignored_from_other_addresses() {
    let (server, _) = behind("10.9.9.9").await;
    let refused = list(&server, 1, Some(&forwarded_planner()))
        .await
        .expect_err("not from a listed proxy");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("no certificate identity"),
        "{refused:?}"
    );
    let ignored = list(&server, 1, Some("URI=\"unterminated"))
        .await
        .expect_err("not read at all");
    assert_eq!(ignored.code(), Code::PermissionDenied, "{ignored:?}");
    server.stop().await;
}

/// Linkerd's mesh identity of the planner, granted tenant 1 behind Linkerd.
const LINKERD_PLANNER: &str = "planner.agents.serviceaccount.identity.linkerd.cluster.local";

/// Behind Linkerd (`forwarded_client_cert_header = "l5d-client-id"`), a call's identity is the
/// one its `l5d-client-id` names, over gRPC and the MCP endpoint; `x-forwarded-client-cert` is
/// then a header like any other, not read. Behind Envoy (the default) `l5d-client-id` is not
/// read.
#[tokio::test(flavor = "multi_thread")]
async fn behind_linkerd_the_client_id_header_names_the_caller() {
    let rules = TenantAccess::from_rules(&[TenantAccessRule {
        identity: LINKERD_PLANNER.to_owned(),
        tenants: vec![1],
        ..TenantAccessRule::default()
    }])
    .expect("valid rules")
    .with_forwarded_client_cert_proxies(parse_proxies("127.0.0.0/8").expect("addresses"))
    .with_forwarded_identity_header(ForwardedIdentityHeader::L5dClientId);
    let (server, mcp) = TestServer::start_with_mcp(ServerOptions {
        tenant_access: rules,
        ..test_options()
    })
    .await;
    let linkerd = Some(("l5d-client-id", LINKERD_PLANNER));
    assert_eq!(list_with(&server, 1, linkerd).await.expect("granted"), 0);
    let refused = list_with(&server, 2, linkerd)
        .await
        .expect_err("tenant 2 is not granted");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains(LINKERD_PLANNER), "{refused:?}");
    let unread = list(&server, 1, Some(&forwarded_planner()))
        .await
        .expect_err("x-forwarded-client-cert is not read");
    assert!(
        unread.message().contains("no certificate identity"),
        "{unread:?}"
    );
    let unreadable = list_with(&server, 1, Some(("l5d-client-id", "a b")))
        .await
        .expect_err("not one name");
    assert_eq!(unreadable.code(), Code::Unauthenticated, "{unreadable:?}");
    assert!(
        unreadable.message().contains("l5d-client-id header"),
        "{unreadable:?}"
    );

    let client = http_client();
    let url = format!("http://{mcp}/mcp");
    let answered = tools_list(&client, &url, "1")
        .header("l5d-client-id", LINKERD_PLANNER)
        .send()
        .await
        .expect("answered");
    assert_eq!(answered.status(), 200);
    server.stop().await;

    let (envoy, _) = behind("127.0.0.0/8").await;
    let ignored = list_with(&envoy, 1, Some(("l5d-client-id", PLANNER)))
        .await
        .expect_err("l5d-client-id is not read behind Envoy");
    assert_eq!(ignored.code(), Code::PermissionDenied, "{ignored:?}");
    envoy.stop().await;
}
