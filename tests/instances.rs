//! Replicas of one provider registering one service with instance ids: leases side by side,
//! the service gone only with its last instance, watch events, the instance quota, and calls
//! spread over the live instances (passing over one gone without deregistering, and one
//! failing its health checks), with real provider servers.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::invoke_fixture::{Probes, invoker, request, test_tools};
use common::provider::TestProvider;
use common::*;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::ServiceEventType as Kind;
use toolplane::pb::discovery_service_client::DiscoveryServiceClient;
use toolplane::provider::ProviderConfig;
use toolplane::registry::RegistrationLimits;

const SERVICE: &str = "replicated";

fn replica(id: &str, endpoint: &str, ttl: Duration) -> pb::ServiceRegistration {
    let mut registration = with_ttl(registration(SERVICE, vec![simple_tool("work")]), ttl);
    registration.instance_id = id.to_owned();
    registration.endpoint = endpoint.to_owned();
    registration
}

async fn heartbeat(
    client: &mut DiscoveryServiceClient<Channel>,
    lease_id: &str,
) -> Result<(), tonic::Status> {
    client
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(0),
            service_name: SERVICE.to_owned(),
            lease_id: lease_id.to_owned(),
        })
        .await
        .map(drop)
}

/// (instance id, endpoint) of each live instance, as GetService lists them.
async fn instances(client: &mut DiscoveryServiceClient<Channel>) -> Vec<(String, String)> {
    get_service(client, 0, SERVICE)
        .await
        .expect("service live")
        .instances
        .into_iter()
        .map(|instance| (instance.instance_id, instance.endpoint))
        .collect()
}

fn pair(id: &str, endpoint: &str) -> (String, String) {
    (id.to_owned(), endpoint.to_owned())
}

