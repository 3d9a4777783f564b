//! AgentService through the real server, with real provider servers: live state during a
//! turn and a busy agent, cancellation mid-loop, manual transitions and bad input.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::agent_fixture::*;
use common::provider::TestProvider;
use common::*;
use serde_json::json;
use tokio::sync::Notify;
use tonic::Code;
use tonic::transport::Channel;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;
use toolplane::provider::{
    ToolDescriptor, ToolError, ToolInvocation, ToolOutput, ToolRegistry, handler,
};

use pb::AgentState as State;

/// A provider whose one tool waits until the test lets it go.
async fn gated_provider(server: &TestServer, gate: Arc<Notify>) -> TestProvider {
    let tools = ToolRegistry::new()
        .register(
            ToolDescriptor::new("wait_for_gate", "Answers once the test opens the gate", json!({"type": "object"})).timeout_ms(30_000),
            handler(move |call: ToolInvocation| {
                let gate = Arc::clone(&gate);
                async move {
                    tokio::select! {
                        () = gate.notified() => Ok(ToolOutput::new(json!({"opened": true}))),
                        () = call.context.cancelled() => Err(ToolError::new("TOOL_CANCELLED", "cancelled")),
                    }
                }
            }),
        )
        .expect("valid tool")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), "gated", Duration::from_secs(5)).await;
    wait_registered(server, "gated").await;
    provider
}

async fn wait_for_state(client: &AgentServiceClient<Channel>, agent: &str, state: State) {
    eventually(&format!("agent {agent} reaches {state:?}"), || {
        let mut client = client.clone();
        let agent = agent.to_owned();
        async move { state_of(&get(&mut client, &agent).await) == state as i32 }
    })
    .await;
}

/// GetAgent shows the live state during a turn, and a second Complete is refused, not interleaved.
#[tokio::test(flavor = "multi_thread")]
async fn live_state_and_busy_agent() {
    let server = TestServer::start().await;
    let gate = Arc::new(Notify::new());
    let _provider = gated_provider(&server, Arc::clone(&gate)).await;
    let mut client = agents(&server).await;
    create(&mut client, "worker", &[]).await;

    let mut first_client = client.clone();
    let first = tokio::spawn(async move {
        first_client
            .complete(complete_request("worker", "call wait_for_gate", "first"))
            .await
    });
    wait_for_state(&client, "worker", State::ToolCall).await;
    let live = get(&mut client, "worker").await;
    assert!(live.busy);

    let second = client
        .complete(complete_request("worker", "hello", "second"))
        .await
        .expect_err("busy");
    assert_eq!(second.code(), Code::FailedPrecondition);
    assert_eq!(reason(&second), "AGENT_BUSY");
    let deleted = client
        .delete_agent(pb::DeleteAgentRequest {
            meta: meta(0),
            agent_id: "worker".into(),
        })
        .await
        .expect_err("busy agents stay");
    assert_eq!(deleted.code(), Code::FailedPrecondition);

    gate.notify_one();
    let done = first
        .await
        .expect("task")
        .expect("first turn completes")
        .into_inner();
    assert!(
        done.response
            .expect("response")
            .message
            .expect("message")
            .content
            .contains("opened")
    );
    let after = get(&mut client, "worker").await;
    assert_eq!((state_of(&after), after.busy), (State::Idle as i32, false));
    assert_eq!(
        after.status.expect("status").messages_processed,
        1,
        "the refused message was not processed"
    );
}

