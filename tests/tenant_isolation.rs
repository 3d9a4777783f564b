//! One tenant's services, tools, invocation records and agents, asked for by another tenant
//! through every RPC that names them: each is NOT_FOUND (or an empty list) to the stranger,
//! and nothing the stranger asks changes them.

use crate::common;

use std::time::Duration;

use common::agent_fixture::*;
use common::invoke_fixture::*;
use common::*;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::Code;
use toolplane::pb;
use toolplane::pb::health_service_client::HealthServiceClient;

/// The tenant the provider, the agent and the calls belong to (the fixture's).
const OWNER: u64 = 0;
/// Another tenant, granted nothing of the owner's.
const STRANGER: u64 = 7;

/// Asserts that `answer` is NOT_FOUND, saying which RPC it came from.
fn assert_not_found<T: std::fmt::Debug>(rpc: &str, answer: Result<T, tonic::Status>) {
    match answer {
        Err(status) => assert_eq!(status.code(), Code::NotFound, "{rpc}: {status:?}"),
        Ok(found) => panic!("{rpc} found the owner's for a stranger: {found:?}"),
    }
}

/// The stranger finds none of the owner's services or tools, and cannot renew or end the
/// owner's lease; a watch of its own is told nothing of the owner's changes.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_finds_none_of_another_tenants_services() {
    let setup = setup().await;
    let mut discovery = setup.server.discovery().await;
    let owned = register_ok(
        &mut discovery,
        OWNER,
        registration("owned", vec![simple_tool("owned_tool")]),
    )
    .await;
    let mut watch = discovery
        .watch_services(pb::WatchServicesRequest {
            meta: meta(STRANGER),
            ..Default::default()
        })
        .await
        .expect("the stranger watches its own tenant")
        .into_inner();

    for service in ["testing", "owned"] {
        assert_not_found(
            "GetService",
            get_service(&mut discovery, STRANGER, service).await,
        );
        let health = HealthServiceClient::new(setup.server.channel().await)
            .get_service_health(pb::GetServiceHealthRequest {
                meta: meta(STRANGER),
                service_name: service.into(),
            })
            .await;
        assert_not_found("GetServiceHealth", health);
    }
    let tool = discovery
        .get_tool(pb::GetToolRequest {
            meta: meta(STRANGER),
            tool_name: "echo".into(),
            service_name: "testing".into(),
        })
        .await;
    assert_not_found("GetTool", tool);
    let tools = (discovery.list_tools(pb::ListToolsRequest {
        meta: meta(STRANGER),
        ..Default::default()
    }))
    .await
    .expect("ListTools")
    .into_inner();
    assert!(tools.tools.is_empty(), "{tools:?}");
    let services = (discovery.list_services(pb::ListServicesRequest {
        meta: meta(STRANGER),
        ..Default::default()
    }))
    .await
    .expect("ListServices")
    .into_inner();
    assert!(services.services.is_empty(), "{services:?}");
    for query in ["echo", "owned_tool", "returns its input"] {
        let found = (discovery.search_tools(pb::SearchToolsRequest {
            meta: meta(STRANGER),
            query: query.into(),
            ..Default::default()
        }))
        .await
        .expect("SearchTools")
        .into_inner();
        assert!(found.matches.is_empty(), "{query}: {found:?}");
    }
    let heartbeat = discovery
        .heartbeat(pb::HeartbeatRequest {
            meta: meta(STRANGER),
            service_name: "owned".into(),
            lease_id: owned.lease_id.clone(),
        })
        .await;
    assert_not_found("Heartbeat", heartbeat);
    assert_not_found(
        "DeregisterService",
        deregister(&mut discovery, STRANGER, "owned", owned.lease_id.clone()).await,
    );

    // The owner's services are as they were; the owner's changes are not the stranger's news.
    for service in ["testing", "owned"] {
        get_service(&mut discovery, OWNER, service)
            .await
            .unwrap_or_else(|status| panic!("the owner lost {service}: {status:?}"));
    }
    deregister(&mut discovery, OWNER, "owned", owned.lease_id)
        .await
        .expect("the owner ends its own lease");
    register_ok(
        &mut discovery,
        STRANGER,
        registration("strangers-own", vec![simple_tool("own_tool")]),
    )
    .await;
    let mut heard = Vec::new();
    while heard.last().is_none_or(|(_, name)| name != "strangers-own") {
        let next = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("the stranger's watch hears of its own registration")
            .expect("the stream is open")
            .expect("an event");
        let event = next.event.expect("an event");
        heard.push((event.r#type, event.service_name));
    }
    let synced = pb::ServiceEventType::Synced as i32;
    let added = pb::ServiceEventType::Added as i32;
    assert_eq!(
        heard,
        [(synced, String::new()), (added, "strangers-own".to_owned())],
        "an empty snapshot, then the stranger's own change and none of the owner's"
    );
}

/// The stranger can neither call nor check the owner's tools, and sees none of the owner's
/// invocation records; the owner's records stay as they were.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_calls_and_reads_none_of_another_tenants_invocations() {
    let setup = setup().await;
    let mut invoke = invoker(&setup.server).await;
    let called = invoke
        .invoke_tool(request("echo", json!({"said": "mine"})))
        .await
        .expect("the owner calls its tool")
        .into_inner()
        .record
        .expect("its record");
    let owner_records = records(&mut invoke, "echo").await;
    assert_eq!(owner_records.len(), 1);

    let mut as_stranger = request("echo", json!({"said": "theirs"}));
    as_stranger.meta = meta(STRANGER);
    assert_not_found("InvokeTool", invoke.invoke_tool(as_stranger).await);
    let validated = invoke
        .validate_tool_input(pb::ValidateToolInputRequest {
            meta: meta(STRANGER),
            tool_name: "echo".into(),
            service_name: "testing".into(),
            input: toolplane::json::json_to_struct(&json!({})),
        })
        .await;
    assert_not_found("ValidateToolInput", validated);
    assert_not_found(
        "GetInvocationRecord",
        get_record(&setup.server, STRANGER, &called.invocation_id).await,
    );
    for tool in ["", "echo"] {
        let listed = (invoke.list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(STRANGER),
            tool_name: tool.into(),
            ..Default::default()
        }))
        .await
        .expect("ListInvocationRecords")
        .into_inner();
        // The stranger's own refused call is its only record.
        assert!(
            (listed.records.iter()).all(|record| record.invocation_id != called.invocation_id),
            "{tool:?}: {listed:?}"
        );
        assert!(listed.records.len() <= 1, "{tool:?}: {listed:?}");
    }
    assert_eq!(records(&mut invoke, "echo").await, owner_records);
    assert_eq!(
        setup
            .probes
            .echo_calls
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// The stranger finds none of the owner's agents, by id or by name, and can neither run,
/// read, move nor delete one; the owner's agent and its messages stay, and the stranger may
/// have an agent of the same name of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_finds_none_of_another_tenants_agents() {
    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    let agent = create(&mut client, "planner", &[]).await;
    let id = agent.status.expect("a status").id;
    (client.complete(complete_request(&id, "hello", "owner-turn")))
        .await
        .expect("the owner's turn");
    let said = messages(&mut client, &id).await;
    assert!(!said.is_empty());

    for asked in [id.as_str(), "planner"] {
        let got = client
            .get_agent(pb::GetAgentRequest {
                meta: meta(STRANGER),
                agent_id: asked.into(),
            })
            .await;
        assert_not_found("GetAgent", got);
        let mut turn = complete_request(asked, "let me in", "stranger-turn");
        turn.meta = meta(STRANGER);
        assert_not_found("Complete", client.complete(turn).await);
        let streamed = client
            .stream_complete(pb::StreamCompleteRequest {
                meta: meta(STRANGER),
                agent_id: asked.into(),
                request: Some(pb::ChatCompletionRequest {
                    messages: vec![user("let me in")],
                    ..Default::default()
                }),
            })
            .await;
        let streamed = match streamed {
            Ok(stream) => stream.into_inner().next().await.expect("an answer"),
            Err(status) => Err(status),
        };
        assert_not_found("StreamComplete", streamed);
        let read = client
            .list_messages(pb::ListMessagesRequest {
                meta: meta(STRANGER),
                agent_id: asked.into(),
                ..Default::default()
            })
            .await;
        assert_not_found("ListMessages", read);
        let moved = client
            .transition_agent(pb::TransitionAgentRequest {
                meta: meta(STRANGER),
                agent_id: asked.into(),
                to: pb::AgentState::Thinking as i32,
            })
            .await;
        assert_not_found("TransitionAgent", moved);
        let deleted = client
            .delete_agent(pb::DeleteAgentRequest {
                meta: meta(STRANGER),
                agent_id: asked.into(),
            })
            .await;
        assert_not_found("DeleteAgent", deleted);
    }
    let listed = (client.list_agents(pb::ListAgentsRequest {
        meta: meta(STRANGER),
        ..Default::default()
    }))
    .await
    .expect("ListAgents")
    .into_inner();
    assert!(listed.agents.is_empty(), "{listed:?}");

    let kept = get(&mut client, &id).await;
    assert_eq!(state_of(&kept), pb::AgentState::Idle as i32);
    assert_eq!(messages(&mut client, &id).await, said);
    let own = client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(STRANGER),
            name: "planner".into(),
            ..Default::default()
        })
        .await
        .expect("the stranger names an agent of its own alike")
        .into_inner()
        .agent
        .expect("an agent");
    assert_ne!(own.status.expect("a status").id, id);
}
