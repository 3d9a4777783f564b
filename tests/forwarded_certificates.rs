//! Tenant access behind a proxy that terminates TLS (a mesh sidecar): on connections from the
//! addresses in `forwarded_client_cert_proxies`, a call's identities are those of the
//! certificate the proxy names in `x-forwarded-client-cert` (Envoy's format); from anyone else
//! the header is ignored. Over gRPC (the generated Rust client and grpcurl) and the MCP endpoint.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use common::process::peer;
use common::*;
use tonic::Code;
use toolplane::access::{TenantAccess, TenantAccessRule, parse_proxies};
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
    let mut request = tonic::Request::new(pb::ListServicesRequest {
        meta: meta(tenant),
        ..Default::default()
    });
    if let Some(value) = certificate {
        request
            .metadata_mut()
            .insert("x-forwarded-client-cert", value.parse().expect("ascii"));
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
