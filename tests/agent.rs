//! AgentService through the real server, with real provider servers: the tool-calling loop and
//! its state sequence, live state, a busy agent, cancellation mid-loop, streaming, manual
//! transitions and bad input.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::provider::{TestProvider, start_structs_provider};
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

async fn agents(server: &TestServer) -> AgentServiceClient<Channel> {
    AgentServiceClient::new(server.channel().await)
}

fn user(text: &str) -> pb::CanonicalMessage {
    pb::CanonicalMessage {
        role: pb::Role::User as i32,
        content: text.into(),
        ..Default::default()
    }
}

fn complete_request(agent: &str, text: &str, correlation: &str) -> pb::CompleteRequest {
    let mut envelope = meta(0).expect("meta");
    envelope.correlation_id = correlation.into();
    pb::CompleteRequest {
        meta: Some(envelope),
        agent_id: agent.into(),
        request: Some(pb::ChatCompletionRequest {
            messages: vec![user(text)],
            ..Default::default()
        }),
    }
}

async fn create(
    client: &mut AgentServiceClient<Channel>,
    name: &str,
    allowed: &[&str],
) -> pb::Agent {
    client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: name.into(),
            allowed_tools: allowed.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("agent created")
        .into_inner()
        .agent
        .expect("agent")
}

async fn get(client: &mut AgentServiceClient<Channel>, agent: &str) -> pb::Agent {
    client
        .get_agent(pb::GetAgentRequest {
            meta: meta(0),
            agent_id: agent.into(),
        })
        .await
        .expect("agent")
        .into_inner()
        .agent
        .expect("agent")
}

async fn messages(
    client: &mut AgentServiceClient<Channel>,
    agent: &str,
) -> Vec<pb::CanonicalMessage> {
    client
        .list_messages(pb::ListMessagesRequest {
            meta: meta(0),
            agent_id: agent.into(),
            ..Default::default()
        })
        .await
        .expect("messages")
        .into_inner()
        .messages
}

fn state_of(agent: &pb::Agent) -> i32 {
    agent.status.as_ref().expect("status").state
}

/// The whole loop with the example provider: the model asks for a tool, the tool runs through
/// the invocation path with the turn's correlation id, the model reports the result, and the
/// agent walks Idle -> Thinking -> ToolCall -> Reflecting -> Idle.
#[tokio::test(flavor = "multi_thread")]
async fn tool_calling_loop_through_the_example_provider() {
    let server = TestServer::start().await;
    let _provider = start_structs_provider(&server).await;
    let mut client = agents(&server).await;
    let agent = create(&mut client, "helper", &[]).await;
    let id = agent.status.expect("status").id;
    assert_eq!(agent.recent_transitions.len(), 0);

    let answer = client
        .complete(complete_request(&id, r#"call structs_calculate_power {"alpha_matter": 12, "generator_type": "fieldGenerator"}"#, "agent-turn-1"))
        .await
        .expect("turn completes")
        .into_inner();
    let response = answer.response.expect("response");
    assert_eq!(response.model, "toolplane-builtin-echo");
    let content = response.message.expect("message").content;
    assert!(
        content.starts_with("tool structs_calculate_power returned:")
            && content.contains("\"power_generated\":24"),
        "{content}"
    );
    let usage = response.usage.expect("usage");
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    assert_eq!(answer.tool_calls.len(), 1);
    let call = &answer.tool_calls[0];
    assert_eq!(
        (call.service_name.as_str(), call.status),
        ("structs", pb::InvocationStatus::Succeeded as i32)
    );

    let after = get(&mut client, &id).await;
    let sequence: Vec<(i32, i32)> = after
        .recent_transitions
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        sequence,
        [
            (State::Idle as i32, State::Thinking as i32),
            (State::Thinking as i32, State::ToolCall as i32),
            (State::ToolCall as i32, State::Reflecting as i32),
            (State::Reflecting as i32, State::Idle as i32)
        ]
    );
    let status = after.status.expect("status");
    assert_eq!(
        (status.state, status.messages_processed),
        (State::Idle as i32, 1)
    );
    assert!(!after.busy);

    let mut invoke =
        pb::tool_invoke_service_client::ToolInvokeServiceClient::new(server.channel().await);
    let record = invoke
        .get_invocation_record(pb::GetInvocationRecordRequest {
            meta: meta(0),
            invocation_id: call.invocation_id.clone(),
        })
        .await
        .expect("record")
        .into_inner()
        .record
        .expect("record");
    assert_eq!(
        record.correlation_id, "agent-turn-1",
        "the record carries the agent turn's correlation id"
    );
    assert_eq!(record.tool_name, "structs_calculate_power");

    let conversation = messages(&mut client, &id).await;
    let roles: Vec<i32> = conversation.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            pb::Role::User as i32,
            pb::Role::Assistant as i32,
            pb::Role::System as i32,
            pb::Role::Assistant as i32
        ]
    );
    assert!(
        conversation[1]
            .metadata
            .contains_key("toolplane.tool_calls")
    );
    assert_eq!(
        conversation[2]
            .metadata
            .get("toolplane.tool_name")
            .map(String::as_str),
        Some("structs_calculate_power")
    );

    // A turn without tool calls echoes, and still walks the full cycle back to Idle.
    let echo = client
        .complete(complete_request("helper", "hello agent", "agent-turn-2"))
        .await
        .expect("echo")
        .into_inner();
    assert_eq!(
        echo.response
            .expect("response")
            .message
            .expect("message")
            .content,
        "hello agent"
    );
    assert!(echo.tool_calls.is_empty());
    assert_eq!(
        state_of(&get(&mut client, "helper").await),
        State::Idle as i32
    );
}

