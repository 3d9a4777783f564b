//! An OpenAI-compatible chat-completions client (`POST {base_url}/chat/completions`), as served
//! by OpenAI, vLLM, Ollama and llama.cpp's server. Tools are advertised as function tools,
//! `tool_calls` are parsed, and streaming reads the server-sent events.

use crate::grpc::outgoing_tls::http_client_builder;
use crate::trace_context::TraceContext;
use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use serde_json::{Value, json};

use super::model::{
    LlmProvider, ModelError, ModelReply, ModelRequest, StreamEvent, TOOL_CALL_ID_KEY,
    ToolCallRequest, is_tool_result, tool_calls_of,
};
use super::runner::{MAX_TOOL_CALLS_PER_TURN, too_many_tool_calls};
use super::types::{Role, TokenUsage};

/// The most a model's answer may take on the wire, its JSON or its whole event stream (a
/// streamed answer of 128k tokens, at some 200 bytes of event per token, fits); a larger one
/// fails the model call, so that a model server answering without end cannot use up
/// toolplane's memory.
pub const MAX_ANSWER_BYTES: usize = 32 << 20;

/// The most of a model server's error answer read (its first 500 characters are shown).
const MAX_ERROR_ANSWER_BYTES: usize = 64 << 10;

/// How to reach an OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API base, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The model used when a request names none.
    pub model: String,
    /// The bearer token, when the server wants one.
    pub api_key: Option<String>,
    /// How long one model call may take.
    pub timeout: Duration,
}

/// The OpenAI-compatible client.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    http: reqwest::Client,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
    }
}

fn wire_messages(request: &ModelRequest) -> Vec<Value> {
    request
        .messages
        .iter()
        .map(|message| {
            if is_tool_result(message) {
                return json!({"role": "tool", "tool_call_id": message.metadata.get(TOOL_CALL_ID_KEY), "content": message.content});
            }
            let calls = tool_calls_of(message);
            if calls.is_empty() {
                return json!({"role": role_name(message.role), "content": message.content});
            }
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|call| json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments.to_string()}}))
                .collect();
            json!({"role": "assistant", "content": message.content, "tool_calls": tool_calls})
        })
        .collect()
}

fn usage_of(value: &Value) -> Option<TokenUsage> {
    let count = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    TokenUsage::new(count("prompt_tokens")?, count("completion_tokens")?).ok()
}

/// Arguments arrive as a JSON string; anything that does not parse is kept as a string.
fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    }
}

fn parse_tool_calls(calls: Option<&Value>) -> Vec<ToolCallRequest> {
    calls
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| ToolCallRequest {
            id: call["id"].as_str().unwrap_or_default().to_owned(),
            name: call["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            arguments: parse_arguments(call["function"]["arguments"].as_str().unwrap_or_default()),
        })
        .collect()
}

/// Tool call fragments of a stream, gathered by index.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

impl OpenAiClient {
    /// A client for `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let http = http_client_builder(None)
            .timeout(config.timeout)
            .build()
            .map_err(|e| ModelError(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { config, http })
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut body = json!({
            "model": request.model.clone().unwrap_or_else(|| self.config.model.clone()),
            "messages": wire_messages(request),
            "stream": stream,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}))
                .collect();
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = request.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn post(
        &self,
        body: &Value,
        trace: Option<&TraceContext>,
    ) -> Result<reqwest::Response, ModelError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        let mut request = self.http.post(&url).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        if let Some(trace) = trace {
            request = request.header("traceparent", trace.traceparent());
            if let Some(state) = trace.tracestate() {
                request = request.header("tracestate", state);
            }
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| ModelError(format!("cannot reach {url}: {e}")))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = crate::http_answers::body_within(&mut response, MAX_ERROR_ANSWER_BYTES)
                .await
                .ok()
                .flatten()
                .unwrap_or_default();
            return Err(ModelError(format!(
                "{url} answered {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(500)
                    .collect::<String>()
            )));
        }
        Ok(response)
    }
}

