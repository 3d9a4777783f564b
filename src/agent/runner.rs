//! The tool-calling loop behind Complete and StreamComplete.
//!
//! Every turn walks the whole cycle the seed's state machine allows:
//! Idle -> Thinking (a model call, with the agent's tools offered) -> ToolCall (each requested
//! tool invoked through the invocation engine: schema validation, deadline, rate limit and an
//! invocation record carrying the turn's correlation id) -> Reflecting (a model call with the
//! tool results and no tools offered, whose answer is final) -> Idle. A turn in which the model
//! asks for no tool passes through ToolCall and Reflecting without calling anything, since the
//! machine has no other way back to Idle. A tool's error is handed to the model as that tool's
//! result. If the turn fails or its caller goes away, the conversation is put back as it was
//! before the turn and the agent is reset to Idle (and saved so, when agents are kept on disk:
//! a failed turn before its error is answered).

use crate::spans::Spans;
use crate::trace_context::TraceContext;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures_util::StreamExt;

use super::error::AgentError;
use super::model::{LlmProvider, OfferedTool, tool_call_message, tool_result_message};
use super::model_calls::ModelCalls;
use super::store::{Agent, AgentStore, Transition, message_bytes};
use super::types::{
    AgentState, CanonicalMessage, ChatCompletionRequest, ChatCompletionResponse, Role, TokenUsage,
};
use crate::agent::turn_events::TurnEventSender;
use crate::envelope::TenantId;
use crate::invoke::Invoker;
use crate::invoke::records::InvocationStatus;
use crate::registry::search::SearchQuery;
use crate::registry::{Registry, ServiceName, ToolFilter, ToolName, ToolRef};
use function_names::{allowed_names, function_names, is_allowed};
pub use turn_bytes::MessageBound;
use turn_bytes::TurnBytes;
use turn_guard::TurnGuard;

/// The most tools offered to a model in one call: OpenAI's Chat Completions API takes at most
/// 128 function tools. An agent that may use more (its `allowed_tools`, or its tenant's
/// tools) is offered the ones of them that best match each turn (see `Registry::search`).
pub const MAX_OFFERED_TOOLS: usize = 128;

#[path = "function_names.rs"]
mod function_names;
#[path = "runner_model.rs"]
mod model_requests;
#[path = "runner_tools.rs"]
mod tool_calls;
#[path = "runner_turn_bytes.rs"]
mod turn_bytes;
#[path = "runner_guard.rs"]
mod turn_guard;
pub use model_requests::MAX_TOOL_CALLS_PER_TURN;
pub(crate) use model_requests::too_many_tool_calls;

/// The most tool calls of one model answer that run at once unless set otherwise
/// (`max_concurrent_tool_calls`); the others start as earlier ones finish.
pub const DEFAULT_CONCURRENT_TOOL_CALLS: usize = 8;

/// What happened during a turn, for streaming callers.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// More of the model's words.
    Delta(String),
    /// The agent changed state.
    Transition(Transition),
    /// A tool call finished.
    ToolCall(ToolCallSummary),
}

/// One tool call of a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallSummary {
    /// The tool.
    pub tool_name: String,
    /// The service that offered it (empty when the model named a tool it may not use).
    pub service_name: String,
    /// The invocation record's id (empty when nothing was invoked).
    pub invocation_id: String,
    /// How the call ended.
    pub status: InvocationStatus,
    /// The ErrorInfo reason of a failure; empty on success.
    pub error_reason: String,
}

/// A finished turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The final answer.
    pub response: ChatCompletionResponse,
    /// The tools called on the way.
    pub tool_calls: Vec<ToolCallSummary>,
}

/// What the model calls and tool calls of a turn came to, before it is kept.
struct Answered {
    /// The model's last answer (possibly blank).
    final_content: String,
    /// The model that gave it.
    model: String,
    /// The tokens of the turn's model calls, when the model said.
    usage: Option<TokenUsage>,
    /// The tools called on the way.
    tool_calls: Vec<ToolCallSummary>,
}

