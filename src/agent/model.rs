//! The LLMProvider seam (seed 002), extended with tools: the seed's `complete(messages)` has no
//! way to offer tools or receive tool calls, so requests carry the offered tools and replies
//! carry the tool calls the model asked for.
//!
//! Tool calls and results live in the conversation as ordinary [`CanonicalMessage`]s (the
//! seed's roles are only user, assistant and system): an assistant message asking for tools
//! carries them, as JSON, in metadata [`TOOL_CALLS_KEY`]; a tool's result is a system message
//! with [`TOOL_CALL_ID_KEY`] and [`TOOL_NAME_KEY`] in its metadata and the result JSON as content.

use crate::trace_context::TraceContext;
use std::collections::HashMap;
use std::fmt::Debug;

use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::{CanonicalMessage, Role, TokenUsage};

/// Metadata key of an assistant message's tool calls (a JSON array of [`ToolCallRequest`]).
pub const TOOL_CALLS_KEY: &str = "toolplane.tool_calls";
/// Metadata key naming the call a tool-result message answers.
pub const TOOL_CALL_ID_KEY: &str = "toolplane.tool_call_id";
/// Metadata key naming the tool of a tool-result message.
pub const TOOL_NAME_KEY: &str = "toolplane.tool_name";

/// A tool offered to the model: a function name, a description and the input JSON Schema.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The function name the model uses.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The tool's registered input JSON Schema.
    pub parameters: Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The call's id, echoed in the result.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments (a JSON object when the model wrote valid JSON).
    pub arguments: Value,
}

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model asked for; `None` takes the provider's default.
    pub model: Option<String>,
    /// The conversation so far, system prompt first.
    pub messages: Vec<CanonicalMessage>,
    /// The tools the model may call (empty: answer in words).
    pub tools: Vec<OfferedTool>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// The W3C trace context to send with the call (`traceparent`, `tracestate`), so that a
    /// model server that traces joins the turn's trace.
    pub trace: Option<TraceContext>,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The assistant's words (may be empty when it only calls tools).
    pub content: String,
    /// The tool calls it asked for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// The model that answered.
    pub model: String,
    /// Token usage, when the provider reports it.
    pub usage: Option<TokenUsage>,
    /// How many times the model server was asked before it gave this answer: 1, or more when
    /// a failed attempt was made again.
    pub attempts: u32,
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// More of the assistant's words.
    Delta(String),
    /// The whole answer, last.
    Done(ModelReply),
}

/// A model provider failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// What went wrong.
    pub message: String,
    /// How many times the model server was asked (more than 1 when attempts were made again).
    pub attempts: u32,
}

impl ModelError {
    /// A failure at the first attempt.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            attempts: 1,
        }
    }

    /// The same failure, of a call that asked the model server `attempts` times.
    #[must_use]
    pub fn after(self, attempts: u32) -> Self {
        Self { attempts, ..self }
    }
}

/// A chat model.
#[async_trait::async_trait]
pub trait LlmProvider: Send + Sync + Debug {
    /// Answers in one piece.
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError>;
    /// Answers as a stream of deltas ending with [`StreamEvent::Done`].
    async fn stream(
        &self,
        request: ModelRequest,
    ) -> Result<BoxStream<'static, Result<StreamEvent, ModelError>>, ModelError>;
}

/// The tool calls an assistant message carries.
pub fn tool_calls_of(message: &CanonicalMessage) -> Vec<ToolCallRequest> {
    message
        .metadata
        .get(TOOL_CALLS_KEY)
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default()
}

/// An assistant message asking for tool calls.
pub fn tool_call_message(content: &str, calls: &[ToolCallRequest]) -> CanonicalMessage {
    let words = if content.trim().is_empty() {
        format!(
            "calling {}",
            calls
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        content.to_owned()
    };
    let metadata = HashMap::from([(
        TOOL_CALLS_KEY.to_owned(),
        serde_json::to_string(calls).unwrap_or_default(),
    )]);
    CanonicalMessage::with_metadata(Role::Assistant, words, metadata)
}

/// A tool-result message answering `call`.
pub fn tool_result_message(call: &ToolCallRequest, result: &Value) -> CanonicalMessage {
    let metadata = HashMap::from([
        (TOOL_CALL_ID_KEY.to_owned(), call.id.clone()),
        (TOOL_NAME_KEY.to_owned(), call.name.clone()),
    ]);
    CanonicalMessage::with_metadata(Role::System, result.to_string(), metadata)
}

/// Whether a message is a tool result.
pub fn is_tool_result(message: &CanonicalMessage) -> bool {
    message.metadata.contains_key(TOOL_CALL_ID_KEY)
}
