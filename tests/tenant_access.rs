//! Tenant access (`[[tenant_access]]`): a caller may act only for the tenants the identity in
//! its client certificate (a SPIFFE URI or a DNS name, over mutual TLS) or the bearer token it
//! sends is granted, on every API: the generated Rust client, grpc.health.v1, the MCP endpoint,
//! and grpcurl.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::peer_run::run_to_end;
use common::process::{Runtime, peer, peer_script, proto_dir};
use common::tls::{Issued, TestCa};
use common::*;
use serde_json::json;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic_types::StatusExt;
use toolplane::access::{TenantAccess, TenantAccessRule};
use toolplane::grpc::{ServeError, ServerOptions, SideListeners};
use toolplane::json::json_to_struct;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

/// The longest the Python client's checks may run before it is killed and the test fails.
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

/// The planner's identity: granted tenant 1 only.
const PLANNER: &str = "spiffe://toolplane.test/ns/agents/sa/planner";
/// The operator's identity: granted every tenant.
const OPERATOR: &str = "ops.toolplane.test";

#[path = "tenant_access/tokens.rs"]
mod tokens;

/// A server asking for client certificates, with tenant access rules, and the certificates of
/// its callers.
struct Guarded {
    server: TestServer,
    mcp: SocketAddr,
    ca: TestCa,
    dir: tempfile::TempDir,
    planner: Issued,
    operator: Issued,
    stranger: Issued,
}

fn rules() -> TenantAccess {
    TenantAccess::from_rules(&[
        TenantAccessRule {
            identity: PLANNER.to_owned(),
            tenants: vec![1],
            ..TenantAccessRule::default()
        },
        TenantAccessRule {
            identity: OPERATOR.to_owned(),
            all_tenants: true,
            ..TenantAccessRule::default()
        },
    ])
    .expect("valid rules")
}

async fn guarded() -> Guarded {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = ServerOptions {
        tls: Some(ca.served_to_clients(dir.path())),
        tenant_access: rules(),
        ..test_options()
    };
    let (server, mcp) = TestServer::start_with_mcp(options).await;
    Guarded {
        server,
        mcp,
        planner: ca.client_uri(PLANNER),
        operator: ca.client(OPERATOR),
        stranger: ca.client("stranger.toolplane.test"),
        ca,
        dir,
    }
}

impl Guarded {
    /// A channel presenting `who`'s certificate.
    async fn channel(&self, who: &Issued) -> Channel {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.ca.pem()))
            .identity(who.identity());
        Channel::from_shared(format!("https://{}", self.server.addr))
            .expect("valid uri")
            .tls_config(tls)
            .expect("TLS settings")
            .connect()
            .await
            .expect("connected with a client certificate")
    }
}

async fn list_services(channel: &Channel, tenant: u64) -> Result<Vec<String>, tonic::Status> {
    let answer = DiscoveryServiceClient::new(channel.clone())
        .list_services(pb::ListServicesRequest {
            meta: meta(tenant),
            ..Default::default()
        })
        .await?;
    Ok(answer
        .into_inner()
        .services
        .into_iter()
        .map(|service| service.service_name)
        .collect())
}

/// A refusal: PERMISSION_DENIED, reason RESOURCE_ACCESS_DENIED, the tenant in ErrorInfo, and a
/// message naming the caller's identity and what it is granted.
fn assert_refused(status: &tonic::Status, tenant: u64, identity: &str, granted: &str) {
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert_eq!(reason(status), "RESOURCE_ACCESS_DENIED");
    let info = status
        .get_error_details()
        .error_info()
        .cloned()
        .expect("ErrorInfo");
    assert_eq!(info.metadata["tenant"], tenant.to_string());
    let message = status.message();
    assert!(message.contains(&format!("tenant {tenant}")), "{message}");
    assert!(message.contains(identity), "{message}");
    assert!(message.contains(granted), "{message}");
}

