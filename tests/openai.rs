//! The OpenAI-compatible client against a local HTTP server speaking the chat-completions wire
//! format (JSON answers, SSE chunks, tool_calls), directly and as the model of real agents.

use crate::common;

use common::agent_fixture;
use common::model_server::{Misbehaviour, Mock, config, start_mock};
use common::provider::{TestProvider, start_structs_provider};
use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use toolplane::agent::model::{
    LlmProvider, ModelRequest, OfferedTool, StreamEvent, tool_call_message, tool_result_message,
};
use toolplane::agent::openai::{MAX_ANSWER_BYTES, OpenAiClient};
use toolplane::agent::runner::MAX_TOOL_CALLS_PER_TURN;
use toolplane::agent::types::{CanonicalMessage, Role};
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;

fn power_tool() -> OfferedTool {
    OfferedTool {
        name: "structs_calculate_power".into(),
        description: "power".into(),
        parameters: json!({"type": "object", "properties": {"alpha_matter": {"type": "number"}}}),
    }
}

/// The client sends function tools and a bearer token, parses tool_calls, and reassembles
/// streamed tool-call fragments and content deltas.
#[tokio::test(flavor = "multi_thread")]
async fn client_speaks_the_wire_format() {
    let mock = Mock::default();
    let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
    let request = ModelRequest {
        model: None,
        messages: vec![CanonicalMessage::new(Role::User, "power please".into())],
        tools: vec![power_tool()],
        temperature: Some(0.2),
        max_tokens: Some(64),
        trace: None,
    };

    let reply = client.complete(request.clone()).await.expect("answer");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(
        reply.tool_calls[0].arguments,
        json!({"alpha_matter": 3, "generator_type": "worldEngine"})
    );
    assert_eq!(
        (
            reply.model.as_str(),
            reply.usage.expect("usage").total_tokens
        ),
        ("mock-model", 13)
    );
    let sent = mock.bodies.lock().expect("lock")[0].clone();
    assert_eq!(sent["model"], "configured-model");
    assert_eq!(
        sent["tools"][0],
        json!({"type": "function", "function": {"name": "structs_calculate_power", "description": "power", "parameters": power_tool().parameters}})
    );
    assert_eq!(
        (sent["temperature"].clone(), sent["max_tokens"].clone()),
        (json!(0.2), json!(64))
    );
    assert_eq!(
        mock.authorization.lock().expect("lock")[0],
        "Bearer test-key"
    );

    let mut stream = client.stream(request.clone()).await.expect("stream");
    let mut last = None;
    while let Some(event) = stream.next().await {
        if let StreamEvent::Done(reply) = event.expect("event") {
            last = Some(reply);
        }
    }
    let streamed = last.expect("a final reply");
    assert_eq!(
        streamed.tool_calls, reply.tool_calls,
        "fragments reassemble into the same call"
    );

    // After a tool result the conversation goes out with tool_calls and a tool message.
    let call = &reply.tool_calls[0];
    let mut follow_up = request;
    follow_up
        .messages
        .push(tool_call_message("", std::slice::from_ref(call)));
    follow_up
        .messages
        .push(tool_result_message(call, &json!({"power_generated": 30})));
    let mut deltas = String::new();
    let mut stream = client.stream(follow_up).await.expect("stream");
    let mut done = None;
    while let Some(event) = stream.next().await {
        match event.expect("event") {
            StreamEvent::Delta(text) => deltas.push_str(&text),
            StreamEvent::Done(reply) => done = Some(reply),
        }
    }
    let done = done.expect("final");
    assert_eq!(deltas, r#"the tool said {"power_generated":30}"#);
    assert_eq!(
        (done.content, done.usage.expect("usage").total_tokens),
        (deltas, 25)
    );
    let sent = mock
        .bodies
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("body");
    let messages = sent["messages"].as_array().expect("messages");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "structs_calculate_power"
    );
    assert_eq!(
        (
            messages[2]["role"].as_str(),
            messages[2]["tool_call_id"].as_str()
        ),
        (Some("tool"), Some("call_1"))
    );
}

async fn agent_server(mock: Mock) -> (TestServer, TestProvider) {
    let base_url = start_mock(mock).await;
    let server = TestServer::start_with(ServerOptions {
        model: Some(config(base_url)),
        ..test_options()
    })
    .await;
    let provider = start_structs_provider(&server).await;
    (server, provider)
}

