//! Agents and their conversations, in memory, scoped by tenant.
//!
//! Each conversation holds at most `max_messages` messages. When a turn leaves more, the oldest
//! whole turns (a user message and everything up to the next user message) are dropped until it
//! fits, so a tool call is never separated from its result. The system prompt is agent
//! configuration, not part of the conversation, and is never dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use chrono::{DateTime, Utc};

use super::error::AgentError;
use super::types::{AgentId, AgentState, AgentStatus, CanonicalMessage, Role};
use crate::envelope::TenantId;

/// The default most messages kept per conversation.
pub const DEFAULT_MAX_MESSAGES: usize = 200;
/// How many recent state transitions an agent remembers.
pub const TRANSITION_HISTORY: usize = 32;

/// What an agent is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Whether a completion is running.
    pub busy: bool,
    next_sequence: u64,
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
        self.conversation.push_back(StoredMessage {
            sequence: self.next_sequence,
            message,
        });
        self.next_sequence += 1;
    }

    /// How many messages the conversation holds.
    pub fn len(&self) -> usize {
        self.conversation.len()
    }

    /// Whether the conversation is empty.
    pub fn is_empty(&self) -> bool {
        self.conversation.is_empty()
    }

    /// Drops messages appended after the conversation had `length` messages.
    pub fn truncate(&mut self, length: usize) {
        self.conversation.truncate(length);
    }

    /// Drops the oldest whole turns until at most `max` messages remain.
    pub fn enforce_bound(&mut self, max: usize) {
        while self.conversation.len() > max {
            self.conversation.pop_front();
            while self
                .conversation
                .front()
                .is_some_and(|stored| stored.message.role != Role::User)
            {
                self.conversation.pop_front();
            }
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

/// Every agent, by id.
#[derive(Debug)]
pub struct AgentStore {
    agents: RwLock<HashMap<AgentId, Arc<Agent>>>,
    next_order: AtomicU64,
    max_messages: usize,
}

impl AgentStore {
    /// An empty store keeping at most `max_messages` per conversation.
    pub fn new(max_messages: usize) -> Self {
        Self {
            agents: RwLock::new(HashMap::new()),
            next_order: AtomicU64::new(1),
            max_messages: max_messages.max(2),
        }
    }

    /// The bound of every conversation.
    pub fn max_messages(&self) -> usize {
        self.max_messages
    }

    /// Creates an agent, Idle, with an empty conversation.
    pub fn create(&self, tenant: TenantId, config: AgentConfig) -> Result<Arc<Agent>, AgentError> {
        let mut agents = self.agents.write().unwrap_or_else(|p| p.into_inner());
        if agents
            .values()
            .any(|agent| agent.tenant == tenant && agent.config.name == config.name)
        {
            return Err(AgentError::NameTaken(config.name));
        }
        let id = AgentId::new();
        let now = Utc::now();
        let agent = Arc::new(Agent {
            id,
            tenant,
            config,
            created_at: now,
            order: self.next_order.fetch_add(1, Ordering::Relaxed),
            data: Mutex::new(AgentData {
                status: AgentStatus {
                    id,
                    state: AgentState::Idle,
                    last_activity: now,
                    messages_processed: 0,
                },
                conversation: VecDeque::new(),
                transitions: VecDeque::new(),
                busy: false,
                next_sequence: 1,
            }),
        });
        agents.insert(id, Arc::clone(&agent));
        Ok(agent)
    }

    /// One agent of the tenant, by id or, failing that, by name.
    pub fn get(&self, tenant: TenantId, id_or_name: &str) -> Result<Arc<Agent>, AgentError> {
        let agents = self.agents.read().unwrap_or_else(|p| p.into_inner());
        let by_id = uuid::Uuid::parse_str(id_or_name)
            .ok()
            .and_then(|uuid| agents.get(&AgentId(uuid)))
            .filter(|a| a.tenant == tenant);
        by_id
            .or_else(|| {
                agents
                    .values()
                    .find(|a| a.tenant == tenant && a.config.name == id_or_name)
            })
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
        let agents = self.agents.read().unwrap_or_else(|p| p.into_inner());
        let mut found: Vec<Arc<Agent>> = agents
            .values()
            .filter(|a| a.tenant == tenant && after_order.is_none_or(|after| a.order > after))
            .cloned()
            .collect();
        found.sort_by_key(|a| a.order);
        found.truncate(limit);
        found
    }

    /// Deletes an agent; a busy one is refused.
    pub fn delete(&self, tenant: TenantId, id_or_name: &str) -> Result<(), AgentError> {
        let agent = self.get(tenant, id_or_name)?;
        let data = agent.data();
        if data.busy {
            return Err(AgentError::Busy {
                id: agent.id,
                state: data.status.state,
            });
        }
        drop(data);
        self.agents
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&agent.id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str) -> AgentConfig {
        AgentConfig {
            name: name.to_owned(),
            model: None,
            system_prompt: None,
            allowed_tools: None,
        }
    }

    #[test]
    fn names_are_unique_per_tenant_and_lookups_take_ids_or_names() {
        let store = AgentStore::new(10);
        let agent = store
            .create(TenantId(1), config("helper"))
            .expect("created");
        assert!(matches!(
            store.create(TenantId(1), config("helper")),
            Err(AgentError::NameTaken(_))
        ));
        store
            .create(TenantId(2), config("helper"))
            .expect("another tenant may use the name");
        assert_eq!(
            store.get(TenantId(1), "helper").expect("by name").id,
            agent.id
        );
        assert_eq!(
            store
                .get(TenantId(1), &agent.id.to_string())
                .expect("by id")
                .id,
            agent.id
        );
        assert!(
            matches!(
                store.get(TenantId(2), &agent.id.to_string()),
                Err(AgentError::NotFound(_))
            ),
            "ids do not cross tenants"
        );
    }

    #[test]
    fn the_bound_drops_whole_turns() {
        let store = AgentStore::new(4);
        let agent = store.create(TenantId(0), config("a")).expect("created");
        let mut data = agent.data();
        for turn in 0..3 {
            data.push(CanonicalMessage::new(
                Role::User,
                format!("question {turn}"),
            ));
            data.push(CanonicalMessage::new(Role::Assistant, "calling".into()));
            data.push(CanonicalMessage::new(Role::System, "result".into()));
        }
        data.enforce_bound(4);
        let first = &data.conversation.front().expect("kept").message;
        assert_eq!(
            (first.role, first.content.as_str()),
            (Role::User, "question 2")
        );
        assert_eq!(data.len(), 3);
    }

    #[test]
    fn transitions_follow_the_machine_and_are_remembered() {
        let store = AgentStore::new(10);
        let agent = store.create(TenantId(0), config("a")).expect("created");
        let mut data = agent.data();
        data.transition(AgentState::Thinking, "")
            .expect("idle -> thinking");
        assert!(
            data.transition(AgentState::Idle, "").is_err(),
            "thinking -> idle is refused"
        );
        assert_eq!(data.status.state, AgentState::Thinking);
        assert_eq!(data.transitions.len(), 1);
    }
}
