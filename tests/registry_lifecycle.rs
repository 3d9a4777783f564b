//! Register, heartbeat, deregister, get, ambiguity and tenant isolation through the real server.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tonic::Code;
use toolplane::pb;

/// A registration is stored whole, with hashes and a lease, and can be read back.
#[tokio::test(flavor = "multi_thread")]
async fn register_then_get_service_and_tool() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let answer = register_ok(&mut client, 1, story_generator()).await;
    assert!(uuid::Uuid::parse_str(&answer.lease_id).is_ok());
    assert_eq!(answer.tools.len(), 2);
    assert!(
        answer
            .tools
            .iter()
            .all(|t| t.definition_sha256.len() == 64 && t.service_name == "story-generator")
    );
    let meta = answer.meta.expect("meta on every response");
    assert_eq!(meta.correlation_id, "test-correlation");
    assert_eq!(meta.tenant_id, 1);

    let service = get_service(&mut client, 1, "story-generator")
        .await
        .expect("registered");
    assert_eq!(service.service_version, "0.0.1");
    assert_eq!(service.service_health, pb::HealthState::Healthy as i32);
    let names: Vec<_> = service
        .available_tools
        .iter()
        .map(|t| t.tool_name.as_str())
        .collect();
    assert_eq!(names, ["generate_nodes", "generate_structure"]);

    let tool = client
        .get_tool(pb::GetToolRequest {
            meta: meta_of(1),
            tool_name: "generate_nodes".into(),
            service_name: String::new(),
        })
        .await
        .expect("tool found")
        .into_inner()
        .tool
        .expect("tool set");
    assert_eq!(tool.service_name, "story-generator");
    assert_eq!(tool.capabilities, vec![pb::ServiceCapability::Retry as i32]);
    // Integral numbers in schemas come back as integers, not 8.0.
    let schema_json =
        toolplane::json::struct_to_json(tool.tool_schema.as_ref().expect("schema")).expect("json");
    assert_eq!(schema_json["properties"]["theme"]["type"], json!("string"));
}

fn meta_of(tenant: u64) -> Option<pb::Meta> {
    meta(tenant)
}

/// Heartbeats keep a lease alive past its TTL; a stale or unknown lease is NOT_FOUND.
#[tokio::test(flavor = "multi_thread")]
async fn heartbeat_renews_and_unknown_leases_are_not_found() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let answer = register_ok(
        &mut client,
        0,
        with_ttl(
            registration("svc", vec![simple_tool("t")]),
            Duration::from_millis(400),
        ),
    )
    .await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let beat = client
            .heartbeat(pb::HeartbeatRequest {
                meta: meta(0),
                service_name: "svc".into(),
                lease_id: answer.lease_id.clone(),
            })
            .await
            .expect("live lease renews")
            .into_inner();
        assert!(beat.expires_at.is_some());
    }
    assert!(
        get_service(&mut client, 0, "svc").await.is_ok(),
        "900 ms of heartbeats kept a 400 ms lease alive"
    );

    let unknown = client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: "svc".into(),
            lease_id: uuid::Uuid::new_v4().to_string(),
        })
        .await
        .expect_err("unknown lease");
    assert_eq!(unknown.code(), Code::NotFound);
    assert_eq!(reason(&unknown), "RESOURCE_LEASE_NOT_FOUND");

    // Registering again replaces the lease: the old one is stale.
    let again = register_ok(&mut client, 0, registration("svc", vec![simple_tool("t")])).await;
    assert_ne!(again.lease_id, answer.lease_id);
    let stale = client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: "svc".into(),
            lease_id: answer.lease_id.clone(),
        })
        .await
        .expect_err("stale lease");
    assert_eq!(stale.code(), Code::NotFound);

    let malformed = client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: "svc".into(),
            lease_id: "nope".into(),
        })
        .await
        .expect_err("malformed lease");
    assert_eq!(malformed.code(), Code::InvalidArgument);
}

/// A lapsed lease makes the service disappear, and a heartbeat after it is NOT_FOUND.
#[tokio::test(flavor = "multi_thread")]
async fn lapsed_lease_removes_the_service() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let answer = register_ok(
        &mut client,
        0,
        with_ttl(
            registration("short", vec![simple_tool("t")]),
            Duration::from_millis(200),
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let gone = get_service(&mut client, 0, "short")
        .await
        .expect_err("expired");
    assert_eq!(gone.code(), Code::NotFound);
    let late = client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: "short".into(),
            lease_id: answer.lease_id,
        })
        .await
        .expect_err("expired lease");
    assert_eq!(late.code(), Code::NotFound);
}

