//! The OpenAI-compatible client against a local HTTP server speaking the chat-completions wire
//! format (JSON answers, SSE chunks, tool_calls), directly and as the model of real agents.

use crate::common;

use common::agent_fixture;
use common::model_server::{Mock, agent_server, asking, config, power_tool, start_mock, turn};
use common::provider::TestProvider;
use common::*;
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use toolplane::agent::model::{
    LlmProvider, ModelRequest, StreamEvent, TOOL_CALL_ID_KEY, tool_call_message,
    tool_result_message,
};
use toolplane::agent::openai::{MaxTokensField, OpenAiClient, OpenAiConfig};
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;
use toolplane::provider::{ToolDescriptor, ToolInvocation, ToolOutput, ToolRegistry, handler};

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
    // Configured for OpenAI's reasoning models, the limit goes in max_completion_tokens.
    let reasoning = OpenAiClient::new(OpenAiConfig {
        max_tokens_field: MaxTokensField::MaxCompletionTokens,
        ..config(start_mock(mock.clone()).await)
    })
    .expect("client");
    reasoning.complete(request.clone()).await.expect("answer");
    let sent = mock.bodies.lock().expect("lock")[1].clone();
    assert_eq!(
        (
            sent["max_completion_tokens"].clone(),
            sent.get("max_tokens")
        ),
        (json!(64), None)
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

    let mut stream = agent_fixture::stream_turn(&mut client, "gpt", "how much power?").await;
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

/// A provider whose tool `meet` answers once as many calls as `rounds` of two have arrived
/// (`met`), or, after 5 s alone, unmet: two calls met only if they ran at once.
async fn meeting_provider(server: &TestServer) -> TestProvider {
    let arrived = Arc::new(AtomicUsize::new(0));
    let tools = ToolRegistry::new()
        .register(
            ToolDescriptor::new(
                "meet",
                "Answers once another call has arrived",
                json!({"type": "object"}),
            )
            .timeout_ms(30_000),
            handler(move |_call: ToolInvocation| {
                let arrived = Arc::clone(&arrived);
                async move {
                    let arrival = arrived.fetch_add(1, Ordering::SeqCst) + 1;
                    let pair_complete = arrival.div_ceil(2) * 2;
                    let given_up = tokio::time::Instant::now() + Duration::from_secs(5);
                    let met = loop {
                        if arrived.load(Ordering::SeqCst) >= pair_complete {
                            break true;
                        }
                        if tokio::time::Instant::now() > given_up {
                            break false;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    };
                    Ok(ToolOutput::new(json!({"met": met, "arrival": arrival})))
                }
            }),
        )
        .expect("valid tool")
        .freeze();
    let provider =
        TestProvider::start(tools, &server.endpoint(), "meeting", Duration::from_secs(5)).await;
    wait_registered(server, "meeting").await;
    provider
}

/// A server running at most `concurrent` tool calls of an answer at once, whose model asks for
/// `meet` twice in its first answer, the meeting provider, and an agent `name` on it.
async fn meeting_agent(
    name: &str,
    concurrent: usize,
) -> (
    TestServer,
    TestProvider,
    AgentServiceClient<tonic::transport::Channel>,
) {
    let base_url = start_mock(Mock {
        asks_for: Some(("meet", 2)),
        ..Mock::default()
    })
    .await;
    let server = TestServer::start_with(ServerOptions {
        model: Some(config(base_url)),
        max_concurrent_tool_calls: concurrent,
        ..test_options()
    })
    .await;
    let provider = meeting_provider(&server).await;
    let mut client = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut client, name, &[]).await;
    (server, provider, client)
}

/// The tool calls of one model answer run at once: a model asking for `meet` twice in one
/// answer has both calls meet, in Complete and in StreamComplete, and the results join the
/// conversation in the order the model asked for the calls.
#[tokio::test(flavor = "multi_thread")]
async fn the_tool_calls_of_one_answer_run_at_once() {
    let (server, _provider, mut client) = meeting_agent("pair", 8).await;
    client
        .complete(agent_fixture::complete_request("pair", "meet twice", "c1"))
        .await
        .expect("the turn completes");
    let mut events = agent_fixture::stream_turn(&mut client, "pair", "meet twice").await;
    while events.message().await.expect("the turn streams").is_some() {}

    let results: Vec<(String, Value)> = agent_fixture::messages(&mut client, "pair")
        .await
        .into_iter()
        .filter_map(|message| {
            let id = message.metadata.get(TOOL_CALL_ID_KEY)?.clone();
            Some((id, serde_json::from_str(&message.content).expect("JSON")))
        })
        .collect();
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["call_0", "call_1", "call_0", "call_1"], "{results:?}");
    for (_, result) in &results {
        assert_eq!(result["met"], true, "the calls ran at once: {results:?}");
    }
    server.stop().await;
}

/// With `max_concurrent_tool_calls` 1 the calls of one answer run one after another: the first
/// `meet` call finds no partner (it gives up after 5 s), the second meets the first's count.
#[tokio::test(flavor = "multi_thread")]
async fn the_tool_calls_of_one_answer_run_one_at_a_time_when_set_so() {
    let (server, _provider, mut client) = meeting_agent("alone", 1).await;
    client
        .complete(agent_fixture::complete_request("alone", "meet twice", "c1"))
        .await
        .expect("the turn completes");
    let met: Vec<Value> = agent_fixture::messages(&mut client, "alone")
        .await
        .into_iter()
        .filter(|message| message.metadata.contains_key(TOOL_CALL_ID_KEY))
        .map(|message| {
            serde_json::from_str::<Value>(&message.content).expect("JSON")["met"].clone()
        })
        .collect();
    assert_eq!(met, [json!(false), json!(true)], "one call at a time");
    server.stop().await;
}
