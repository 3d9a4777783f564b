//! Health: toolplane.v1.HealthService, and grpc.health.v1 with the spec's Check and Watch
//! semantics.

use super::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// HealthService reports the control plane and each live service; unknown is NOT_FOUND.
#[tokio::test(flavor = "multi_thread")]
async fn toolplane_health_service() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    register_ok(&mut client, 0, story_generator()).await;
    let mut health = pb::health_service_client::HealthServiceClient::new(server.channel().await);
    let plane = health
        .get_service_health(pb::GetServiceHealthRequest {
            meta: meta(0),
            service_name: String::new(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(plane.status, pb::HealthState::Healthy as i32);
    assert_eq!(plane.tools_count, 2);
    let service = health
        .get_service_health(pb::GetServiceHealthRequest {
            meta: meta(0),
            service_name: "story-generator".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(service.status, pb::HealthState::Healthy as i32);
    assert_eq!(service.tools, ["generate_nodes", "generate_structure"]);
    let unknown = health
        .get_service_health(pb::GetServiceHealthRequest {
            meta: meta(0),
            service_name: "nobody".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound);
}

fn check_request(service: &str, tenant: u64) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.into(),
    });
    request.metadata_mut().insert(
        "toolplane-tenant-id",
        tenant.to_string().parse().expect("ascii"),
    );
    request
}

async fn next_status(
    stream: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
) -> ServingStatus {
    let message = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("status arrives")
        .expect("stream ok")
        .expect("stream open");
    ServingStatus::try_from(message.status).expect("known status")
}

/// grpc.health.v1 Check: server names SERVING, live services SERVING, gone ones
/// SERVICE_UNKNOWN, never-seen names NOT_FOUND.
#[tokio::test(flavor = "multi_thread")]
async fn standard_health_check() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut health = HealthClient::new(server.channel().await);
    for name in [
        "",
        "toolplane.v1.DiscoveryService",
        "toolplane.v1.HealthService",
    ] {
        let status = health
            .check(check_request(name, 0))
            .await
            .expect("server name known")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{name:?}");
    }
    let lease = register_ok(&mut client, 5, registration("svc", vec![simple_tool("t")]))
        .await
        .lease_id;
    assert_eq!(
        health
            .check(check_request("svc", 5))
            .await
            .expect("live")
            .into_inner()
            .status,
        ServingStatus::Serving as i32
    );
    assert_eq!(
        health
            .check(check_request("svc", 6))
            .await
            .expect_err("other tenant never saw it")
            .code(),
        Code::NotFound
    );
    deregister(&mut client, 5, "svc", lease)
        .await
        .expect("deregister");
    assert_eq!(
        health
            .check(check_request("svc", 5))
            .await
            .expect("seen before")
            .into_inner()
            .status,
        ServingStatus::ServiceUnknown as i32
    );
    assert_eq!(
        health
            .check(check_request("never-seen", 5))
            .await
            .expect_err("never seen")
            .code(),
        Code::NotFound
    );
}

/// grpc.health.v1 Check remembers a bounded number of gone names (`gone_services_remembered`,
/// across tenants): the one that went longest ago is forgotten first and reads NOT_FOUND again.
#[tokio::test(flavor = "multi_thread")]
async fn standard_health_forgets_the_oldest_gone_names_beyond_the_bound() {
    let mut options = test_options();
    options.gone_services_remembered = 2;
    let server = TestServer::start_with(options).await;
    let mut client = server.discovery().await;
    let mut health = HealthClient::new(server.channel().await);
    for (tenant, name) in [(1, "first"), (2, "second"), (1, "third")] {
        let lease = register_ok(
            &mut client,
            tenant,
            registration(name, vec![simple_tool("t")]),
        )
        .await
        .lease_id;
        deregister(&mut client, tenant, name, lease)
            .await
            .expect("deregister");
    }
    let check = |name: &'static str, tenant: u64| {
        let mut health = health.clone();
        async move { health.check(check_request(name, tenant)).await }
    };
    assert_eq!(
        check("first", 1).await.expect_err("forgotten").code(),
        Code::NotFound
    );
    for (name, tenant) in [("second", 2), ("third", 1)] {
        assert_eq!(
            check(name, tenant)
                .await
                .expect("remembered")
                .into_inner()
                .status,
            ServingStatus::ServiceUnknown as i32,
            "{name}"
        );
    }
    // Registering a gone name again takes it out of the gone names: it is live.
    register_ok(
        &mut client,
        2,
        registration("second", vec![simple_tool("t")]),
    )
    .await;
    assert_eq!(
        health
            .check(check_request("second", 2))
            .await
            .expect("live")
            .into_inner()
            .status,
        ServingStatus::Serving as i32
    );
}

/// grpc.health.v1 Watch: unknown names get SERVICE_UNKNOWN with the stream kept open, then
/// every change; shutdown turns the server's own status NOT_SERVING.
#[tokio::test(flavor = "multi_thread")]
async fn standard_health_watch() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut health = HealthClient::new(server.channel().await);

    let mut later = health
        .watch(check_request("later", 0))
        .await
        .expect("watch unknown")
        .into_inner();
    assert_eq!(next_status(&mut later).await, ServingStatus::ServiceUnknown);
    register_ok(
        &mut client,
        0,
        with_ttl(
            registration("later", vec![simple_tool("t")]),
            Duration::from_millis(300),
        ),
    )
    .await;
    assert_eq!(next_status(&mut later).await, ServingStatus::Serving);
    assert_eq!(
        next_status(&mut later).await,
        ServingStatus::ServiceUnknown,
        "lease lapsed"
    );

    let mut own = health
        .watch(check_request("", 0))
        .await
        .expect("watch server")
        .into_inner();
    assert_eq!(next_status(&mut own).await, ServingStatus::Serving);
    let stopping = tokio::spawn(server.stop());
    assert_eq!(next_status(&mut own).await, ServingStatus::NotServing);
    stopping
        .await
        .expect("server stops within its grace period");
}
