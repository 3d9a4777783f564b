//! The OpenAI-compatible client against a local HTTP server speaking the chat-completions wire
//! format (JSON answers, SSE chunks, tool_calls), directly and as the model of real agents.

use crate::common;

use common::model_server::{Mock, agent_server, asking, config, power_tool, start_mock, turn};
use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use toolplane::agent::model::{
    LlmProvider, ModelRequest, StreamEvent, tool_call_message, tool_result_message,
};
use toolplane::agent::openai::OpenAiClient;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;

/// The client sends function tools and a bearer token, parses tool_calls, and reassembles
/// streamed tool-call fragments and content deltas.
#[tokio::test(flavor = "multi_thread")]
async fn client_speaks_the_wire_format() {
    let mock = Mock::default();
    let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
    let request = ModelRequest {
        temperature: Some(0.2),
        max_tokens: Some(64),
        ..asking("power please")
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