/// A client that cancels mid-loop leaves the agent Idle with the conversation as before the turn.
#[tokio::test(flavor = "multi_thread")]
async fn cancelling_mid_loop_restores_the_agent() {
    let server = TestServer::start().await;
    let gate = Arc::new(Notify::new());
    let _provider = gated_provider(&server, gate).await;
    let mut client = agents(&server).await;
    create(&mut client, "cancel-me", &[]).await;
    client
        .complete(complete_request("cancel-me", "first words", "before"))
        .await
        .expect("a normal turn");
    let before = messages(&mut client, "cancel-me").await;

    let mut turn_client = client.clone();
    let turn = tokio::spawn(async move {
        turn_client
            .complete(complete_request(
                "cancel-me",
                "call wait_for_gate",
                "cancelled",
            ))
            .await
    });
    wait_for_state(&client, "cancel-me", State::ToolCall).await;
    turn.abort();

    wait_for_state(&client, "cancel-me", State::Idle).await;
    let after = get(&mut client, "cancel-me").await;
    assert!(!after.busy);
    assert!(
        after
            .recent_transitions
            .last()
            .expect("reset")
            .note
            .contains("did not finish")
    );
    let conversation = messages(&mut client, "cancel-me").await;
    assert_eq!(
        conversation, before,
        "the cancelled turn left nothing behind"
    );
    client
        .complete(complete_request("cancel-me", "still works", "after"))
        .await
        .expect("the agent takes the next turn");
}

/// Manual transitions follow the machine; an invalid one names from and to.
#[tokio::test(flavor = "multi_thread")]
async fn manual_transitions_follow_the_machine() {
    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    create(&mut client, "manual", &[]).await;
    let transition = |to: State| pb::TransitionAgentRequest {
        meta: meta(0),
        agent_id: "manual".into(),
        to: to as i32,
    };
    let error = client
        .transition_agent(transition(State::Reflecting))
        .await
        .expect_err("idle -> reflecting");
    assert_eq!(error.code(), Code::FailedPrecondition);
    assert_eq!(reason(&error), "AGENT_INVALID_TRANSITION");
    use tonic_types::StatusExt;
    let info = error
        .get_error_details()
        .error_info()
        .cloned()
        .expect("ErrorInfo");
    assert_eq!(
        (info.metadata["from"].as_str(), info.metadata["to"].as_str()),
        ("idle", "reflecting")
    );
    client
        .transition_agent(transition(State::Thinking))
        .await
        .expect("idle -> thinking");
    let busy = client
        .complete(complete_request("manual", "hi", "c"))
        .await
        .expect_err("not idle");
    assert_eq!(busy.code(), Code::FailedPrecondition);
    assert_eq!(reason(&busy), "AGENT_BUSY");
    // No turn is running: the message says how to make the agent idle, not to wait.
    assert!(
        busy.message().contains(
            "where TransitionAgent left it; a turn starts only from idle: move it on with \
             TransitionAgent to toolcall, then reflecting, then idle"
        ),
        "{}",
        busy.message()
    );
    for step in [State::ToolCall, State::Reflecting, State::Idle] {
        client
            .transition_agent(transition(step))
            .await
            .expect("the cycle back to idle");
    }
    client
        .complete(complete_request("manual", "hi", "c"))
        .await
        .expect("idle again");
}