/// Runs turns for agents.
#[derive(Debug, Clone)]
pub struct AgentRunner {
    store: Arc<AgentStore>,
    registry: Registry,
    invoker: Invoker,
    model: Arc<dyn LlmProvider>,
    spans: Spans,
    /// Where the turns' model calls are counted.
    model_calls: Arc<ModelCalls>,
    /// The most tool calls of one answer that run at once (at least 1).
    concurrent_tool_calls: usize,
    /// The bound on one message of a conversation, if any.
    message_bound: Option<MessageBound>,
}

/// The tools an agent may use, under the function names the model sees.
struct Catalog {
    offered: Vec<OfferedTool>,
    by_function: HashMap<String, (ServiceName, ToolName)>,
}

impl AgentRunner {
    /// A runner over these parts.
    pub fn new(
        store: Arc<AgentStore>,
        registry: Registry,
        invoker: Invoker,
        model: Arc<dyn LlmProvider>,
    ) -> Self {
        Self {
            store,
            registry,
            invoker,
            model,
            spans: Spans::off(),
            model_calls: Arc::default(),
            concurrent_tool_calls: DEFAULT_CONCURRENT_TOOL_CALLS,
            message_bound: None,
        }
    }

    /// The same runner, running at most `calls` tool calls of one answer at once (at least 1).
    pub fn with_concurrent_tool_calls(self, calls: usize) -> Self {
        Self {
            concurrent_tool_calls: calls.max(1),
            ..self
        }
    }

    /// The same runner, counting its model calls in `calls`.
    pub fn counting_model_calls_in(self, calls: Arc<ModelCalls>) -> Self {
        Self {
            model_calls: calls,
            ..self
        }
    }

    /// The same runner, with a client span in `spans` for each model call.
    pub fn with_spans(self, spans: Spans) -> Self {
        Self { spans, ..self }
    }

    /// The agents.
    pub fn store(&self) -> &Arc<AgentStore> {
        &self.store
    }

    /// The tools offered to `agent` for a turn of `messages`: its allowed tools (default:
    /// every tool of its tenant), past [`MAX_OFFERED_TOOLS`] the ones of them that best match
    /// the turn's messages and the agent's system prompt, each under its own name, or
    /// `service__tool` where the name is ambiguous or not a valid function name (see
    /// [`function_names`]).
    async fn catalog(&self, agent: &Agent, messages: &[CanonicalMessage]) -> Catalog {
        let allowed = allowed_names(agent);
        let mut tools: Vec<_> = self
            .registry
            .all_tools(agent.tenant)
            .into_iter()
            .filter(|found| is_allowed(allowed.as_ref(), found))
            .collect();
        if tools.len() > MAX_OFFERED_TOOLS {
            let candidates = tools.len();
            tools = self.best_matches(agent, allowed.as_ref(), messages).await;
            tracing::info!(agent = %agent.id, offered = tools.len(), candidates, "more tools than a model call takes: offering those that best match the turn");
        }
        let mut catalog = Catalog {
            offered: Vec::new(),
            by_function: HashMap::new(),
        };
        let names =
            (tools.iter()).map(|found| (found.service.name.as_str(), found.tool.name.as_str()));
        for (found, function) in tools.iter().zip(function_names(names)) {
            catalog.offered.push(OfferedTool {
                name: function.clone(),
                description: found.tool.description.clone(),
                parameters: found.tool.input_schema_json(),
            });
            catalog.by_function.insert(
                function,
                (found.service.name.clone(), found.tool.name.clone()),
            );
        }
        catalog
    }