#[async_trait::async_trait]
impl LlmProvider for OpenAiClient {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        let mut response = self
            .post(&self.body(&request, false), request.trace.as_ref())
            .await?;
        let body = crate::http_answers::body_within(&mut response, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| ModelError(format!("the answer could not be read: {e}")))?
            .ok_or_else(too_large)?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| ModelError(format!("the answer is not JSON: {e}")))?;
        let message = &answer["choices"][0]["message"];
        if message.is_null() {
            return Err(ModelError(format!(
                "the answer has no choices[0].message: {}",
                crate::shown::shown_json(&answer)
            )));
        }
        Ok(ModelReply {
            content: message["content"].as_str().unwrap_or_default().to_owned(),
            tool_calls: parse_tool_calls(message.get("tool_calls")),
            model: answer["model"]
                .as_str()
                .map_or_else(|| self.config.model.clone(), str::to_owned),
            usage: usage_of(&answer["usage"]),
        })
    }

    async fn stream(
        &self,
        request: ModelRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, ModelError>>, ModelError> {
        let response = self
            .post(&self.body(&request, true), request.trace.as_ref())
            .await?;
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| self.config.model.clone());
        let (sender, receiver) = tokio::sync::mpsc::channel(32);
        tokio::spawn(read_events(response, model, sender));
        Ok(tokio_stream::wrappers::ReceiverStream::new(receiver).boxed())
    }
}

/// Why a model's event stream stopped being read: its bytes could not be read, or there were
/// too many of them.
#[derive(Debug, thiserror::Error)]
enum AnswerBreak {
    #[error("{0}")]
    Read(reqwest::Error),
    #[error("{}", .0.0)]
    TooLarge(ModelError),
}

/// The failure of a model call whose answer is over [`MAX_ANSWER_BYTES`].
fn too_large() -> ModelError {
    ModelError(format!(
        "the answer is larger than {} MiB, more than toolplane reads of a model's answer",
        MAX_ANSWER_BYTES >> 20
    ))
}

/// Reads a chat-completions event stream: forwards content deltas, gathers tool-call fragments
/// by index, and ends with the whole answer. Stops early when the receiver goes away.
async fn read_events(
    response: reqwest::Response,
    mut model: String,
    sender: tokio::sync::mpsc::Sender<Result<StreamEvent, ModelError>>,
) {
    let mut read = 0;
    let within_bound = move |chunk: reqwest::Result<bytes::Bytes>| {
        let chunk = chunk.map_err(AnswerBreak::Read)?;
        read += chunk.len();
        if read > MAX_ANSWER_BYTES {
            return Err(AnswerBreak::TooLarge(too_large()));
        }
        Ok(chunk)
    };
    // sse-stream keeps an unfinished line and looks for the end of a line in new bytes only,
    // so a long event costs time in proportion to its length (eventsource-stream parsed the
    // whole buffer again for every chunk: minutes for one event of a few MiB).
    let mut events =
        sse_stream::SseStream::from_bytes_stream(response.bytes_stream().map(within_bound));
    let mut content = String::new();
    let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
    let mut usage = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                let _ = sender
                    .send(Err(ModelError(format!("broken event stream: {error}"))))
                    .await;
                return;
            }
        };
        let data = event.data.unwrap_or_default();
        if data.trim() == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if let Some(name) = chunk["model"].as_str() {
            model = name.to_owned();
        }
        if let Some(found) = usage_of(&chunk["usage"]) {
            usage = Some(found);
        }
        let delta = &chunk["choices"][0]["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            content.push_str(text);
            if sender
                .send(Ok(StreamEvent::Delta(text.to_owned())))
                .await
                .is_err()
            {
                return;
            }
        }
        for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
            let partial = calls
                .entry(fragment["index"].as_u64().unwrap_or(0))
                .or_default();
            partial
                .id
                .push_str(fragment["id"].as_str().unwrap_or_default());
            partial
                .name
                .push_str(fragment["function"]["name"].as_str().unwrap_or_default());
            partial.arguments.push_str(
                fragment["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default(),
            );
        }
        if calls.len() > MAX_TOOL_CALLS_PER_TURN {
            // The turn refuses such an answer: its reading stops here rather than gathering
            // every call first.
            let asked = format!("more than {MAX_TOOL_CALLS_PER_TURN}");
            let _ = sender
                .send(Err(ModelError(too_many_tool_calls(&asked))))
                .await;
            return;
        }
    }
    let tool_calls = calls
        .into_values()
        .map(|p| ToolCallRequest {
            id: p.id,
            name: p.name,
            arguments: parse_arguments(&p.arguments),
        })
        .collect();
    let _ = sender
        .send(Ok(StreamEvent::Done(ModelReply {
            content,
            tool_calls,
            model,
            usage,
        })))
        .await;
}
