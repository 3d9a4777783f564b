//! AgentService through the real server, with real provider servers: the tool-calling loop and
//! its state sequence, tool errors and the allowed tools, streaming, and the caller's trace
//! context on the tool calls. Live state, a busy agent, cancellation, manual transitions and
//! bad input are in `agent_control.rs`.

use crate::common;

use common::agent_fixture::*;
use common::provider::start_structs_provider;
use common::*;
use toolplane::pb;

use pb::AgentState as State;

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

/// Tools whose function names would come out the same (`x.y` beside `x_y` in one service,
/// `x_y` in two) are offered under different names, and each name calls its own tool.
#[tokio::test(flavor = "multi_thread")]
async fn tools_named_alike_are_offered_and_called_apart() {
    let server = TestServer::start().await;
    let mut discovery = server.discovery().await;
    let tools = |names: &[&str]| names.iter().map(|name| simple_tool(name)).collect();
    register_ok(&mut discovery, 0, registration("s", tools(&["x.y", "x_y"]))).await;
    register_ok(&mut discovery, 0, registration("t", tools(&["x_y"]))).await;
    let mut client = agents(&server).await;
    create(&mut client, "alike", &[]).await;
    for (function, service, tool) in [
        ("s__x_y", "s", "x.y"),
        ("s__x_y_2", "s", "x_y"),
        ("t__x_y", "t", "x_y"),
    ] {
        let answer = client
            .complete(complete_request(
                "alike",
                &format!("call {function} {{}}"),
                "c",
            ))
            .await
            .expect("turn completes")
            .into_inner();
        let called: Vec<(&str, &str)> = (answer.tool_calls.iter())
            .map(|call| (call.service_name.as_str(), call.tool_name.as_str()))
            .collect();
        assert_eq!(called, [(service, tool)], "{function}");
    }
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

/// The tools an agent calls get the trace context of the Complete that ran the turn.
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_tool_calls_carry_the_callers_trace_context() {
    let setup = common::invoke_fixture::setup().await;
    let mut client = agents(&setup.server).await;
    let agent = create(&mut client, "traced", &[]).await;
    let id = agent.status.expect("status").id;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut request = tonic::Request::new(complete_request(&id, r#"call echo {"n": 1}"#, "t"));
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().expect("ascii"));
    let answer = client.complete(request).await.expect("turn").into_inner();
    assert_eq!(
        answer.tool_calls[0].status,
        pb::InvocationStatus::Succeeded as i32
    );
    assert_eq!(
        *setup.probes.traces.lock().expect("lock"),
        [Some((traceparent.to_owned(), None))]
    );
}

/// A turn whose messages grow past what a conversation keeps (here 2,000 bytes) is undone and
/// answered RESOURCE_EXHAUSTED (reason AGENT_TURN_TOO_LARGE), the conversation as it was and
/// the agent idle: a tool's result of 5,000 bytes, before it is sent to the model; a model's
/// answer that, with the request, takes the turn past it. Kept, such a turn pushed every
/// other turn out of the conversation and then itself; and a turn's tool results were sent to
/// the model whatever their size (128 of 4 MiB made a 512 MB request).
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_past_what_a_conversation_keeps_is_undone() {
    use toolplane::provider::{ToolDescriptor, ToolInvocation, ToolOutput, handler};
    let mut options = test_options();
    options.max_conversation_bytes = 2000;
    let server = TestServer::start_with(options).await;
    let tool = ToolDescriptor::new(
        "padded",
        "Answers N bytes",
        serde_json::json!({"type": "object"}),
    );
    let pad = handler(|call: ToolInvocation| async move {
        let size = call.input["n"].as_u64().unwrap_or_default() as usize;
        Ok(ToolOutput::new(serde_json::json!({"s": "x".repeat(size)})))
    });
    let _provider = common::provider::start_one_tool_provider(&server, "padder", tool, pad).await;
    let mut client = agents(&server).await;
    create(&mut client, "talker", &[]).await;
    client
        .complete(complete_request("talker", "hello", "small"))
        .await
        .expect("a small turn");
    let kept = messages(&mut client, "talker").await;
    assert_eq!(kept.len(), 2, "{kept:?}");

    let too_large = [
        (r#"call padded {"n": 5000}"#.to_owned(), "a tool's result"),
        ("y".repeat(1200), "the model's answer"),
    ];
    for (text, what) in too_large {
        let error = client
            .complete(complete_request("talker", &text, "large"))
            .await
            .expect_err("past what a conversation keeps");
        assert_eq!(error.code(), tonic::Code::ResourceExhausted, "{error:?}");
        assert_eq!(reason(&error), "AGENT_TURN_TOO_LARGE");
        assert!(error.message().contains(what), "{}", error.message());
        assert_eq!(messages(&mut client, "talker").await, kept, "nothing kept");
        assert_eq!(
            state_of(&get(&mut client, "talker").await),
            State::Idle as i32
        );
    }
}
