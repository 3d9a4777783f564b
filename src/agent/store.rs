//! Agents and their conversations, in memory, scoped by tenant.
//!
//! Each conversation holds at most `max_messages` messages and `max_bytes` bytes of messages
//! (content and metadata). When a turn leaves more, the oldest whole turns (a user message and
//! everything up to the next user message) are dropped until it fits, so a tool call is never
//! separated from its result. The system prompt is agent configuration, not part of the
//! conversation, and is never dropped.
//!
//! With `agents_path` set, every agent is also kept in a file of its own there
//! ([`AgentFiles`]), written at every change that completes (a creation, a finished turn, a
//! transition asked for) before the change is answered, so agents and their conversations
//! outlive a restart. A change whose file cannot be written is undone and fails.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use chrono::{DateTime, Utc};

use super::error::AgentError;
use super::types::{AgentId, AgentState, AgentStatus, CanonicalMessage, MessageId, Role};
use crate::envelope::TenantId;

#[path = "store_changes.rs"]
mod changes;
#[path = "store_files.rs"]
mod files;
pub use files::{AgentFiles, AgentFilesError};

/// The default most messages kept per conversation.
pub const DEFAULT_MAX_MESSAGES: usize = 200;
/// The default most bytes of messages (content and metadata) kept per conversation.
pub const DEFAULT_MAX_CONVERSATION_BYTES: usize = 1024 * 1024;

/// How many recent state transitions an agent remembers.
pub const TRANSITION_HISTORY: usize = 32;

/// The bytes a conversation counts for a message: its content and its metadata's keys and
/// values.
pub fn message_bytes(message: &CanonicalMessage) -> usize {
    message.content.len()
        + message
            .metadata
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum::<usize>()
}

/// What an agent is created with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// A name unique in the tenant.
    pub name: String,
    /// The model to ask; `None` takes the provider's default.
    pub model: Option<String>,
    /// Instructions sent first on every model call.
    pub system_prompt: Option<String>,
    /// The tools the agent may use; `None` means every tool of its tenant.
    pub allowed_tools: Option<Vec<String>>,
}

/// One state change, for the agent's recent history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    /// The state before.
    pub from: AgentState,
    /// The state after.
    pub to: AgentState,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, when it was not an ordinary step (e.g. a cancelled turn).
    pub note: String,
}

/// A message in a conversation with its position (1, 2, ... never reused).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredMessage {
    /// The position.
    pub sequence: u64,
    /// The message.
    pub message: CanonicalMessage,
}

/// An agent's mutable state.
#[derive(Debug)]
pub struct AgentData {
    /// Status as the seed defines it.
    pub status: AgentStatus,
    /// The conversation, oldest first.
    pub conversation: VecDeque<StoredMessage>,
    /// Recent transitions, oldest first.
    pub transitions: VecDeque<Transition>,
    /// Whether a completion is running (or a change is being saved).
    pub busy: bool,
    /// Whether the agent is being deleted: for a second deletion, it is gone already.
    deleting: bool,
    next_sequence: u64,
    /// The sum of [`message_bytes`] over the conversation.
    conversation_bytes: usize,
}

impl AgentData {
    /// Moves to `to` if the state machine allows it, noting it in the history.
    pub fn transition(&mut self, to: AgentState, note: &str) -> Result<(), AgentError> {
        let from = self.status.state;
        AgentState::validate_transition(from, to)?;
        self.force_state(to, note);
        Ok(())
    }

    /// Sets the state without the machine's check: only for resetting a cancelled turn.
    pub(crate) fn force_state(&mut self, to: AgentState, note: &str) {
        let at = Utc::now();
        if self.transitions.len() == TRANSITION_HISTORY {
            self.transitions.pop_front();
        }
        self.transitions.push_back(Transition {
            from: self.status.state,
            to,
            at,
            note: note.to_owned(),
        });
        self.status.state = to;
        self.status.last_activity = at;
    }