/// The planner registers, lists, validates input and creates agents in tenant 1; each of those
/// naming tenant 2 is refused PERMISSION_DENIED before anything is looked up or stored (an
/// InvokeTool of a tool tenant 2 lacks is refused, not NOT_FOUND), and the operator, granted
/// every tenant, finds tenant 2 as empty as before. A certificate no rule names is refused
/// every tenant.
#[tokio::test(flavor = "multi_thread")]
async fn a_caller_acts_only_for_the_tenants_its_certificate_is_granted() {
    let guarded = guarded().await;
    let planner = guarded.channel(&guarded.planner).await;
    let mut discovery = DiscoveryServiceClient::new(planner.clone());
    register_ok(&mut discovery, 1, story_generator()).await;
    assert_eq!(
        list_services(&planner, 1).await.expect("granted"),
        ["story-generator"]
    );

    let refused = register(&mut discovery, 2, story_generator())
        .await
        .expect_err("tenant 2 is not the planner's");
    assert_refused(&refused, 2, PLANNER, "grants it tenants 1");
    let refused = list_services(&planner, 2).await.expect_err("refused");
    assert_refused(&refused, 2, PLANNER, "tenants 1");
    let watch = discovery
        .watch_services(pb::WatchServicesRequest {
            meta: meta(2),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_refused(&watch, 2, PLANNER, "tenants 1");

    let mut invoke = ToolInvokeServiceClient::new(planner.clone());
    let input = Some(json_to_struct(&json!({})).expect("an object"));
    let valid = invoke
        .validate_tool_input(pb::ValidateToolInputRequest {
            meta: meta(1),
            tool_name: "generate_structure".into(),
            input: input.clone(),
            ..Default::default()
        })
        .await
        .expect("granted");
    assert_eq!(valid.into_inner().service_name, "story-generator");
    let refused = invoke
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(2),
            tool_name: "generate_structure".into(),
            input,
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_refused(&refused, 2, PLANNER, "tenants 1");

    let mut agents = AgentServiceClient::new(planner.clone());
    let create = |tenant| pb::CreateAgentRequest {
        meta: meta(tenant),
        name: "writer".into(),
        ..Default::default()
    };
    agents.create_agent(create(1)).await.expect("granted");
    let refused = agents.create_agent(create(2)).await.expect_err("refused");
    assert_refused(&refused, 2, PLANNER, "tenants 1");

    let operator = guarded.channel(&guarded.operator).await;
    assert_eq!(
        list_services(&operator, 1).await.expect("every tenant"),
        ["story-generator"]
    );
    assert!(
        list_services(&operator, 2)
            .await
            .expect("every tenant")
            .is_empty(),
        "a refused registration stored nothing"
    );
    let listed = AgentServiceClient::new(operator)
        .list_agents(pb::ListAgentsRequest {
            meta: meta(2),
            ..Default::default()
        })
        .await
        .expect("every tenant");
    assert!(listed.into_inner().agents.is_empty());

    let stranger = guarded.channel(&guarded.stranger).await;
    let refused = list_services(&stranger, 0).await.expect_err("no tenant");
    assert_refused(
        &refused,
        0,
        "stranger.toolplane.test",
        "grants it no tenant",
    );
    guarded.server.stop().await;
}

/// grpc.health.v1 asks about a tenant's service only for a caller granted that tenant (the
/// tenant from the `toolplane-tenant-id` header); the server's own health needs no tenant.
#[tokio::test(flavor = "multi_thread")]
async fn standard_health_checks_the_tenant_of_the_header() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let guarded = guarded().await;
    let planner = guarded.channel(&guarded.planner).await;
    register_ok(
        &mut DiscoveryServiceClient::new(planner.clone()),
        1,
        story_generator(),
    )
    .await;
    let mut health = HealthClient::new(planner);
    let check = |tenant: &str, service: &str| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.into(),
        });
        request
            .metadata_mut()
            .insert("toolplane-tenant-id", tenant.parse().expect("ascii"));
        request
    };
    let serving = health
        .check(check("1", "story-generator"))
        .await
        .expect("granted");
    assert_eq!(serving.into_inner().status, 1);
    let refused = health
        .check(check("2", "story-generator"))
        .await
        .expect_err("refused");
    assert_refused(&refused, 2, PLANNER, "tenants 1");
    let server = health
        .check(check("2", ""))
        .await
        .expect("the server's own");
    assert_eq!(server.into_inner().status, 1);
    guarded.server.stop().await;
}

