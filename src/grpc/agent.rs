//! The thin adapter for `toolplane.v1.AgentService`, and its wire conversions.

use std::collections::HashMap;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::accept::accept;
use super::invoke::status_to_pb;
use super::trace_headers::call_trace;
use crate::agent::AgentError;
use crate::agent::runner::{AgentRunner, ToolCallSummary, TurnEvent, TurnOutcome};
use crate::agent::store::{Agent, AgentConfig, Transition};
use crate::agent::types::{
    AgentState, CanonicalMessage, ChatCompletionRequest, ChatCompletionResponse, MessageId, Role,
};
use crate::pb;
use crate::pb::agent_service_server::AgentService;
use crate::registry::{ToolName, paging};

/// The longest agent name.
pub const MAX_AGENT_NAME_LEN: usize = 64;

/// Serves `toolplane.v1.AgentService`.
#[derive(Debug, Clone)]
pub struct AgentApi {
    runner: AgentRunner,
}

impl AgentApi {
    /// An adapter over `runner`.
    pub fn new(runner: AgentRunner) -> Self {
        Self { runner }
    }
}

fn invalid(field: &str, problem: impl Into<String>) -> AgentError {
    AgentError::InvalidField {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

fn timestamp(time: DateTime<Utc>) -> Option<prost_types::Timestamp> {
    Some(std::time::SystemTime::from(time).into())
}

fn state_to_pb(state: AgentState) -> pb::AgentState {
    match state {
        AgentState::Idle => pb::AgentState::Idle,
        AgentState::Thinking => pb::AgentState::Thinking,
        AgentState::ToolCall => pb::AgentState::ToolCall,
        AgentState::Reflecting => pb::AgentState::Reflecting,
    }
}

fn state_from_pb(value: i32) -> Result<AgentState, AgentError> {
    match pb::AgentState::try_from(value) {
        Ok(pb::AgentState::Idle) => Ok(AgentState::Idle),
        Ok(pb::AgentState::Thinking) => Ok(AgentState::Thinking),
        Ok(pb::AgentState::ToolCall) => Ok(AgentState::ToolCall),
        Ok(pb::AgentState::Reflecting) => Ok(AgentState::Reflecting),
        Ok(pb::AgentState::Unspecified) | Err(_) => Err(invalid(
            "to",
            format!("to must be an AgentState other than AGENT_STATE_UNSPECIFIED, got {value}"),
        )),
    }
}

fn message_from_pb(
    index: usize,
    message: pb::CanonicalMessage,
) -> Result<CanonicalMessage, AgentError> {
    let field = |name: &str| format!("request.messages[{index}].{name}");
    let id = if message.id.is_empty() {
        MessageId::new()
    } else {
        MessageId(
            uuid::Uuid::parse_str(&message.id)
                .map_err(|_| invalid(&field("id"), "id must be a UUID or empty"))?,
        )
    };
    let role = match pb::Role::try_from(message.role) {
        Ok(pb::Role::User) => Role::User,
        Ok(pb::Role::Assistant) => Role::Assistant,
        Ok(pb::Role::System) => Role::System,
        Ok(pb::Role::Unspecified) | Err(_) => {
            return Err(invalid(
                &field("role"),
                "role must be ROLE_USER, ROLE_ASSISTANT or ROLE_SYSTEM",
            ));
        }
    };
    let timestamp = match message.timestamp {
        None => Utc::now(),
        Some(ts) => {
            DateTime::<Utc>::from_timestamp(ts.seconds, u32::try_from(ts.nanos).unwrap_or(0))
                .ok_or_else(|| invalid(&field("timestamp"), "timestamp is out of range"))?
        }
    };
    let converted = CanonicalMessage {
        id,
        role,
        content: message.content,
        timestamp,
        metadata: message.metadata.into_iter().collect(),
    };
    // The seed's check says what is wrong but not where: an empty content, or a timestamp out
    // of its window.
    let checked = if converted.is_empty() {
        "content"
    } else {
        "timestamp"
    };
    converted
        .validate_self()
        .map_err(|error| invalid(&field(checked), error.to_string()))?;
    Ok(converted)
}

fn message_to_pb(message: &CanonicalMessage) -> pb::CanonicalMessage {
    pb::CanonicalMessage {
        id: message.id.to_string(),
        role: match message.role {
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
            Role::System => pb::Role::System,
        } as i32,
        content: message.content.clone(),
        timestamp: timestamp(message.timestamp),
        metadata: message
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<HashMap<_, _>>(),
    }
}

fn request_from_pb(
    request: Option<pb::ChatCompletionRequest>,
) -> Result<ChatCompletionRequest, AgentError> {
    let request = request.ok_or_else(|| invalid("request", "request is required"))?;
    let messages = request
        .messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| message_from_pb(index, message))
        .collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(invalid(
            "request.messages",
            "at least one message is needed",
        ));
    }
    if let Some(temperature) = request.temperature {
        // The seed's rule, with the field it concerns named.
        ChatCompletionRequest::check_temperature(temperature)
            .map_err(|rule| invalid("request.temperature", rule))?;
    }
    if request.max_tokens == Some(0) {
        return Err(invalid(
            "request.max_tokens",
            "max_tokens must be at least 1 when set (leave it unset for the model's own limit)",
        ));
    }
    Ok(ChatCompletionRequest {
        messages,
        model: request.model.filter(|m| !m.is_empty()),
        temperature: request.temperature,
        max_tokens: request.max_tokens,
        stream: request.stream,
    })
}