    /// Appends a message.
    pub fn push(&mut self, message: CanonicalMessage) {
        self.conversation_bytes += message_bytes(&message);
        self.conversation.push_back(StoredMessage {
            sequence: self.next_sequence,
            message,
        });
        self.next_sequence += 1;
    }

    /// The first of `messages` (its index, and id) whose id a message of the conversation
    /// has already.
    pub fn first_id_held(&self, messages: &[CanonicalMessage]) -> Option<(usize, MessageId)> {
        let wanted: HashSet<MessageId> = messages.iter().map(|message| message.id).collect();
        let held: HashSet<MessageId> = (self.conversation.iter())
            .map(|stored| stored.message.id)
            .filter(|id| wanted.contains(id))
            .collect();
        (messages.iter().enumerate())
            .find(|(_, message)| held.contains(&message.id))
            .map(|(index, message)| (index, message.id))
    }

    /// How many messages the conversation holds.
    pub fn len(&self) -> usize {
        self.conversation.len()
    }

    /// Whether the conversation is empty.
    pub fn is_empty(&self) -> bool {
        self.conversation.is_empty()
    }

    /// The bytes of the conversation's messages ([`message_bytes`]).
    pub fn bytes(&self) -> usize {
        self.conversation_bytes
    }

    /// Drops messages appended after the conversation had `length` messages.
    pub fn truncate(&mut self, length: usize) {
        while self.conversation.len() > length {
            self.pop(VecDeque::pop_back);
        }
    }

    /// Drops the oldest whole turns until at most `max_messages` messages of at most
    /// `max_bytes` bytes remain (`max_bytes` 0: no bound on bytes).
    pub fn enforce_bound(&mut self, max_messages: usize, max_bytes: usize) {
        for _ in 0..self.oldest_over_bound(max_messages, max_bytes) {
            self.pop(VecDeque::pop_front);
        }
    }

    /// How many of the oldest messages [`Self::enforce_bound`] would drop: whole turns (a
    /// message, then every one up to the next user message) until the rest fit.
    pub fn oldest_over_bound(&self, max_messages: usize, max_bytes: usize) -> usize {
        let over = |count: usize, bytes: usize| {
            count > max_messages || (max_bytes != 0 && bytes > max_bytes)
        };
        let (mut count, mut bytes) = (self.conversation.len(), self.conversation_bytes);
        let mut oldest = self.conversation.iter().peekable();
        while over(count, bytes) {
            let Some(first) = oldest.next() else { break };
            count -= 1;
            bytes -= message_bytes(&first.message);
            while let Some(next) = oldest.next_if(|stored| stored.message.role != Role::User) {
                count -= 1;
                bytes -= message_bytes(&next.message);
            }
        }
        self.conversation.len() - count
    }

    fn pop(&mut self, end: fn(&mut VecDeque<StoredMessage>) -> Option<StoredMessage>) {
        if let Some(stored) = end(&mut self.conversation) {
            self.conversation_bytes -= message_bytes(&stored.message);
        }
    }
}

/// An agent.
#[derive(Debug)]
pub struct Agent {
    /// Its id.
    pub id: AgentId,
    /// Its tenant.
    pub tenant: TenantId,
    /// Its configuration.
    pub config: AgentConfig,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Creation order, for stable listing.
    pub order: u64,
    data: Mutex<AgentData>,
}

impl Agent {
    /// Locks the agent's mutable state.
    pub fn data(&self) -> MutexGuard<'_, AgentData> {
        // Every change under this lock is a few field writes that cannot panic midway.
        self.data
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What every tenant's agents hold together, for the metrics endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgentTotals {
    /// Agents in each state, in the order of [`AgentState::ALL`].
    pub by_state: [u64; AgentState::ALL.len()],
    /// Agents with a completion running.
    pub busy: u64,
    /// Messages of their conversations.
    pub messages: u64,
    /// Bytes of those messages ([`message_bytes`]).
    pub conversation_bytes: u64,
}

/// The default most agents one tenant may have at once.
pub const DEFAULT_MAX_AGENTS_PER_TENANT: usize = 1_000;

