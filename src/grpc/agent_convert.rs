//! The Agent API's wire conversions: its messages to and from the agent core's types, each
//! request field checked as it is read.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::invoke::status_to_pb;
use crate::agent::AgentError;
use crate::agent::runner::{ToolCallSummary, TurnEvent, TurnOutcome};
use crate::agent::store::{Agent, AgentConfig, Transition};
use crate::agent::types::{
    AgentState, CanonicalMessage, ChatCompletionRequest, ChatCompletionResponse, MessageId, Role,
};
use crate::pb;
use crate::registry::ToolName;
use crate::shown::shown;

/// The longest agent name.
pub const MAX_AGENT_NAME_LEN: usize = 64;
/// The longest system prompt, in bytes: it is sent with every model call.
pub const MAX_SYSTEM_PROMPT_BYTES: usize = 256 * 1024;
/// The most tools an agent may be allowed by name (of which the
/// [`MAX_OFFERED_TOOLS`](crate::agent::runner::MAX_OFFERED_TOOLS) that best match a turn are
/// offered to the model).
pub const MAX_ALLOWED_TOOLS: usize = 10_000;

pub(super) fn invalid(field: &str, problem: impl Into<String>) -> AgentError {
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

pub(super) fn state_from_pb(value: i32) -> Result<AgentState, AgentError> {
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

pub(super) fn message_to_pb(message: &CanonicalMessage) -> pb::CanonicalMessage {
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

pub(super) fn request_from_pb(
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
    let mut first_with = std::collections::HashMap::new();
    for (index, message) in messages.iter().enumerate() {
        if let Some(first) = first_with.insert(message.id, index) {
            return Err(invalid(
                &format!("request.messages[{index}].id"),
                format!(
                    "id {} is request.messages[{first}]'s too; message ids are unique (leave id \
                     empty to have one made)",
                    message.id
                ),
            ));
        }
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

pub(super) fn response_to_pb(response: &ChatCompletionResponse) -> pb::ChatCompletionResponse {
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

pub(super) fn config_from_pb(request: pb::CreateAgentRequest) -> Result<AgentConfig, AgentError> {
    let name = request.name;
    let name_ok = (1..=MAX_AGENT_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !name_ok || uuid::Uuid::parse_str(&name).is_ok() {
        return Err(invalid(
            "name",
            format!(
                "name {}: a name must be 1 to {MAX_AGENT_NAME_LEN} characters of \
                 [A-Za-z0-9_.-], and not a UUID",
                shown(&name)
            ),
        ));
    }
    if request.system_prompt.len() > MAX_SYSTEM_PROMPT_BYTES {
        return Err(invalid(
            "system_prompt",
            format!(
                "the system prompt is {} bytes, more than the {MAX_SYSTEM_PROMPT_BYTES} an agent \
                 may have (it is sent with every model call)",
                request.system_prompt.len()
            ),
        ));
    }
    if request.allowed_tools.len() > MAX_ALLOWED_TOOLS {
        return Err(invalid(
            "allowed_tools",
            format!(
                "{} tools listed, more than the {MAX_ALLOWED_TOOLS} an agent may be allowed",
                request.allowed_tools.len()
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

/// `agent_id` of a request, which names an agent by its id (a UUID) or its name; one longer
/// than either is refused without being repeated back.
pub(super) fn agent_id(agent_id: &str) -> Result<&str, AgentError> {
    if agent_id.len() > MAX_AGENT_NAME_LEN {
        return Err(invalid(
            "agent_id",
            format!(
                "{} names no agent: an agent_id is an agent's id (a UUID) or its name (1 to \
                 {MAX_AGENT_NAME_LEN} characters)",
                shown(agent_id)
            ),
        ));
    }
    Ok(agent_id)
}

pub(super) fn event_to_pb(event: TurnEvent) -> pb::stream_complete_response::Event {
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

pub(super) fn outcome_to_pb(meta: pb::Meta, outcome: &TurnOutcome) -> pb::CompleteResponse {
    pb::CompleteResponse {
        meta: Some(meta),
        response: Some(response_to_pb(&outcome.response)),
        tool_calls: outcome.tool_calls.iter().map(tool_call_to_pb).collect(),
    }
}