fn turn() -> Option<pb::ChatCompletionRequest> {
    Some(pb::ChatCompletionRequest {
        messages: vec![pb::CanonicalMessage {
            role: pb::Role::User as i32,
            content: "how much power?".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// A real agent driven by the OpenAI-compatible model: the tool call runs through the control
/// plane and the model gets the result, in both Complete and StreamComplete; the model server
/// is sent the caller's trace context.
#[tokio::test(flavor = "multi_thread")]
async fn agents_run_on_an_openai_compatible_model() {
    let mock = Mock::default();
    let (server, _provider) = agent_server(mock.clone()).await;
    let mut client = AgentServiceClient::new(server.channel().await);
    client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: "gpt".into(),
            system_prompt: "Be brief.".into(),
            ..Default::default()
        })
        .await
        .expect("created");

    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = tonic::Request::new(pb::CompleteRequest {
        meta: meta(0),
        agent_id: "gpt".into(),
        request: turn(),
    });
    traced
        .metadata_mut()
        .insert("traceparent", traceparent.parse().expect("ascii"));
    let answer = client.complete(traced).await.expect("turn").into_inner();
    let response = answer.response.expect("response");
    assert_eq!(response.model, "mock-model");
    // Both model calls of the turn carried the caller's trace context to the model server.
    assert_eq!(
        *mock.traceparents.lock().expect("lock"),
        [traceparent, traceparent]
    );
    assert!(
        response
            .message
            .expect("message")
            .content
            .contains("\"power_generated\":30"),
        "the model saw the real tool output"
    );
    assert_eq!(response.usage.expect("usage").total_tokens, 13 + 25);
    assert_eq!(
        answer.tool_calls[0].status,
        pb::InvocationStatus::Succeeded as i32
    );
    let first = mock.bodies.lock().expect("lock")[0].clone();
    assert_eq!(
        first["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    let offered = offered_tools(&first);
    assert!(
        offered.iter().any(|name| name == "structs_calculate_power") && offered.len() == 5,
        "{offered:?}"
    );
    let second = mock.bodies.lock().expect("lock")[1].clone();
    assert!(
        second.get("tools").is_none(),
        "no tools are offered while reflecting"
    );

    let mut stream = client
        .stream_complete(pb::StreamCompleteRequest {
            meta: meta(0),
            agent_id: "gpt".into(),
            request: turn(),
        })
        .await
        .expect("stream")
        .into_inner();
    let mut completion = None;
    while let Some(message) = stream.message().await.expect("healthy") {
        if let Some(pb::stream_complete_response::Event::Completion(done)) = message.event {
            completion = Some(done);
        }
    }
    assert!(
        completion
            .expect("completion")
            .message
            .expect("message")
            .content
            .contains("\"power_generated\":30")
    );
}

/// A failing model is UNAVAILABLE (MODEL_UNAVAILABLE) and the agent is left Idle and unchanged;
/// so is a model asking for more tool calls than a turn makes, none of which is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_model_leaves_the_agent_as_it_was() {
    let too_many = format!(
        "asked for {} tool calls in one answer; a turn makes at most {MAX_TOOL_CALLS_PER_TURN}",
        MAX_TOOL_CALLS_PER_TURN + 1
    );
    for (misbehaving, said) in [
        (Misbehaviour::Fails, "500"),
        (Misbehaviour::CallsTooManyTools, too_many.as_str()),
    ] {
        let (server, _provider) = agent_server(Mock {
            misbehaving,
            ..Mock::default()
        })
        .await;
        let mut client = agent_fixture::agents(&server).await;
        agent_fixture::create(&mut client, "down", &[]).await;
        let error = client
            .complete(pb::CompleteRequest {
                meta: meta(0),
                agent_id: "down".into(),
                request: turn(),
            })
            .await
            .expect_err("model down");
        assert_eq!(error.code(), tonic::Code::Unavailable);
        assert_eq!(reason(&error), "MODEL_UNAVAILABLE");
        assert!(error.message().contains(said), "{}", error.message());
        let agent = agent_fixture::get(&mut client, "down").await;
        assert_eq!(agent_fixture::state_of(&agent), pb::AgentState::Idle as i32);
        assert!(
            agent_fixture::messages(&mut client, "down")
                .await
                .is_empty()
        );
        let mut invoker = common::invoke_fixture::invoker(&server).await;
        let made = common::invoke_fixture::records(&mut invoker, "structs_calculate_power").await;
        assert!(made.is_empty(), "no tool was called: {made:?}");
        server.stop().await;
    }
}

/// The last event of the model's streamed answer to `request`.
async fn last_streamed(
    client: &OpenAiClient,
    request: ModelRequest,
) -> Result<StreamEvent, toolplane::agent::model::ModelError> {
    let mut events = client.stream(request).await.expect("the stream starts");
    let mut last = None;
    while let Some(event) = events.next().await {
        last = Some(event);
    }
    last.expect("an event")
}

/// A model's answer larger than toolplane reads, as JSON or as an event stream, fails the
/// model call saying so.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_larger_than_toolplane_reads_fails_the_model_call() {
    let base_url = start_mock(Mock {
        misbehaving: Misbehaviour::AnswersTooMuch,
        ..Mock::default()
    })
    .await;
    let client = OpenAiClient::new(config(base_url)).expect("client");
    let request = ModelRequest {
        model: None,
        messages: vec![CanonicalMessage::new(Role::User, "say a lot".into())],
        tools: Vec::new(),
        temperature: None,
        max_tokens: None,
        trace: None,
    };
    let too_large = format!("larger than {} MiB", MAX_ANSWER_BYTES >> 20);
    let refused = client
        .complete(request.clone())
        .await
        .expect_err("too large");
    assert!(refused.0.contains(&too_large), "{}", refused.0);
    let refused = last_streamed(&client, request)
        .await
        .expect_err("too large");
    assert!(refused.0.contains(&too_large), "{}", refused.0);
}

/// A streamed answer asking for more tool calls than a turn makes stops being read there,
/// failing the model call; a turn streamed with StreamComplete fails as Complete's does.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_asking_for_too_many_tool_calls_fails_the_model_call() {
    let mock = Mock {
        misbehaving: Misbehaviour::CallsTooManyTools,
        ..Mock::default()
    };
    let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
    let request = ModelRequest {
        model: None,
        messages: vec![CanonicalMessage::new(Role::User, "call everything".into())],
        tools: vec![power_tool()],
        temperature: None,
        max_tokens: None,
        trace: None,
    };
    let refused = last_streamed(&client, request)
        .await
        .expect_err("too many calls");
    let too_many = format!("more than {MAX_TOOL_CALLS_PER_TURN} tool calls in one answer");
    assert!(refused.0.contains(&too_many), "{}", refused.0);

    let (server, _provider) = agent_server(mock).await;
    let mut agents = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut agents, "eager", &[]).await;
    let mut turn_events = agents
        .stream_complete(pb::StreamCompleteRequest {
            meta: meta(0),
            agent_id: "eager".into(),
            request: turn(),
        })
        .await
        .expect("the turn starts")
        .into_inner();
    let failed = loop {
        match turn_events.message().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the turn ended without failing"),
            Err(status) => break status,
        }
    };
    assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");
    assert!(failed.message().contains(&too_many), "{}", failed.message());
    server.stop().await;
}

