//! A local HTTP server speaking OpenAI's chat-completions wire format (JSON answers, SSE
//! chunks, tool_calls), as the model of agents under test; it can be told to misbehave.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolplane::agent::model::{ModelRequest, OfferedTool};
use toolplane::agent::openai::{MAX_ANSWER_BYTES, OpenAiConfig};
use toolplane::agent::runner::MAX_TOOL_CALLS_PER_TURN;
use toolplane::agent::types::{CanonicalMessage, Role};
use toolplane::grpc::ServerOptions;
use toolplane::pb;

use super::provider::{TestProvider, start_structs_provider};
use super::{TestServer, test_options};

/// What the local chat-completions server saw, and whether it should fail.
#[derive(Clone, Default)]
pub struct Mock {
    /// The body of each request.
    pub bodies: Arc<Mutex<Vec<Value>>>,
    /// The `authorization` header of each request (empty when none came).
    pub authorization: Arc<Mutex<Vec<String>>>,
    /// The `traceparent` of each request (empty when none came).
    pub traceparents: Arc<Mutex<Vec<String>>>,
    /// How it answers.
    pub misbehaving: Misbehaviour,
    /// The tool its first answer asks for, and how many times (in one answer); `None` asks
    /// for the power tool once.
    pub asks_for: Option<(&'static str, usize)>,
}

/// How the local chat-completions server misbehaves, if it does.
#[derive(Clone, Copy, Default)]
pub enum Misbehaviour {
    #[default]
    None,
    /// Answers 500.
    Fails,
    /// Answers with a body (JSON, or an event stream) larger than toolplane reads.
    AnswersTooMuch,
    /// Asks for more tool calls than a turn makes.
    CallsTooManyTools,
    /// Answers 200 with an error in place of the answer; streaming, sends some words and then
    /// an `error:` line, as llama.cpp's server does.
    ReportsAnError,
    /// Answers its first `times` requests with `status` (an OpenAI error, and `retry-after-ms:
    /// 10`), then as [`Misbehaviour::None`].
    FailsFirst {
        /// The status of the failures.
        status: StatusCode,
        /// How many requests fail.
        times: usize,
    },
    /// Answers in one piece (one chunk, streaming) as many bytes as the last message's
    /// content says, naming a model of [`LONG_MODEL_NAME_BYTES`] bytes.
    AnswersAsLongAsAsked,
    /// Streams words for ever (a model repeating itself); answers JSON as
    /// [`Misbehaviour::None`] does.
    StreamsForever,
    /// Ends the answer before it is finished: JSON cut off, or an event stream that stops
    /// after some words, with no finish_reason and no `[DONE]`.
    EndsEarly,
}

/// The error the model reports when it is told to.
pub const REPORTED_ERROR: &str = "the request exceeds the available context size";

/// The length of the model name an answer of [`Misbehaviour::AnswersAsLongAsAsked`] gives.
pub const LONG_MODEL_NAME_BYTES: usize = 100_000;

/// The first words of an answer that then fails.
const FIRST_WORDS: &str = r#"{"model": "mock-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial "}}]}"#;

/// The arguments of the tool call it asks for.
const ARGUMENTS: &str = r#"{"alpha_matter": 3, "generator_type": "worldEngine"}"#;

/// The event stream of `chunks`, after a comment and an event of empty data (as proxies send
/// to keep a stream open), ending with `[DONE]`.
fn sse(chunks: &[Value]) -> Response {
    let mut body = ": keep-alive\n\ndata:\n\n".to_owned();
    body += &chunks
        .iter()
        .map(|chunk| format!("data: {chunk}\n\n"))
        .collect::<String>();
    body.push_str("data: [DONE]\n\n");
    event_stream(body)
}

fn event_stream(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn chat(State(mock): State<Mock>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let nth = {
        let mut bodies = mock.bodies.lock().expect("lock");
        bodies.push(body.clone());
        bodies.len()
    };
    mock.authorization.lock().expect("lock").push(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    );
    mock.traceparents.lock().expect("lock").push(
        headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    );
    let stream = body["stream"] == true;
    match mock.misbehaving {
        Misbehaviour::None => {}
        Misbehaviour::FailsFirst { status, times } if nth <= times => {
            let error = json!({"error": {"message": "slow down", "type": "rate_limit_exceeded"}});
            return (status, [("retry-after-ms", "10")], Json(error)).into_response();
        }
        Misbehaviour::FailsFirst { .. } => {}
        Misbehaviour::ReportsAnError if stream => {
            let error = json!({"code": 400, "message": REPORTED_ERROR, "type": "exceed_context_size_error"});
            return event_stream(format!("data: {FIRST_WORDS}\n\nerror: {error}\n\n"));
        }
        Misbehaviour::ReportsAnError => {
            return Json(json!({"error": {"message": REPORTED_ERROR, "type": "invalid_request_error", "code": 400}}))
                .into_response();
        }
        Misbehaviour::EndsEarly if stream => {
            return event_stream(format!("data: {FIRST_WORDS}\n\n"));
        }
        Misbehaviour::EndsEarly => {
            let cut = r#"{"model": "mock-model", "choices": [{"index": 0, "message": {"role": "assistant", "content": "partial"#;
            return ([(header::CONTENT_TYPE, "application/json")], cut).into_response();
        }
        Misbehaviour::Fails => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "model overloaded").into_response();
        }
        Misbehaviour::AnswersTooMuch => {
            let content = "x".repeat(MAX_ANSWER_BYTES + 1);
            let message = json!({"role": "assistant", "content": content});
            return if stream {
                sse(&[json!({"choices": [{"index": 0, "delta": message}]})])
            } else {
                Json(json!({"choices": [{"index": 0, "message": message}]})).into_response()
            };
        }
        Misbehaviour::StreamsForever if stream => {
            let chunk =
                json!({"choices": [{"index": 0, "delta": {"content": "again ".repeat(200)}}]});
            let event = axum::body::Bytes::from(format!("data: {chunk}\n\n"));
            let events = futures_util::stream::repeat_with(move || {
                Ok::<_, std::convert::Infallible>(event.clone())
            });
            return (
                [(header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(events),
            )
                .into_response();
        }
        Misbehaviour::StreamsForever => {}
        Misbehaviour::AnswersAsLongAsAsked => {
            let asked = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str()?.parse().ok())
                .expect("a length asked for");
            let content = "x".repeat(asked);
            let model = "m".repeat(LONG_MODEL_NAME_BYTES);
            return if stream {
                let delta = json!({"role": "assistant", "content": content});
                sse(&[
                    json!({"model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]}),
                ])
            } else {
                let message = json!({"role": "assistant", "content": content});
                Json(json!({"model": model, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}))
                    .into_response()
            };
        }
        Misbehaviour::CallsTooManyTools => {
            let calls: Vec<Value> = (0..=MAX_TOOL_CALLS_PER_TURN)
                .map(|index| {
                    json!({"id": format!("call_{index}"), "type": "function",
                    "function": {"name": "structs_calculate_power", "arguments": ARGUMENTS}})
                })
                .collect();
            if stream {
                let chunks: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(index, call)| {
                        let mut call = call.clone();
                        call["index"] = json!(index);
                        json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
                    })
                    .collect();
                return sse(&chunks);
            }
            return Json(
                json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": calls}}]}),
            )
            .into_response();
        }
    }
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let after_tool = last["role"] == "tool";
    let usage = if after_tool {
        json!({"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25})
    } else {
        json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    };
    let answer = format!(
        "the tool said {}",
        last["content"].as_str().unwrap_or_default()
    );
    if let (Some((tool, times)), false) = (mock.asks_for, after_tool) {
        let calls: Vec<Value> = (0..times)
            .map(|index| {
                json!({"index": index, "id": format!("call_{index}"), "type": "function",
                       "function": {"name": tool, "arguments": "{}"}})
            })
            .collect();
        return if stream {
            sse(&[
                json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": "tool_calls"}]}),
            ])
        } else {
            Json(
                json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": calls}}]}),
            )
            .into_response()
        };
    }
    match (stream, after_tool) {
        (false, true) => Json(json!({"model": "mock-model", "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}], "usage": usage})).into_response(),
        (false, false) => Json(json!({"model": "mock-model", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "structs_calculate_power", "arguments": ARGUMENTS}}]}}], "usage": usage})).into_response(),
        (true, true) => sse(&[
            json!({"model": "mock-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "the tool "}}]}),
            json!({"model": "mock-model", "choices": [{"index": 0, "delta": {"content": &answer["the tool ".len()..]}}]}),
            json!({"model": "mock-model", "choices": [], "usage": usage}),
        ]),
        (true, false) => {
            let (head, tail) = ARGUMENTS.split_at(20);
            sse(&[
                json!({"model": "mock-model", "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "structs_calculate_power", "arguments": ""}}]}}]}),
                json!({"model": "mock-model", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": head}}]}}]}),
                json!({"model": "mock-model", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": tail}}]}, "finish_reason": "tool_calls"}]}),
                json!({"model": "mock-model", "choices": [], "usage": usage}),
            ])
        }
    }
}

/// A toolplane server whose agents use the model `mock` serves, with the structs provider
/// registered.
pub async fn agent_server(mock: Mock) -> (TestServer, TestProvider) {
    let (server, provider, _) = agent_server_with_metrics(mock).await;
    (server, provider)
}

/// As [`agent_server`], serving metrics too; answers the metrics address as well.
pub async fn agent_server_with_metrics(mock: Mock) -> (TestServer, TestProvider, SocketAddr) {
    let base_url = start_mock(mock).await;
    let (server, metrics) = TestServer::start_with_metrics(ServerOptions {
        model: Some(config(base_url)),
        ..test_options()
    })
    .await;
    let provider = start_structs_provider(&server).await;
    (server, provider, metrics)
}

/// A turn's request: one user message asking for power.
pub fn turn() -> Option<pb::ChatCompletionRequest> {
    Some(pb::ChatCompletionRequest {
        messages: vec![pb::CanonicalMessage {
            role: pb::Role::User as i32,
            content: "how much power?".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// Serves the chat-completions wire format on 127.0.0.1:0; returns its base URL.
pub async fn start_mock(mock: Mock) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        // Conversations of long answers are sent back whole (axum reads 2 MB by default).
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(mock);
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("mock serves");
    });
    format!("http://{addr}/v1")
}

/// The client configuration of a model at `base_url`.
pub fn config(base_url: String) -> OpenAiConfig {
    OpenAiConfig {
        base_url,
        model: "configured-model".into(),
        api_key: Some("test-key".into()),
        timeout: Duration::from_secs(10),
        max_retries: toolplane::agent::model_retries::DEFAULT_MODEL_RETRIES,
        max_tokens_field: Default::default(),
    }
}

/// The power tool, as offered to a model.
pub fn power_tool() -> OfferedTool {
    OfferedTool {
        name: "structs_calculate_power".into(),
        description: "power".into(),
        parameters: json!({"type": "object", "properties": {"alpha_matter": {"type": "number"}}}),
    }
}

/// A model call of one user message saying `words`, offering the power tool.
pub fn asking(words: &str) -> ModelRequest {
    ModelRequest {
        model: None,
        messages: vec![CanonicalMessage::new(Role::User, words.into())],
        tools: vec![power_tool()],
        temperature: None,
        max_tokens: None,
        trace: None,
    }
}