/// Two replicas heartbeat their own leases (neither takes the other's turn, as registrations
/// without ids would); one re-registering replaces only itself; the service goes with the last.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_hold_leases_side_by_side_and_the_service_goes_with_the_last() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let ttl = Duration::from_secs(30);
    let a = register_ok(
        &mut client,
        0,
        replica("pod-a", "http://10.0.0.1:7001", ttl),
    )
    .await;
    let mut events = watch(&mut client, 0, SERVICE).await;
    assert_eq!(next_event(&mut events).await.r#type, Kind::Added as i32);
    assert_eq!(next_event(&mut events).await.r#type, Kind::Synced as i32);

    let b = register_ok(
        &mut client,
        0,
        replica("pod-b", "http://10.0.0.2:7001", ttl),
    )
    .await;
    let joined = next_event(&mut events).await;
    assert_eq!(joined.r#type, Kind::Updated as i32);
    assert!(joined.tool_changes.is_empty(), "{joined:?}");
    assert_eq!(joined.service.expect("service").instances.len(), 2);
    for lease in [&a.lease_id, &b.lease_id, &a.lease_id] {
        heartbeat(&mut client, lease)
            .await
            .expect("each replica's lease is its own");
    }
    let info = get_service(&mut client, 0, SERVICE).await.expect("live");
    assert_eq!(
        info.endpoint, "http://10.0.0.2:7001",
        "the most recent registration's"
    );
    assert_eq!(
        instances(&mut client).await,
        [
            pair("pod-a", "http://10.0.0.1:7001"),
            pair("pod-b", "http://10.0.0.2:7001")
        ]
    );
    for instance in &info.instances {
        assert_eq!(instance.health, pb::HealthState::Healthy as i32);
        assert!(instance.expires_at.is_some() && instance.registered_at.is_some());
    }

    // pod-a restarts at a new address: it replaces its own instance, not pod-b's.
    let a2 = register_ok(
        &mut client,
        0,
        replica("pod-a", "http://10.0.0.3:7001", ttl),
    )
    .await;
    let status = heartbeat(&mut client, &a.lease_id)
        .await
        .expect_err("replaced");
    assert_eq!(status.code(), Code::NotFound);
    heartbeat(&mut client, &a2.lease_id)
        .await
        .expect("the new lease");
    heartbeat(&mut client, &b.lease_id)
        .await
        .expect("pod-b untouched");
    assert_eq!(
        instances(&mut client).await,
        [
            pair("pod-a", "http://10.0.0.3:7001"),
            pair("pod-b", "http://10.0.0.2:7001")
        ]
    );
    assert_eq!(next_event(&mut events).await.r#type, Kind::Updated as i32);

    deregister(&mut client, 0, SERVICE, b.lease_id.clone())
        .await
        .expect("pod-b leaves");
    let left = next_event(&mut events).await;
    assert_eq!(left.r#type, Kind::Updated as i32, "the service stays");
    assert_eq!(left.service.expect("service").instances.len(), 1);
    assert_eq!(
        instances(&mut client).await,
        [pair("pod-a", "http://10.0.0.3:7001")]
    );
    let status = deregister(&mut client, 0, SERVICE, b.lease_id.clone())
        .await
        .expect_err("already gone");
    assert_eq!(status.code(), Code::NotFound);

    deregister(&mut client, 0, SERVICE, a2.lease_id.clone())
        .await
        .expect("the last leaves");
    assert_eq!(next_event(&mut events).await.r#type, Kind::Removed as i32);
    let status = get_service(&mut client, 0, SERVICE)
        .await
        .expect_err("gone");
    assert_eq!(status.code(), Code::NotFound);
}

/// A replica that stops heartbeating leaves when its lease lapses; the service stays with the
/// other, and expires only when that one's lease lapses too.
#[tokio::test(flavor = "multi_thread")]
async fn a_lapsed_instance_leaves_and_the_service_expires_with_the_last() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let mut events = watch(&mut client, 0, SERVICE).await;
    assert_eq!(next_event(&mut events).await.r#type, Kind::Synced as i32);
    register_ok(
        &mut client,
        0,
        replica("short", "", Duration::from_millis(300)),
    )
    .await;
    register_ok(
        &mut client,
        0,
        replica("long", "", Duration::from_millis(1500)),
    )
    .await;
    assert_eq!(next_event(&mut events).await.r#type, Kind::Added as i32);
    assert_eq!(next_event(&mut events).await.r#type, Kind::Updated as i32);

    let left = next_event(&mut events).await;
    assert_eq!(left.r#type, Kind::Updated as i32, "{left:?}");
    let remaining = left.service.expect("service").instances;
    assert_eq!(remaining.len(), 1);
    assert_eq!(remaining[0].instance_id, "long");
    assert_eq!(instances(&mut client).await, [pair("long", "")]);

    let expired = next_event(&mut events).await;
    assert_eq!(expired.r#type, Kind::Expired as i32, "{expired:?}");
    assert_eq!(
        get_service(&mut client, 0, SERVICE)
            .await
            .expect_err("gone")
            .code(),
        Code::NotFound
    );
}

/// Past max_instances_per_service a new instance is refused with QuotaFailure; replacing a
/// live instance still works. A bad instance id is INVALID_ARGUMENT naming the field.
#[tokio::test(flavor = "multi_thread")]
async fn the_instance_quota_and_bad_instance_ids() {
    let server = TestServer::start_with(ServerOptions {
        limits: RegistrationLimits {
            max_instances_per_service: 2,
            ..test_options().limits
        },
        ..test_options()
    })
    .await;
    let mut client = server.discovery().await;
    let ttl = Duration::from_secs(30);
    register_ok(&mut client, 0, replica("a", "", ttl)).await;
    register_ok(&mut client, 0, replica("b", "", ttl)).await;
    let status = register(&mut client, 0, replica("c", "", ttl))
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_instances_per_service"),
        "{}",
        status.message()
    );
    use tonic_types::StatusExt;
    let quota = status.get_error_details().quota_failure().cloned();
    assert_eq!(
        quota.expect("QuotaFailure").violations[0].subject,
        "tenants/0/services/replicated/instances"
    );
    register_ok(&mut client, 0, replica("b", "", ttl)).await;
    assert_eq!(
        instances(&mut client).await.len(),
        2,
        "nothing half-changed"
    );

    let status = register(&mut client, 0, replica("no spaces", "", ttl))
        .await
        .expect_err("bad id");
    assert_eq!(status.code(), Code::InvalidArgument);
    let fields: Vec<String> = violations(&status).into_iter().map(|(f, _)| f).collect();
    assert_eq!(fields, ["registration.instance_id"]);
}

fn versioned(id: &str, version: &str, tools: Vec<pb::ToolRegistration>) -> pb::ServiceRegistration {
    let mut registration = replica(id, "", Duration::from_secs(30));
    registration.service_version = version.to_owned();
    registration.tools = tools;
    registration
}

/// During a rolling update the service offers the highest version's tools, whoever registered
/// last (a restarted replica of the old version does not turn it back), and goes back to the
/// old version's when the last replica of the new one leaves; watchers see each change.
#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_update_offers_the_highest_version_and_rolls_back_when_it_leaves() {
    let server = TestServer::start().await;
    let mut client = server.discovery().await;
    let old_work = tool("work", json!({"type": "object"}));
    let new_work = tool("work", json!({"type": "object", "required": ["size"]}));
    register_ok(
        &mut client,
        0,
        versioned("old-1", "1.0.0", vec![old_work.clone()]),
    )
    .await;
    let mut events = watch(&mut client, 0, SERVICE).await;
    assert_eq!(next_event(&mut events).await.r#type, Kind::Added as i32);
    assert_eq!(next_event(&mut events).await.r#type, Kind::Synced as i32);
    let changed = |event: &pb::ServiceEvent| -> Vec<String> {
        event
            .tool_changes
            .iter()
            .map(|change| change.tool_name.clone())
            .collect()
    };

    let new = register_ok(
        &mut client,
        0,
        versioned(
            "new-1",
            "1.1.0",
            vec![simple_tool("extra"), new_work.clone()],
        ),
    )
    .await;
    let upgraded = next_event(&mut events).await;
    assert_eq!(changed(&upgraded), ["extra", "work"]);
    let info = get_service(&mut client, 0, SERVICE).await.expect("live");
    assert_eq!(info.service_version, "1.1.0");
    assert_eq!(info.available_tools.len(), 2);

    register_ok(
        &mut client,
        0,
        versioned("old-2", "1.0.0", vec![old_work.clone()]),
    )
    .await;
    let joined = next_event(&mut events).await;
    assert_eq!(joined.r#type, Kind::Updated as i32);
    assert!(changed(&joined).is_empty(), "{joined:?}");
    let info = get_service(&mut client, 0, SERVICE).await.expect("live");
    assert_eq!(
        info.service_version, "1.1.0",
        "an old replica does not turn it back"
    );
    assert_eq!(info.instances.len(), 3);

    deregister(&mut client, 0, SERVICE, new.lease_id)
        .await
        .expect("the new replica leaves");
    let rolled_back = next_event(&mut events).await;
    assert_eq!(rolled_back.r#type, Kind::Updated as i32);
    assert_eq!(changed(&rolled_back), ["extra", "work"]);
    let info = get_service(&mut client, 0, SERVICE).await.expect("live");
    assert_eq!(info.service_version, "1.0.0");
    assert_eq!(info.available_tools.len(), 1);
}

async fn start_replica(server: &TestServer, id: &str, probes: &Arc<Probes>) -> TestProvider {
    let mut config = ProviderConfig::new(SERVICE, "1.0.0", &server.endpoint());
    config.ttl = Duration::from_secs(5);
    config.instance_id = id.to_owned();
    TestProvider::start_with(test_tools(probes), config).await
}

/// Calls take turns over two real provider replicas; a replica failing its health checks
/// takes no calls while the other does.
#[tokio::test(flavor = "multi_thread")]
async fn calls_are_spread_over_live_healthy_instances() {
    let server = TestServer::start_with(ServerOptions {
        provider_health_interval: Duration::from_millis(100),
        ..test_options()
    })
    .await;
    let (one, two) = (Arc::new(Probes::default()), Arc::new(Probes::default()));
    let replica_one = start_replica(&server, "one", &one).await;
    let replica_two = start_replica(&server, "two", &two).await;
    let mut discovery = server.discovery().await;
    eventually("both replicas register", || {
        let mut discovery = discovery.clone();
        async move {
            get_service(&mut discovery, 0, SERVICE)
                .await
                .is_ok_and(|info| info.instances.len() == 2)
        }
    })
    .await;

    let mut client = invoker(&server).await;
    for n in 0..10 {
        client
            .invoke_tool(request("echo", json!({"n": n})))
            .await
            .expect("answered");
    }
    let calls = |probes: &Probes| probes.echo_calls.load(Ordering::SeqCst);
    assert_eq!((calls(&one), calls(&two)), (5, 5), "in turn");

    // Replica one fails its health checks: calls go to replica two only, and the service
    // stays HEALTHY while one instance passes.
    replica_one.health.set_serving(false).await;
    let endpoint_one = format!("http://{}", replica_one.addr);
    eventually("replica one is marked unhealthy", || {
        let mut discovery = discovery.clone();
        let endpoint_one = endpoint_one.clone();
        async move {
            let info = get_service(&mut discovery, 0, SERVICE).await.expect("live");
            info.instances.iter().any(|instance| {
                instance.endpoint == endpoint_one
                    && instance.health == pb::HealthState::Unhealthy as i32
            })
        }
    })
    .await;
    let info = get_service(&mut discovery, 0, SERVICE).await.expect("live");
    assert_eq!(info.service_health, pb::HealthState::Healthy as i32);
    let before = (calls(&one), calls(&two));
    assert_eq!(before.0 + before.1, 10);
    for n in 0..4 {
        client
            .invoke_tool(request("echo", json!({"n": n})))
            .await
            .expect("answered by replica two");
    }
    assert_eq!((calls(&one), calls(&two)), (before.0, before.1 + 4));

    replica_one.stop().await;
    replica_two.stop().await;
    server.stop().await;
}

/// A replica registered at an address where nothing listens (one gone without deregistering)
/// is passed over without failing a call, and marked failing at once, before any health check
/// runs (this server runs none), so the calls after it go straight to the live replica.
#[tokio::test(flavor = "multi_thread")]
async fn a_vanished_replica_is_passed_over_and_marked_failing() {
    let server = TestServer::start().await;
    let probes = Arc::new(Probes::default());
    let live = start_replica(&server, "live", &probes).await;
    let mut discovery = server.discovery().await;
    wait_registered(&server, SERVICE).await;
    let vanished = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let dead = format!("http://{}", vanished.local_addr().expect("address"));
    drop(vanished);
    let info = get_service(&mut discovery, 0, SERVICE).await.expect("live");
    let registration = pb::ServiceRegistration {
        service_name: SERVICE.to_owned(),
        service_version: info.service_version,
        endpoint: dead.clone(),
        tools: info.available_tools,
        ttl: Some(Duration::from_secs(30).try_into().expect("fits")),
        instance_id: "vanished".to_owned(),
    };
    register_ok(&mut discovery, 0, registration).await;
    assert_eq!(instances(&mut discovery).await.len(), 2);

    let mut client = invoker(&server).await;
    for n in 0..6 {
        let answer = client
            .invoke_tool(request("echo", json!({"n": n})))
            .await
            .expect("answered by the live replica")
            .into_inner();
        assert_eq!(answer.record.expect("record").attempts, 1);
    }
    assert_eq!(probes.echo_calls.load(Ordering::SeqCst), 6);
    let info = get_service(&mut discovery, 0, SERVICE).await.expect("live");
    let health_of = |endpoint: &str| {
        info.instances
            .iter()
            .find(|instance| instance.endpoint == endpoint)
            .map(|instance| instance.health)
    };
    assert_eq!(health_of(&dead), Some(pb::HealthState::Unhealthy as i32));
    assert_eq!(
        health_of(&format!("http://{}", live.addr)),
        Some(pb::HealthState::Healthy as i32)
    );
    assert_eq!(info.service_health, pb::HealthState::Healthy as i32);
    live.stop().await;
    server.stop().await;
}