    /// The [`MAX_OFFERED_TOOLS`] tools the agent may use (`allowed`, as [`allowed_names`]
    /// gives them) that best match the turn's messages and its system prompt (a search, in the
    /// pool of heavy work: the first one builds the search indexes).
    async fn best_matches(
        &self,
        agent: &Agent,
        allowed: Option<&HashSet<&str>>,
        messages: &[CanonicalMessage],
    ) -> Vec<ToolRef> {
        let mut text: String = messages
            .iter()
            .map(|message| message.content.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        text.push(' ');
        text.push_str(agent.config.system_prompt.as_deref().unwrap_or_default());
        let Some(query) = SearchQuery::from_text(&text) else {
            return Vec::new();
        };
        let (registry, tenant) = (self.registry.clone(), agent.tenant);
        let allowed: Option<HashSet<String>> =
            allowed.map(|names| names.iter().map(|&name| name.to_owned()).collect());
        let search = move || {
            // Among allowed tools, every match is ranked and the allowed ones kept.
            let limit = allowed.as_ref().map_or(MAX_OFFERED_TOOLS, |_| usize::MAX);
            let found = registry.search(tenant, &ToolFilter::default(), &query, limit);
            found
                .hits
                .into_iter()
                .map(|hit| hit.tool)
                .filter(|found| is_allowed(allowed.as_ref(), found))
                .take(MAX_OFFERED_TOOLS)
                .collect()
        };
        // In the pool of heavy work, as SearchTools is (`invoke::heavy`); a failed search
        // offers no tools rather than failing the turn.
        let search = move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(search));
        self.invoker
            .heavy_work()
            .run_to_end(agent.tenant, search)
            .await
            .unwrap_or_else(|_| {
                tracing::warn!(agent = %agent.id, "the search for the turn's tools failed: offering none");
                Vec::new()
            })
    }

    fn emit(events: Option<&TurnEventSender>, event: TurnEvent) {
        if let Some(events) = events {
            events.send(event);
        }
    }

    fn step(
        agent: &Agent,
        to: AgentState,
        note: &str,
        events: Option<&TurnEventSender>,
    ) -> Result<(), AgentError> {
        let mut data = agent.data();
        data.transition(to, note)?;
        if let Some(last) = data.transitions.back() {
            Self::emit(events, TurnEvent::Transition(last.clone()));
        }
        Ok(())
    }

    /// Runs one turn of `agent` for `request`. With `events`, model answers are streamed and
    /// every transition and tool call is reported as it happens. The tools it calls get the
    /// caller's `trace` context.
    pub async fn complete(
        &self,
        tenant: TenantId,
        correlation_id: &str,
        trace: Option<&TraceContext>,
        agent: &str,
        request: ChatCompletionRequest,
        events: Option<TurnEventSender>,
    ) -> Result<TurnOutcome, AgentError> {
        request.validate()?;
        let max_bytes = self.store.max_conversation_bytes();
        let bytes: usize = request.messages.iter().map(message_bytes).sum();
        if max_bytes != 0 && bytes > max_bytes {
            return Err(AgentError::InvalidField {
                field: "messages".to_owned(),
                problem: format!(
                    "the messages hold {bytes} bytes, more than a conversation keeps \
                     ({max_bytes}, max_conversation_bytes); send less, or ask the operator to \
                     raise the limit"
                ),
            });
        }
        let agent = self.store.get(tenant, agent)?;
        let events = events.as_ref();
        let mut guard = TurnGuard::begin(Arc::clone(&agent), Arc::clone(&self.store), &request)?;
        let mut turn = TurnBytes {
            used: bytes,
            max: max_bytes,
            message: self.message_bound,
        };
        let answered = self
            .converse(&agent, &request, correlation_id, trace, events, &mut turn)
            .await;
        let Answered {
            final_content,
            model,
            usage,
            tool_calls,
        } = match answered {
            Ok(answered) => answered,
            Err(error) => {
                guard.give_up().await;
                return Err(error);
            }
        };
        let content = if final_content.trim().is_empty() {
            "(the model gave no answer)".to_owned()
        } else {
            final_content
        };
        let message = CanonicalMessage::new(Role::Assistant, content);
        if let Err(error) = turn.add(&message, "the model's answer") {
            guard.give_up().await;
            return Err(error);
        }
        // The answer joins the conversation and the agent goes back to Idle, saved, then the
        // turn is final, even if the caller goes away meanwhile; a turn that cannot be saved is
        // undone (the guard) and fails. Kept in memory only, the agent is Idle and free again
        // at once (under one lock), as a caller waiting for Idle expects.
        let store = Arc::clone(&self.store);
        let (answer, events) = (message.clone(), events.cloned());
        self.store
            .finish(move || {
                let mut data = guard.agent().data();
                data.push(answer);
                data.transition(AgentState::Idle, "")?;
                if let Some(last) = data.transitions.back() {
                    Self::emit(events.as_ref(), TurnEvent::Transition(last.clone()));
                }
                if store.keeps_files() {
                    drop(data);
                    if let Err(error) = store.save(guard.agent()) {
                        guard.undo_unsaved();
                        return Err(error);
                    }
                    data = guard.agent().data();
                }
                data.busy = false;
                data.enforce_bound(store.max_messages(), store.max_conversation_bytes());
                drop(data);
                guard.keep();
                Ok(())
            })
            .await?;
        Ok(TurnOutcome {
            response: ChatCompletionResponse {
                message,
                model,
                usage,
            },
            tool_calls,
        })
    }