/// The MCP endpoint, served in TLS with the same client certificates, answers a request naming
/// a tenant the caller is granted and refuses one naming another with 403 and a JSON-RPC error
/// saying why.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_endpoint_checks_the_tenant_of_each_request() {
    let guarded = guarded().await;
    let client = |who: &Issued| guarded.ca.https_client(Some(who));
    let url = format!("https://127.0.0.1:{}/mcp", guarded.mcp.port());
    let list = |client: &reqwest::Client, tenant: &str| tools_list(client, &url, tenant).send();
    let channel = guarded.channel(&guarded.planner).await;
    let mut discovery = DiscoveryServiceClient::new(channel);
    register_ok(&mut discovery, 1, story_generator()).await;
    let planner = client(&guarded.planner);
    let granted = list(&planner, "1").await.expect("answered");
    assert_eq!(granted.status(), 200);
    let listed = granted.text().await.expect("a body");
    assert!(listed.contains("generate_structure"), "{listed}");
    let refused = list(&planner, "2").await.expect("answered");
    assert_eq!(refused.status(), 403);
    let body: serde_json::Value = refused.json().await.expect("a JSON-RPC error");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(message.contains("may not act for tenant 2"), "{message}");
    assert!(message.contains(PLANNER), "{message}");
    let operator = client(&guarded.operator);
    let granted = list(&operator, "2").await.expect("answered");
    assert_eq!(granted.status(), 200);
    let listed = granted.text().await.expect("a body");
    assert!(listed.contains(r#""tools":[]"#), "{listed}");
    guarded.server.stop().await;
}

/// grpcurl, presenting the planner's certificate, lists tenant 1's services and is refused
/// tenant 2's with PermissionDenied and the reason.
#[tokio::test(flavor = "multi_thread")]
async fn grpcurl_with_a_client_certificate_is_held_to_its_tenants() {
    let Some(grpcurl) = peer("venv/bin/grpcurl") else {
        return;
    };
    let guarded = guarded().await;
    let dir = guarded.dir.path();
    let (cert, key) = guarded.planner.write(dir, "planner");
    let ca = dir.join("ca.pem");
    let addr = guarded.server.addr.to_string();
    let call = |tenant: u64| {
        let grpcurl = grpcurl.clone();
        let (cert, key, ca, addr) = (cert.clone(), key.clone(), ca.clone(), addr.clone());
        tokio::task::spawn_blocking(move || run_grpcurl(&grpcurl, &ca, &cert, &key, &addr, tenant))
    };
    let (listed, stdout, stderr) = call(1).await.expect("grpcurl ran");
    assert!(listed, "{stdout}{stderr}");
    let (listed, stdout, stderr) = call(2).await.expect("grpcurl ran");
    assert!(!listed, "tenant 2 listed: {stdout}");
    assert!(stderr.contains("Code: PermissionDenied"), "{stderr}");
    assert!(stderr.contains("may not act for tenant 2"), "{stderr}");
    guarded.server.stop().await;
}

fn run_grpcurl(
    grpcurl: &Path,
    ca: &Path,
    cert: &Path,
    key: &Path,
    addr: &str,
    tenant: u64,
) -> (bool, String, String) {
    let output = Command::new(grpcurl)
        .arg("-cacert")
        .arg(ca)
        .arg("-cert")
        .arg(cert)
        .arg("-key")
        .arg(key)
        .args(["-d", &format!(r#"{{"meta": {{"tenant_id": {tenant}}}}}"#)])
        .args([addr, "toolplane.v1.DiscoveryService/ListServices"])
        .output()
        .expect("run grpcurl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Rules without client certificates asked for would leave every caller without an identity:
/// the server refuses to start and says which settings to set.
#[tokio::test]
async fn rules_without_client_certificates_do_not_serve() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let options = ServerOptions {
        tenant_access: rules(),
        ..test_options()
    };
    let served =
        toolplane::grpc::serve_with(listener, SideListeners::default(), options, async {}).await;
    let error = served.expect_err("refused");
    assert!(
        matches!(error, ServeError::TenantAccessWithoutClientCertificates),
        "{error}"
    );
    assert!(error.to_string().contains("tls_client_ca_file"), "{error}");
}

/// The planner's bearer token in the token tests.
const PLANNER_TOKEN: &str = "planner-token-5f1c";

/// Python's grpcio over mutual TLS: the certificate's tenant is listed and another refused
/// PERMISSION_DENIED with its ErrorInfo (read with grpcio-status); a bearer token sent as call
/// metadata adds its entry's tenant; an unknown token is UNAUTHENTICATED.
#[tokio::test(flavor = "multi_thread")]
async fn a_python_grpcio_client_is_held_to_its_certificate_and_token() {
    let Some(mut command) = peer_script(Runtime::Python, "python_tenant_access.py") else {
        return;
    };
    let ca = TestCa::new();
    let dir = tempfile::tempdir().expect("temporary directory");
    let tls = ca.served_to_clients(dir.path());
    let ca_file = tls
        .client_ca_file
        .clone()
        .expect("asks for client certificates");
    let rules = [
        TenantAccessRule {
            identity: PLANNER.to_owned(),
            tenants: vec![1],
            ..TenantAccessRule::default()
        },
        TenantAccessRule {
            token_env: "PLANNER_TOKEN".to_owned(),
            tenants: vec![2],
            ..TenantAccessRule::default()
        },
    ];
    let access = TenantAccess::from_rules_with(&rules, |_| Some(PLANNER_TOKEN.to_owned()))
        .expect("valid rules");
    let server = TestServer::start_with(ServerOptions {
        tls: Some(tls),
        tenant_access: access,
        ..test_options()
    })
    .await;
    let (client_cert, client_key) = ca.client_uri(PLANNER).write(dir.path(), "planner");
    command
        .arg(server.addr.to_string())
        .arg(proto_dir())
        .args([&ca_file, &client_cert, &client_key])
        .arg(PLANNER_TOKEN);
    let output = tokio::task::spawn_blocking(move || run_to_end(command, SCRIPT_LIMIT))
        .await
        .expect("ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("tenant access: 3 checks passed"),
        "{stdout}\n{stderr}"
    );
    server.stop().await;
}
