//! Errors of the agent area: the seed's `SentinelError`, and [`AgentError`] for everything the
//! agent service can refuse or fail at. `grpc::status` maps [`AgentError`] to statuses.

use super::types::{AgentId, AgentState, MessageId};
use crate::envelope::TenantId;
use crate::invoke::InvokeError;

/// The seed 002 domain error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SentinelError {
    /// A state transition the machine does not allow.
    #[error("invalid state transition from {from} to {to}")]
    InvalidStateTransition {
        /// The state before.
        from: AgentState,
        /// The state asked for.
        to: AgentState,
    },
    /// A message that fails validation.
    #[error("invalid message: {reason}")]
    InvalidMessage {
        /// Why.
        reason: String,
    },
    /// Another domain rule broken.
    #[error("domain rule violated: {rule}")]
    DomainViolation {
        /// The rule.
        rule: String,
    },
}

/// Everything the agent service can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The request breaks a seed 002 rule (message validation, temperature, transitions).
    #[error(transparent)]
    Domain(#[from] SentinelError),
    /// A request field is malformed.
    #[error("{field}: {problem}")]
    InvalidField {
        /// The field's path.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// No such agent in the caller's tenant.
    #[error("agent {0} does not exist")]
    NotFound(String),
    /// An agent of that name exists already in the tenant.
    #[error("an agent named {0:?} exists already")]
    NameTaken(String),
    /// The agent is in the middle of another completion.
    #[error("agent {id} is busy ({state}); wait for its current completion to finish")]
    Busy {
        /// The agent.
        id: AgentId,
        /// Its state now.
        state: AgentState,
    },
    /// The agent is not busy but not idle either: `TransitionAgent` left it in another state,
    /// and a turn starts only from idle.
    #[error(
        "agent {id} is {state}, where TransitionAgent left it; a turn starts only from idle: \
         move it on with TransitionAgent to {}", state.path_to_idle()
    )]
    NotIdle {
        /// The agent.
        id: AgentId,
        /// Its state now.
        state: AgentState,
    },
    /// A message of the request has the id of a message the conversation holds already.
    #[error(
        "request.messages[{index}].id: the conversation holds a message with id {id} already; \
         message ids are unique (leave id empty to have one made)"
    )]
    MessageIdTaken {
        /// The message's position in the request.
        index: usize,
        /// Its id.
        id: MessageId,
    },
    /// The tenant has its most agents already.
    #[error(
        "tenant {tenant} has {limit} agents, the most one tenant may have \
         (max_agents_per_tenant); delete an agent it no longer needs before creating another"
    )]
    QuotaExceeded {
        /// The tenant.
        tenant: TenantId,
        /// The limit.
        limit: usize,
    },
    /// A change to an agent could not be written to `agents_path`, so it was not made.
    #[error("{}cannot be saved to agents_path ({problem}); nothing was changed", id.map(|id| format!("agent {id} ")).unwrap_or_default())]
    NotSaved {
        /// The agent, when one was being changed.
        id: Option<AgentId>,
        /// What failed.
        problem: String,
    },
    /// A turn's messages (the request's, the model's tool calls, their results, its answer)
    /// grew past what a conversation keeps. Kept, the turn would have pushed out every other
    /// turn and then itself; it is undone instead, before more is asked of the model.
    #[error(
        "this turn's messages grew to {bytes} bytes with {what}, more than a conversation keeps \
         ({max}, max_conversation_bytes); the turn is undone: ask for less in one turn, or ask \
         the operator to raise the limit"
    )]
    TurnTooLarge {
        /// The turn's bytes with the message that took it over.
        bytes: usize,
        /// The bound.
        max: usize,
        /// What took it over.
        what: &'static str,
    },
    /// A message the turn would add (a tool's result, the model's tool calls or its answer)
    /// is larger than one answer may carry: kept, it could never be read back. The turn is
    /// undone.
    #[error(
        "{what} takes {bytes} bytes, more than one message may ({max}: gRPC clients read at \
         most 4 MiB in one message by default); the turn is undone: ask for less in one turn"
    )]
    MessageTooLarge {
        /// The message's bytes.
        bytes: usize,
        /// The bound.
        max: usize,
        /// Which message.
        what: &'static str,
    },
    /// The model provider failed.
    #[error("model provider failed: {0}")]
    Model(String),
    /// A tool call failed in a way the model cannot be told about (the record log).
    #[error(transparent)]
    Invoke(#[from] InvokeError),
}