    /// The model calls and tool calls of a turn of `agent` (busy, the caller's messages added):
    /// its final answer, or the error that ends it.
    async fn converse(
        &self,
        agent: &Agent,
        request: &ChatCompletionRequest,
        correlation_id: &str,
        trace: Option<&TraceContext>,
        events: Option<&TurnEventSender>,
        turn: &mut TurnBytes,
    ) -> Result<Answered, AgentError> {
        Self::step(agent, AgentState::Thinking, "", events)?;
        let catalog = self.catalog(agent, &request.messages).await;
        let first = self
            .ask_model(
                Self::model_request(agent, request, catalog.offered.clone()),
                trace,
                events,
                turn,
            )
            .await?;
        let mut usage = first.usage;
        let mut tool_calls = Vec::new();
        let (final_content, model) = if first.tool_calls.is_empty() {
            Self::step(agent, AgentState::ToolCall, "no tool calls", events)?;
            Self::step(
                agent,
                AgentState::Reflecting,
                "nothing to reflect on",
                events,
            )?;
            (first.content, first.model)
        } else {
            let asking = tool_call_message(&first.content, &first.tool_calls);
            turn.add(&asking, "the model's tool calls")?;
            agent.data().push(asking);
            Self::step(agent, AgentState::ToolCall, "", events)?;
            // The calls of one answer run at once (a model asks for several in one answer when
            // they do not depend on each other); their results join the conversation, and are
            // reported, in the order the model asked for them.
            // (The stream's items are indices: futures borrowing its items would not be Send.)
            let asked = &first.tool_calls;
            let mut calls = futures_util::stream::iter(0..asked.len())
                .map(|index| {
                    let catalog = &catalog;
                    async move {
                        let call = &asked[index];
                        let called = self
                            .call_tool(agent, correlation_id, trace, catalog, call)
                            .await;
                        (call, called)
                    }
                })
                .buffered(self.concurrent_tool_calls);
            while let Some((call, called)) = calls.next().await {
                let (result, summary) = called?;
                let result = tool_result_message(call, &result);
                turn.add(&result, "a tool's result")?;
                agent.data().push(result);
                Self::emit(events, TurnEvent::ToolCall(summary.clone()));
                tool_calls.push(summary);
            }
            drop(calls);
            Self::step(agent, AgentState::Reflecting, "", events)?;
            let second = self
                .ask_model(
                    Self::model_request(agent, request, Vec::new()),
                    trace,
                    events,
                    turn,
                )
                .await?;
            usage = match (usage, second.usage) {
                (Some(a), Some(b)) => Some(a.plus(b)),
                (a, b) => a.or(b),
            };
            (second.content, second.model)
        };
        Ok(Answered {
            final_content,
            model,
            usage,
            tool_calls,
        })
    }

    /// Moves an idle (not busy) agent along the state machine by hand.
    pub async fn transition(
        &self,
        tenant: TenantId,
        agent: &str,
        to: AgentState,
    ) -> Result<Arc<Agent>, AgentError> {
        self.store.transition(tenant, agent, to).await
    }
}