fn response_to_pb(response: &ChatCompletionResponse) -> pb::ChatCompletionResponse {
    pb::ChatCompletionResponse {
        message: Some(message_to_pb(&response.message)),
        model: response.model.clone(),
        usage: response.usage.map(|u| pb::TokenUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }),
    }
}

fn transition_to_pb(transition: &Transition) -> pb::StateTransition {
    pb::StateTransition {
        from: state_to_pb(transition.from) as i32,
        to: state_to_pb(transition.to) as i32,
        at: timestamp(transition.at),
        note: transition.note.clone(),
    }
}

fn tool_call_to_pb(call: &ToolCallSummary) -> pb::ToolCallSummary {
    pb::ToolCallSummary {
        tool_name: call.tool_name.clone(),
        service_name: call.service_name.clone(),
        invocation_id: call.invocation_id.clone(),
        status: status_to_pb(call.status) as i32,
        error_reason: call.error_reason.clone(),
    }
}

/// The wire form of an agent.
pub fn agent_to_pb(agent: &Agent) -> pb::Agent {
    let data = agent.data();
    pb::Agent {
        status: Some(pb::AgentStatus {
            id: agent.id.to_string(),
            state: state_to_pb(data.status.state) as i32,
            last_activity: timestamp(data.status.last_activity),
            messages_processed: data.status.messages_processed,
        }),
        name: agent.config.name.clone(),
        model: agent.config.model.clone().unwrap_or_default(),
        system_prompt: agent.config.system_prompt.clone().unwrap_or_default(),
        allowed_tools: agent.config.allowed_tools.clone().unwrap_or_default(),
        created_at: timestamp(agent.created_at),
        busy: data.busy,
        recent_transitions: data.transitions.iter().map(transition_to_pb).collect(),
    }
}