/// The function names offered in a chat-completions request body.
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Creates an agent and runs one turn of it.
async fn create_and_complete(
    client: &mut AgentServiceClient<tonic::transport::Channel>,
    name: &str,
    allowed_tools: Vec<String>,
) -> pb::CompleteResponse {
    client
        .create_agent(pb::CreateAgentRequest {
            meta: meta(0),
            name: name.into(),
            system_prompt: "You size generators.".into(),
            allowed_tools,
            ..Default::default()
        })
        .await
        .expect("created");
    client
        .complete(pb::CompleteRequest {
            meta: meta(0),
            agent_id: name.into(),
            request: turn(),
        })
        .await
        .expect("turn")
        .into_inner()
}

/// An agent whose tenant has more tools than a model call takes (OpenAI: 128) is offered the
/// ones that best match the turn and its system prompt, and the tool the model asks for runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_with_more_tools_than_a_model_takes_offers_the_best_matches() {
    let mock = Mock::default();
    let (server, _provider) = agent_server(mock.clone()).await;
    let mut discovery = server.discovery().await;
    for service in 0..3 {
        let tools = (0..70)
            .map(|index| {
                let mut tool = simple_tool(&format!("garden_task_{index:02}"));
                tool.description = format!("Waters plant {index} of bed {service}.");
                tool
            })
            .collect();
        register_ok(
            &mut discovery,
            0,
            registration(&format!("garden-{service}"), tools),
        )
        .await;
    }
    let mut client = AgentServiceClient::new(server.channel().await);
    let answer = create_and_complete(&mut client, "many", Vec::new()).await;
    assert_eq!(
        answer.tool_calls[0].status,
        pb::InvocationStatus::Succeeded as i32,
        "the tool asked for was offered and ran"
    );
    let offered = offered_tools(&mock.bodies.lock().expect("lock")[0]);
    // "how much power?" and "You size generators." match the Structs power tool (power,
    // generator); none of the 210 garden tools holds those words.
    assert_eq!(offered[0], "structs_calculate_power", "{offered:?}");
    assert!(offered.len() <= 128, "{} tools offered", offered.len());
    assert!(
        offered.iter().all(|name| name.starts_with("structs_")),
        "{offered:?}"
    );

    // Past 128 allowed tools (the 70 names are in three services), the best matches among
    // the allowed ones only.
    let mut allowed: Vec<String> = (0..70)
        .map(|index| format!("garden_task_{index:02}"))
        .collect();
    allowed.push("structs_calculate_power".into());
    create_and_complete(&mut client, "allowed", allowed).await;
    assert_eq!(
        offered_tools(&mock.bodies.lock().expect("lock")[2]),
        ["structs_calculate_power"],
        "the damage tool matches \"power\" but is not allowed"
    );
}