/// A tool's error reaches the model as the tool's result; tools outside allowed_tools are not offered.
#[tokio::test(flavor = "multi_thread")]
async fn tool_errors_go_to_the_model_and_allowed_tools_limit_the_offer() {
    let server = TestServer::start().await;
    let _provider = start_structs_provider(&server).await;
    let mut client = agents(&server).await;
    create(&mut client, "strict", &["structs_calculate_damage"]).await;
    create(&mut client, "open", &[]).await;

    let answer = client
        .complete(complete_request(
            "open",
            r#"call structs_calculate_power {"alpha_matter": -1, "generator_type": "reactor"}"#,
            "c",
        ))
        .await
        .expect("turn completes")
        .into_inner();
    let content = answer
        .response
        .expect("response")
        .message
        .expect("message")
        .content;
    assert!(
        content.contains("VALIDATION_INPUT") && content.contains("input/alpha_matter"),
        "the model was told: {content}"
    );
    assert_eq!(
        answer.tool_calls[0].status,
        pb::InvocationStatus::InvalidInput as i32
    );

    let refused = client
        .complete(complete_request(
            "strict",
            r#"call structs_calculate_power {}"#,
            "c",
        ))
        .await
        .expect("turn completes")
        .into_inner();
    let content = refused
        .response
        .expect("response")
        .message
        .expect("message")
        .content;
    assert!(
        content.contains("not available") && content.contains("structs_calculate_damage"),
        "{content}"
    );
    assert!(refused.tool_calls.is_empty());
}

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

/// StreamComplete streams words, transitions and tool calls, then the final answer with usage.
#[tokio::test(flavor = "multi_thread")]
async fn stream_complete_streams_the_turn() {
    let server = TestServer::start().await;
    let _provider = start_structs_provider(&server).await;
    let mut client = agents(&server).await;
    create(&mut client, "streamer", &[]).await;
    let request = pb::StreamCompleteRequest {
        meta: meta(0),
        agent_id: "streamer".into(),
        request: Some(pb::ChatCompletionRequest {
            messages: vec![user(r#"call structs_validate_entity_id {"id": "1-11"}"#)],
            stream: true,
            ..Default::default()
        }),
    };
    let mut stream = client
        .stream_complete(request)
        .await
        .expect("stream")
        .into_inner();
    let (mut words, mut transitions, mut tool_calls, mut completion) = (String::new(), 0, 0, None);
    while let Some(message) = stream.message().await.expect("stream healthy") {
        use pb::stream_complete_response::Event;
        match message.event.expect("event") {
            Event::ContentDelta(text) => words.push_str(&text),
            Event::Transition(_) => transitions += 1,
            Event::ToolCall(call) => {
                assert_eq!(call.status, pb::InvocationStatus::Succeeded as i32);
                tool_calls += 1;
            }
            Event::Completion(done) => completion = Some(done),
        }
    }
    let completion = completion.expect("a final completion");
    assert_eq!((transitions, tool_calls), (4, 1));
    assert_eq!(
        words,
        completion.message.expect("message").content,
        "the deltas add up to the answer"
    );
    assert!(completion.usage.is_some());
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