/// One tenant's agents, indexed for every lookup the API makes.
#[derive(Debug, Default)]
struct TenantAgents {
    by_id: HashMap<AgentId, Arc<Agent>>,
    /// Names are unique in a tenant.
    by_name: HashMap<String, AgentId>,
    /// Creation order, for listing.
    by_order: BTreeMap<u64, AgentId>,
}

/// Every agent, by tenant. A tenant with no agents has no entry.
#[derive(Debug)]
pub struct AgentStore {
    tenants: RwLock<HashMap<TenantId, TenantAgents>>,
    next_order: AtomicU64,
    /// Changes whose agent file could not be written or removed.
    save_failures: AtomicU64,
    max_messages: usize,
    max_conversation_bytes: usize,
    max_agents_per_tenant: usize,
    /// Where agents are kept on disk (`agents_path`); `None`: in memory only.
    files: Option<Arc<AgentFiles>>,
}

impl AgentStore {
    /// An empty store keeping at most `max_messages` messages of at most
    /// `max_conversation_bytes` bytes per conversation (0: no bound on bytes) and at most
    /// `max_agents_per_tenant` agents per tenant (0: no limit).
    pub fn new(
        max_messages: usize,
        max_conversation_bytes: usize,
        max_agents_per_tenant: usize,
    ) -> Self {
        Self {
            tenants: RwLock::new(HashMap::new()),
            next_order: AtomicU64::new(1),
            save_failures: AtomicU64::new(0),
            max_messages: max_messages.max(2),
            max_conversation_bytes,
            max_agents_per_tenant,
            files: None,
        }
    }

    /// The bound of every conversation, in messages.
    pub fn max_messages(&self) -> usize {
        self.max_messages
    }

    /// The bound of every conversation, in bytes of messages (0: none).
    pub fn max_conversation_bytes(&self) -> usize {
        self.max_conversation_bytes
    }

    /// One agent of the tenant, by id or, failing that, by name.
    pub fn get(&self, tenant: TenantId, id_or_name: &str) -> Result<Arc<Agent>, AgentError> {
        let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        let agents = tenants.get(&tenant);
        let by_id = || {
            let id = AgentId(uuid::Uuid::parse_str(id_or_name).ok()?);
            agents?.by_id.get(&id)
        };
        let by_name = || {
            let agents = agents?;
            agents.by_id.get(agents.by_name.get(id_or_name)?)
        };
        by_id()
            .or_else(by_name)
            .cloned()
            .ok_or_else(|| AgentError::NotFound(id_or_name.to_owned()))
    }

    /// Up to `limit` agents of the tenant in creation order, after `after_order` when given.
    pub fn list(
        &self,
        tenant: TenantId,
        after_order: Option<u64>,
        limit: usize,
    ) -> Vec<Arc<Agent>> {
        let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        let Some(agents) = tenants.get(&tenant) else {
            return Vec::new();
        };
        let from = after_order.map_or(Bound::Unbounded, Bound::Excluded);
        agents
            .by_order
            .range((from, Bound::Unbounded))
            .filter_map(|(_, id)| agents.by_id.get(id).cloned())
            .take(limit)
            .collect()
    }

    /// What every tenant's agents hold together: read agent by agent, each a moment apart, so
    /// an agent that moves meanwhile is counted once, in one of its states.
    pub fn totals(&self) -> AgentTotals {
        // The agents are gathered first, and each is locked after the store's lock is let go:
        // a scrape never holds up a create or delete for longer than the gathering.
        let agents: Vec<Arc<Agent>> = {
            let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
            tenants
                .values()
                .flat_map(|agents| agents.by_id.values().cloned())
                .collect()
        };
        let mut totals = AgentTotals::default();
        for agent in agents {
            let data = agent.data();
            let state = AgentState::ALL
                .iter()
                .position(|state| *state == data.status.state)
                .expect("ALL lists every state");
            totals.by_state[state] += 1;
            totals.busy += u64::from(data.busy);
            totals.messages += data.len() as u64;
            totals.conversation_bytes += data.bytes() as u64;
        }
        totals
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
