//! An OpenAI-compatible chat-completions client (`POST {base_url}/chat/completions`), as served
//! by OpenAI, vLLM, Ollama and llama.cpp's server. Tools are advertised as function tools,
//! `tool_calls` are parsed, and streaming reads the server-sent events.

use crate::grpc::outgoing_tls::http_client_builder;
use crate::trace_context::TraceContext;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use serde_json::{Value, json};

use super::model::{
    LlmProvider, ModelError, ModelReply, ModelRequest, StreamEvent, TOOL_CALL_ID_KEY,
    is_tool_result, tool_calls_of,
};
use super::model_calls::ModelCalls;
use super::model_retries;
use super::openai_answer::reply_of;
use super::types::Role;

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
    /// How many times a failed model call is tried again (see [`super::model_retries`]).
    pub max_retries: u32,
    /// The field a request's token limit is sent in.
    pub max_tokens_field: MaxTokensField,
}

/// The field of a chat-completions request that carries the most tokens to generate.
/// `max_tokens` is the one every OpenAI-compatible server reads (vLLM, Ollama, llama.cpp);
/// OpenAI deprecated it for `max_completion_tokens`, and refuses `max_tokens` for its
/// reasoning models (o1, o3, o4-mini, gpt-5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// The field's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// The OpenAI-compatible client.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    http: reqwest::Client,
    /// Where attempts made again are counted.
    calls: Option<Arc<ModelCalls>>,
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

impl OpenAiClient {
    /// A client for `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let http = http_client_builder(None)
            .timeout(config.timeout)
            .build()
            .map_err(|e| ModelError::new(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            config,
            http,
            calls: None,
        })
    }

    /// The same client, counting the attempts it makes again in `calls`.
    pub fn counting_retries_in(self, calls: Arc<ModelCalls>) -> Self {
        Self {
            calls: Some(calls),
            ..self
        }
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
            body[self.config.max_tokens_field.name()] = json!(max_tokens);
        }
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    /// Posts `body` to the chat-completions endpoint, trying again as
    /// [`super::model_retries`] says; answers the first successful response and at which
    /// attempt it came, or why none came.
    async fn post(
        &self,
        body: &Value,
        trace: Option<&TraceContext>,
    ) -> Result<(reqwest::Response, u32), ModelError> {
        let url = format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        );
        // Written once, sent as it is at each attempt.
        let body = bytes::Bytes::from(body.to_string());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (error, retried, headers) = match self.send(&url, body.clone(), trace).await {
                Ok(response) if response.status().is_success() => return Ok((response, attempts)),
                Ok(mut response) => {
                    let headers = response.headers().clone();
                    let retried = model_retries::status_is_retried(response.status(), &headers);
                    (
                        failed_answer(&url, &mut response).await,
                        retried,
                        Some(headers),
                    )
                }
                Err(error) => {
                    let retried = model_retries::error_is_retried(&error);
                    (format!("cannot reach {url}: {error}"), retried, None)
                }
            };
            if !retried || attempts > self.config.max_retries {
                let error = match attempts {
                    1 => error,
                    _ => format!("{error} (at attempt {attempts}; every attempt failed)"),
                };
                return Err(ModelError::new(error).after(attempts));
            }
            if let Some(calls) = &self.calls {
                calls.retried();
            }
            let wait = model_retries::wait_after(attempts, headers.as_ref());
            tracing::warn!(%url, attempt = attempts, ?wait, %error, "a model call failed; trying it again");
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt at posting `body` to `url`.
    async fn send(
        &self,
        url: &str,
        body: bytes::Bytes,
        trace: Option<&TraceContext>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        if let Some(trace) = trace {
            request = request.header("traceparent", trace.traceparent());
            if let Some(state) = trace.tracestate() {
                request = request.header("tracestate", state);
            }
        }
        request.send().await
    }

    /// The reply in `response` (a success, which came at attempt `attempts`), or why it cannot
    /// be used.
    async fn answer_of(
        &self,
        response: &mut reqwest::Response,
        attempts: u32,
    ) -> Result<ModelReply, ModelError> {
        let body = crate::http_answers::body_within(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| ModelError::new(format!("the answer could not be read: {e}")))?
            .ok_or_else(too_large)?;
        reply_of(&body, &self.config.model, attempts)
    }
}

/// What a model server's answer of an error status says: the status and the first 500
/// characters of its body.
async fn failed_answer(url: &str, response: &mut reqwest::Response) -> String {
    let status = response.status();
    let body = crate::http_answers::body_within(response, MAX_ERROR_ANSWER_BYTES)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    format!(
        "{url} answered {status}: {}",
        String::from_utf8_lossy(&body)
            .chars()
            .take(500)
            .collect::<String>()
    )
}

#[async_trait::async_trait]
impl LlmProvider for OpenAiClient {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        let (mut response, attempts) = self
            .post(&self.body(&request, false), request.trace.as_ref())
            .await?;
        let answered = self.answer_of(&mut response, attempts).await;
        answered.map_err(|error| error.after(attempts))
    }

    async fn stream(
        &self,
        request: ModelRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, ModelError>>, ModelError> {
        let (response, attempts) = self
            .post(&self.body(&request, true), request.trace.as_ref())
            .await?;
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| self.config.model.clone());
        let (sender, receiver) = tokio::sync::mpsc::channel(32);
        let answer = super::openai_stream::read_events(response, model, attempts, sender);
        tokio::spawn(answer);
        Ok(tokio_stream::wrappers::ReceiverStream::new(receiver).boxed())
    }
}

/// The failure of a model call whose answer is over [`MAX_ANSWER_BYTES`].
pub(super) fn too_large() -> ModelError {
    ModelError::new(format!(
        "the answer is larger than {} MiB, more than toolplane reads of a model's answer",
        MAX_ANSWER_BYTES >> 20
    ))
}