/// Bad input is refused with the right code and a field to fix, and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn bad_agent_requests() {
    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    create(&mut client, "valid", &[]).await;
    let duplicate = client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: "valid".into(),
            ..Default::default()
        })
        .await
        .expect_err("duplicate");
    assert_eq!(duplicate.code(), Code::AlreadyExists);
    let bad_name = client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: "has space".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad name");
    assert_eq!(violations(&bad_name)[0].0, "name");
    let missing = client
        .get_agent(pb::GetAgentRequest {
            meta: meta(0),
            agent_id: "nobody".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(missing.code(), Code::NotFound);
    let other_tenant = client
        .get_agent(pb::GetAgentRequest {
            meta: meta(3),
            agent_id: "valid".into(),
        })
        .await
        .expect_err("tenant scoped");
    assert_eq!(other_tenant.code(), Code::NotFound);

    let blank = client
        .complete(complete_request("valid", "   ", "c"))
        .await
        .expect_err("blank message");
    assert_eq!(blank.code(), Code::InvalidArgument);
    assert_eq!(violations(&blank)[0].0, "request.messages[0].content");
    let mut hot = complete_request("valid", "hi", "c");
    hot.request.as_mut().expect("request").temperature = Some(2.5);
    let error = client.complete(hot).await.expect_err("temperature");
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(violations(&error)[0].0, "request.temperature");
    let mut silent = complete_request("valid", "hi", "c");
    silent.request.as_mut().expect("request").max_tokens = Some(0);
    let error = client.complete(silent).await.expect_err("max_tokens 0");
    assert_eq!(violations(&error)[0].0, "request.max_tokens");
    let mut ahead = complete_request("valid", "hi", "c");
    ahead.request.as_mut().expect("request").messages[0].timestamp = Some(prost_types::Timestamp {
        seconds: chrono::Utc::now().timestamp() + 7200,
        nanos: 0,
    });
    let error = client.complete(ahead).await.expect_err("future timestamp");
    assert_eq!(
        violations(&error)[0],
        (
            "request.messages[0].timestamp".to_owned(),
            "invalid message: timestamp is more than 1 hour in the future".to_owned()
        )
    );
    let mut streaming = complete_request("valid", "hi", "c");
    streaming.request.as_mut().expect("request").stream = true;
    assert_eq!(
        violations(
            &client
                .complete(streaming)
                .await
                .expect_err("stream on Complete")
        )[0]
        .0,
        "request.stream"
    );
    let empty = pb::CompleteRequest {
        meta: meta(0),
        agent_id: "valid".into(),
        request: Some(pb::ChatCompletionRequest::default()),
    };
    assert_eq!(
        client
            .complete(empty)
            .await
            .expect_err("no messages")
            .code(),
        Code::InvalidArgument
    );

    let agent = get(&mut client, "valid").await;
    assert_eq!(
        agent.status.expect("status").messages_processed,
        0,
        "nothing was processed"
    );
    assert!(agent.recent_transitions.is_empty());
}

/// Message ids are unique in a conversation: two messages of a request with one id are
/// INVALID_ARGUMENT naming the second; a message whose id the conversation holds already (a
/// retried Complete whose first attempt ran) is ALREADY_EXISTS naming it. Neither changes the
/// agent.
#[tokio::test(flavor = "multi_thread")]
async fn message_ids_are_unique_in_a_conversation() {
    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    create(&mut client, "ids", &[]).await;
    let id = "11111111-1111-4111-8111-111111111111";
    let with_ids = |ids: &[&str]| {
        let mut request = complete_request("ids", "hi", "c");
        let body = request.request.as_mut().expect("request");
        body.messages = (ids.iter())
            .map(|id| pb::CanonicalMessage {
                id: (*id).to_owned(),
                ..user("hi")
            })
            .collect();
        request
    };
    let twice = (client.complete(with_ids(&[id, "", id])).await).expect_err("one id twice");
    assert_eq!(twice.code(), Code::InvalidArgument);
    let (field, problem) = violations(&twice).remove(0);
    assert_eq!(field, "request.messages[2].id");
    assert!(problem.contains("request.messages[0]'s too"), "{problem}");

    client.complete(with_ids(&[id])).await.expect("a new id");
    let again = (client.complete(with_ids(&["", id])).await).expect_err("an id held");
    assert_eq!(again.code(), Code::AlreadyExists);
    assert_eq!(reason(&again), "RESOURCE_ALREADY_EXISTS");
    use tonic_types::StatusExt;
    let info = (again.get_error_details().error_info().cloned()).expect("ErrorInfo");
    assert_eq!(info.metadata["message_id"], id);
    assert_eq!(info.metadata["field"], "request.messages[1].id");

    let agent = get(&mut client, "ids").await;
    assert_eq!(agent.status.expect("status").messages_processed, 1);
    assert!(!agent.busy, "the refused turn left the agent busy");
    let listed = client
        .list_messages(pb::ListMessagesRequest {
            meta: meta(0),
            agent_id: "ids".into(),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner();
    let ids: Vec<_> = (listed.messages.iter())
        .map(|message| message.id.as_str())
        .collect();
    assert_eq!(ids.len(), 2, "the first turn's message and answer: {ids:?}");
    assert_eq!(ids[0], id);
}