fn config_from_pb(request: pb::CreateAgentRequest) -> Result<AgentConfig, AgentError> {
    let name = request.name;
    let name_ok = (1..=MAX_AGENT_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !name_ok || uuid::Uuid::parse_str(&name).is_ok() {
        return Err(invalid(
            "name",
            format!(
                "name {name:?} must be 1 to {MAX_AGENT_NAME_LEN} characters of [A-Za-z0-9_.-], and not a UUID"
            ),
        ));
    }
    for (index, tool) in request.allowed_tools.iter().enumerate() {
        ToolName::parse(tool)
            .map_err(|problem| invalid(&format!("allowed_tools[{index}]"), problem))?;
    }
    Ok(AgentConfig {
        name,
        model: Some(request.model).filter(|m| !m.is_empty()),
        system_prompt: Some(request.system_prompt).filter(|p| !p.trim().is_empty()),
        allowed_tools: Some(request.allowed_tools).filter(|tools| !tools.is_empty()),
    })
}

fn event_to_pb(event: TurnEvent) -> pb::stream_complete_response::Event {
    match event {
        TurnEvent::Delta(text) => pb::stream_complete_response::Event::ContentDelta(text),
        TurnEvent::Transition(transition) => {
            pb::stream_complete_response::Event::Transition(transition_to_pb(&transition))
        }
        TurnEvent::ToolCall(call) => {
            pb::stream_complete_response::Event::ToolCall(tool_call_to_pb(&call))
        }
    }
}

fn outcome_to_pb(meta: pb::Meta, outcome: &TurnOutcome) -> pb::CompleteResponse {
    pb::CompleteResponse {
        meta: Some(meta),
        response: Some(response_to_pb(&outcome.response)),
        tool_calls: outcome.tool_calls.iter().map(tool_call_to_pb).collect(),
    }
}

type TurnStream = Pin<Box<dyn Stream<Item = Result<pb::StreamCompleteResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for AgentApi {
    #[instrument(skip_all, fields(rpc = "CreateAgent", tenant, correlation_id))]
    async fn create_agent(
        &self,
        request: Request<pb::CreateAgentRequest>,
    ) -> Result<Response<pb::CreateAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self
            .runner
            .store()
            .create(meta.tenant, config_from_pb(request)?)?;
        Ok(Response::new(pb::CreateAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "GetAgent", tenant, correlation_id))]
    async fn get_agent(
        &self,
        request: Request<pb::GetAgentRequest>,
    ) -> Result<Response<pb::GetAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self.runner.store().get(meta.tenant, &request.agent_id)?;
        Ok(Response::new(pb::GetAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "ListAgents", tenant, correlation_id))]
    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let (meta, request) = accept(request)?;
        let size = paging::page_size(request.page_size)?;
        let after = paging::decode_sequence_token(&request.page_token, "agents")?;
        let mut agents = self.runner.store().list(meta.tenant, after, size + 1);
        let next_page_token = if agents.len() > size {
            agents.truncate(size);
            paging::encode_sequence_token(agents[size - 1].order, "agents")
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListAgentsResponse {
            meta: Some(meta.response()),
            agents: agents.iter().map(|a| agent_to_pb(a)).collect(),
            next_page_token,
        }))
    }

    #[instrument(skip_all, fields(rpc = "DeleteAgent", tenant, correlation_id))]
    async fn delete_agent(
        &self,
        request: Request<pb::DeleteAgentRequest>,
    ) -> Result<Response<pb::DeleteAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        self.runner.store().delete(meta.tenant, &request.agent_id)?;
        Ok(Response::new(pb::DeleteAgentResponse {
            meta: Some(meta.response()),
        }))
    }

    #[instrument(skip_all, fields(rpc = "TransitionAgent", tenant, correlation_id))]
    async fn transition_agent(
        &self,
        request: Request<pb::TransitionAgentRequest>,
    ) -> Result<Response<pb::TransitionAgentResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent =
            self.runner
                .transition(meta.tenant, &request.agent_id, state_from_pb(request.to)?)?;
        Ok(Response::new(pb::TransitionAgentResponse {
            meta: Some(meta.response()),
            agent: Some(agent_to_pb(&agent)),
        }))
    }

    #[instrument(skip_all, fields(rpc = "Complete", tenant, correlation_id))]
    async fn complete(
        &self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let trace = call_trace(&request);
        let (meta, request) = accept(request)?;
        let chat = request_from_pb(request.request)?;
        if chat.stream {
            return Err(invalid(
                "request.stream",
                "Complete answers in one piece; use StreamComplete to stream",
            )
            .into());
        }
        let outcome = self
            .runner
            .complete(
                meta.tenant,
                &meta.correlation_id,
                trace.as_ref(),
                &request.agent_id,
                chat,
                None,
            )
            .await?;
        Ok(Response::new(outcome_to_pb(meta.response(), &outcome)))
    }

    type StreamCompleteStream = TurnStream;

    #[instrument(skip_all, fields(rpc = "StreamComplete", tenant, correlation_id))]
    async fn stream_complete(
        &self,
        request: Request<pb::StreamCompleteRequest>,
    ) -> Result<Response<Self::StreamCompleteStream>, Status> {
        let trace = call_trace(&request);
        let (meta, request) = accept(request)?;
        let chat = request_from_pb(request.request)?;
        let (sender, receiver) = mpsc::channel::<Result<pb::StreamCompleteResponse, Status>>(64);
        let (events, mut turn_events) = mpsc::unbounded_channel();
        let runner = self.runner.clone();
        tokio::spawn(async move {
            let envelope = |event| {
                Ok(pb::StreamCompleteResponse {
                    meta: Some(meta.response()),
                    event: Some(event),
                })
            };
            let turn = runner.complete(
                meta.tenant,
                &meta.correlation_id,
                trace.as_ref(),
                &request.agent_id,
                chat,
                Some(events),
            );
            tokio::pin!(turn);
            // The turn runs until it ends or the client goes away (dropping it undoes the turn).
            let outcome = loop {
                tokio::select! {
                    outcome = &mut turn => break outcome,
                    Some(event) = turn_events.recv() => {
                        if sender.send(envelope(event_to_pb(event))).await.is_err() {
                            return;
                        }
                    }
                    () = sender.closed() => return,
                }
            };
            while let Ok(event) = turn_events.try_recv() {
                let _ = sender.send(envelope(event_to_pb(event))).await;
            }
            let last = match outcome {
                Ok(outcome) => envelope(pb::stream_complete_response::Event::Completion(
                    response_to_pb(&outcome.response),
                )),
                Err(error) => Err(Status::from(error)),
            };
            let _ = sender.send(last).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    #[instrument(skip_all, fields(rpc = "ListMessages", tenant, correlation_id))]
    async fn list_messages(
        &self,
        request: Request<pb::ListMessagesRequest>,
    ) -> Result<Response<pb::ListMessagesResponse>, Status> {
        let (meta, request) = accept(request)?;
        let agent = self.runner.store().get(meta.tenant, &request.agent_id)?;
        let size = paging::page_size(request.page_size)?;
        let query = format!("messages|{}", agent.id);
        let after = paging::decode_sequence_token(&request.page_token, &query)?;
        let data = agent.data();
        let mut page: Vec<_> = data
            .conversation
            .iter()
            .filter(|stored| after.is_none_or(|after| stored.sequence > after))
            .take(size + 1)
            .collect();
        let next_page_token = if page.len() > size {
            page.truncate(size);
            paging::encode_sequence_token(page[size - 1].sequence, &query)
        } else {
            String::new()
        };
        let messages = page
            .iter()
            .map(|stored| message_to_pb(&stored.message))
            .collect();
        Ok(Response::new(pb::ListMessagesResponse {
            meta: Some(meta.response()),
            messages,
            next_page_token,
        }))
    }
}