/// Deregistering removes the service and its tools at once; it needs the current lease.
#[tokio::test(flavor = "multi_thread")]
async fn deregister_removes_service_and_tools() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let answer = register_ok(
        &mut client,
        0,
        registration("svc", vec![simple_tool("a"), simple_tool("b")]),
    )
    .await;
    let wrong = deregister(&mut client, 0, "svc", uuid::Uuid::new_v4().to_string())
        .await
        .expect_err("wrong lease");
    assert_eq!(wrong.code(), Code::NotFound);
    assert!(
        get_service(&mut client, 0, "svc").await.is_ok(),
        "a failed deregister changes nothing"
    );

    deregister(&mut client, 0, "svc", answer.lease_id)
        .await
        .expect("deregistered");
    assert_eq!(
        get_service(&mut client, 0, "svc")
            .await
            .expect_err("gone")
            .code(),
        Code::NotFound
    );
    let tools = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert!(tools.tools.is_empty());
}

/// A tool name offered by two services is ambiguous without service_name, and the error lists both.
#[tokio::test(flavor = "multi_thread")]
async fn ambiguous_tool_names_list_the_candidates() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(
        &mut client,
        0,
        registration("alpha", vec![simple_tool("shared")]),
    )
    .await;
    register_ok(
        &mut client,
        0,
        registration("beta", vec![simple_tool("shared")]),
    )
    .await;
    let error = client
        .get_tool(pb::GetToolRequest {
            meta: meta(0),
            tool_name: "shared".into(),
            service_name: String::new(),
        })
        .await
        .expect_err("ambiguous");
    assert_eq!(error.code(), Code::FailedPrecondition);
    assert_eq!(reason(&error), "RESOURCE_AMBIGUOUS");
    use tonic_types::StatusExt;
    let details = error.get_error_details();
    assert_eq!(
        details
            .error_info()
            .expect("info")
            .metadata
            .get("candidates")
            .map(String::as_str),
        Some("alpha,beta")
    );
    assert_eq!(
        details
            .precondition_failure()
            .expect("precondition failure")
            .violations
            .len(),
        2
    );

    let picked = client
        .get_tool(pb::GetToolRequest {
            meta: meta(0),
            tool_name: "shared".into(),
            service_name: "beta".into(),
        })
        .await
        .expect("named service picks one")
        .into_inner();
    assert_eq!(picked.tool.expect("tool").service_name, "beta");

    let missing = client
        .get_tool(pb::GetToolRequest {
            meta: meta(0),
            tool_name: "nope".into(),
            service_name: String::new(),
        })
        .await
        .expect_err("missing");
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(reason(&missing), "RESOURCE_NOT_FOUND");
}

/// One tenant never sees, lists, gets, watches or preflights another tenant's services.
#[tokio::test(flavor = "multi_thread")]
async fn tenants_are_isolated() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let answer = register_ok(
        &mut client,
        1,
        registration("private", vec![simple_tool("secret")]),
    )
    .await;
    assert_eq!(
        get_service(&mut client, 2, "private")
            .await
            .expect_err("other tenant")
            .code(),
        Code::NotFound
    );
    let listed = client
        .list_services(pb::ListServicesRequest {
            meta: meta(2),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert!(listed.services.is_empty());
    let tools = client
        .list_tools(pb::ListToolsRequest {
            meta: meta(2),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert!(tools.tools.is_empty());
    let preflight = client
        .preflight(pb::PreflightRequest {
            meta: meta(2),
            requirements: vec![pb::ServiceRequirement {
                service_name: "private".into(),
                tool_names: vec!["secret".into()],
                optional: false,
            }],
        })
        .await
        .expect("preflight answers")
        .into_inner();
    assert!(!preflight.ok);
    let heartbeat = client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(2),
            service_name: "private".into(),
            lease_id: answer.lease_id.clone(),
        })
        .await
        .expect_err("another tenant cannot heartbeat it");
    assert_eq!(heartbeat.code(), Code::NotFound);

    // The same name in another tenant is a separate service.
    register_ok(
        &mut client,
        2,
        registration("private", vec![simple_tool("other")]),
    )
    .await;
    let first = get_service(&mut client, 1, "private")
        .await
        .expect("tenant 1 keeps its own");
    assert_eq!(first.available_tools[0].tool_name, "secret");
}
