//! The turn's model calls: the request built from the agent's conversation, and the call
//! itself, streamed or not, under a span of its own when spans are exported.

use futures_util::StreamExt;

use super::turn_bytes::TurnBytes;
use super::{AgentRunner, TurnEvent};
use crate::agent::error::AgentError;
use crate::agent::model::{ModelError, ModelReply, ModelRequest, OfferedTool, StreamEvent};
use crate::agent::store::Agent;
use crate::agent::turn_events::TurnEventSender;
use crate::agent::types::{CanonicalMessage, ChatCompletionRequest, Role};
use crate::spans::ModelAnswer;
use crate::trace_context::TraceContext;

/// The most tool calls a turn makes: a model answer asking for more fails the turn (as a
/// failing model does, the agent left as it was) rather than running them one after another
/// into the conversation. As many as the tools a model is offered, each called once.
pub const MAX_TOOL_CALLS_PER_TURN: usize = super::MAX_OFFERED_TOOLS;

/// Why a model answer asking for `asked` tool calls (a number, or "more than N") fails.
pub(crate) fn too_many_tool_calls(asked: &str) -> String {
    format!(
        "the model asked for {asked} tool calls in one answer; a turn makes at most \
         {MAX_TOOL_CALLS_PER_TURN}"
    )
}

/// Why a model call gave no answer to use.
enum Unanswered {
    /// The model failed, or its answer cannot be used.
    Failed(ModelError),
    /// Its streamed words passed what the turn may add: the turn's refusal.
    PastRoom(AgentError),
}

impl AgentRunner {
    /// Asks the model, under a span of its own when spans are exported; an answer asking for
    /// more than [`MAX_TOOL_CALLS_PER_TURN`] tool calls is its failure.
    pub(super) async fn ask_model(
        &self,
        request: ModelRequest,
        trace: Option<&TraceContext>,
        events: Option<&TurnEventSender>,
        turn: &TurnBytes,
    ) -> Result<ModelReply, AgentError> {
        let span = self.spans.model_call(trace, request.model.as_deref());
        // The model server is sent the model call's span as parent, or the turn's context.
        let mut request = request;
        request.trace = span
            .as_ref()
            .map(|span| span.trace_context())
            .or_else(|| trace.cloned());
        let mut past_room = None;
        let reply = self
            .ask_model_unspanned(request, events, turn)
            .await
            .map_err(|unanswered| match unanswered {
                Unanswered::Failed(error) => error,
                Unanswered::PastRoom(refusal) => {
                    let error = ModelError::new(refusal.to_string());
                    past_room = Some(refusal);
                    error
                }
            })
            .and_then(|reply| {
                if reply.tool_calls.len() > MAX_TOOL_CALLS_PER_TURN {
                    let asked = reply.tool_calls.len().to_string();
                    return Err(ModelError::new(too_many_tool_calls(&asked)).after(reply.attempts));
                }
                Ok(reply)
            });
        match &reply {
            Ok(reply) => self.model_calls.answered(reply.usage),
            Err(_) => self.model_calls.failed(),
        }
        if let Some(span) = span {
            span.end_model_call(match &reply {
                Ok(reply) => Ok(ModelAnswer {
                    model: &reply.model,
                    tokens: reply
                        .usage
                        .map(|usage| (usage.prompt_tokens, usage.completion_tokens)),
                    attempts: reply.attempts,
                }),
                Err(error) => Err((&error.message, error.attempts)),
            });
        }
        reply.map_err(|error| past_room.unwrap_or(AgentError::Model(error.message)))
    }

    /// The model's answer to `request`; streamed (with `events`), read no further once its
    /// words pass what `turn` may add (a model repeating itself would otherwise be read up to
    /// 32 MiB, or until it times out, for a turn undone anyway).
    async fn ask_model_unspanned(
        &self,
        request: ModelRequest,
        events: Option<&TurnEventSender>,
        turn: &TurnBytes,
    ) -> Result<ModelReply, Unanswered> {
        let Some(events) = events else {
            return self
                .model
                .complete(request)
                .await
                .map_err(Unanswered::Failed);
        };
        let mut stream = self
            .model
            .stream(request)
            .await
            .map_err(Unanswered::Failed)?;
        let mut streamed = 0usize;
        while let Some(event) = stream.next().await {
            match event.map_err(Unanswered::Failed)? {
                StreamEvent::Delta(text) => {
                    streamed = streamed.saturating_add(text.len());
                    if let Some(refusal) = turn.answer_refusal(streamed) {
                        return Err(Unanswered::PastRoom(refusal));
                    }
                    Self::emit(Some(events), TurnEvent::Delta(text));
                }
                StreamEvent::Done(reply) => return Ok(reply),
            }
        }
        Err(Unanswered::Failed(ModelError::new(
            "the model's stream ended without a final answer",
        )))
    }

    pub(super) fn model_request(
        agent: &Agent,
        request: &ChatCompletionRequest,
        tools: Vec<OfferedTool>,
    ) -> ModelRequest {
        let mut messages = Vec::new();
        if let Some(prompt) = &agent.config.system_prompt {
            messages.push(CanonicalMessage::new(Role::System, prompt.clone()));
        }
        messages.extend(
            agent
                .data()
                .conversation
                .iter()
                .map(|stored| stored.message.clone()),
        );
        ModelRequest {
            model: request.model.clone().or_else(|| agent.config.model.clone()),
            messages,
            tools,
            temperature: request.temperature,
            max_tokens: request.max_tokens,
            trace: None,
        }
    }
}
