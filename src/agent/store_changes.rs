//! The changes to agents that are saved ([`AgentStore::create`], [`AgentStore::delete`],
//! [`AgentStore::transition`]): each is made in memory, written to the agent's file when agents
//! are kept on disk, and undone when it cannot be written.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use chrono::Utc;

use super::{Agent, AgentConfig, AgentData, AgentError, AgentStore, TenantAgents};
use crate::agent::types::{AgentId, AgentState, AgentStatus};
use crate::envelope::TenantId;

impl AgentStore {
    /// Creates an agent, Idle, with an empty conversation, and saves it. Refused when the
    /// tenant has an agent of that name, or has its most agents already; when it cannot be
    /// saved, it is not created.
    pub async fn create(
        self: &Arc<Self>,
        tenant: TenantId,
        config: AgentConfig,
    ) -> Result<Arc<Agent>, AgentError> {
        let agent = self.add(tenant, config)?;
        let store = Arc::clone(self);
        self.finish(move || match store.save(&agent) {
            Ok(()) => {
                agent.data().busy = false;
                Ok(agent)
            }
            Err(error) => {
                store.forget(&agent);
                Err(error)
            }
        })
        .await
    }

    /// Adds a new agent to the tenant's (in memory only), busy until its creation is saved (so
    /// nothing else changes it before its file is written); refused when the tenant has one
    /// of that name or has its most agents already.
    fn add(&self, tenant: TenantId, config: AgentConfig) -> Result<Arc<Agent>, AgentError> {
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        if let Some(agents) = tenants.get(&tenant) {
            if agents.by_name.contains_key(&config.name) {
                return Err(AgentError::NameTaken(config.name));
            }
            if self.max_agents_per_tenant != 0 && agents.by_id.len() >= self.max_agents_per_tenant {
                return Err(AgentError::QuotaExceeded {
                    tenant,
                    limit: self.max_agents_per_tenant,
                });
            }
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
                busy: true,
                deleting: false,
                next_sequence: 1,
                conversation_bytes: 0,
            }),
        });
        tenants
            .entry(tenant)
            .or_default()
            .insert(Arc::clone(&agent));
        Ok(agent)
    }

    /// Deletes an agent and its file; a busy one is refused, and one being deleted is not
    /// found. When its file cannot be removed, the agent stays.
    pub async fn delete(
        self: &Arc<Self>,
        tenant: TenantId,
        id_or_name: &str,
    ) -> Result<(), AgentError> {
        let agent = self.get(tenant, id_or_name)?;
        {
            let mut data = agent.data();
            if data.deleting {
                return Err(AgentError::NotFound(id_or_name.to_owned()));
            }
            if data.busy {
                return Err(AgentError::Busy {
                    id: agent.id,
                    state: data.status.state,
                });
            }
            // Busy for good once its file is gone: a caller still holding it can change nothing.
            data.busy = true;
            data.deleting = true;
        }
        let store = Arc::clone(self);
        self.finish(move || match store.unsave(&agent) {
            Ok(()) => {
                store.forget(&agent);
                Ok(())
            }
            Err(error) => {
                let mut data = agent.data();
                data.busy = false;
                data.deleting = false;
                Err(error)
            }
        })
        .await
    }

    /// Moves an idle (not busy) agent along the state machine by hand, and saves it; when it
    /// cannot be saved, the agent stays as it was.
    pub async fn transition(
        self: &Arc<Self>,
        tenant: TenantId,
        id_or_name: &str,
        to: AgentState,
    ) -> Result<Arc<Agent>, AgentError> {
        let agent = self.get(tenant, id_or_name)?;
        let (status, transitions) = {
            let mut data = agent.data();
            if data.busy {
                return Err(AgentError::Busy {
                    id: agent.id,
                    state: data.status.state,
                });
            }
            let before = (data.status, data.transitions.clone());
            data.transition(to, "requested")?;
            data.busy = true;
            before
        };
        let store = Arc::clone(self);
        self.finish(move || {
            let saved = store.save(&agent);
            let mut data = agent.data();
            if saved.is_err() {
                data.status = status;
                data.transitions = transitions;
            }
            data.busy = false;
            drop(data);
            saved.map(|()| agent)
        })
        .await
    }

    /// Removes `agent` from the index (in memory only), if it is still there.
    fn forget(&self, agent: &Agent) {
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        if let Some(agents) = tenants.get_mut(&agent.tenant) {
            // Remove only what is still there (a failed creation or a deletion; never twice).
            if agents.by_id.remove(&agent.id).is_some() {
                agents.by_name.remove(&agent.config.name);
                agents.by_order.remove(&agent.order);
            }
            if agents.by_id.is_empty() {
                tenants.remove(&agent.tenant);
            }
        }
    }
}

impl TenantAgents {
    /// Indexes `agent`.
    pub(super) fn insert(&mut self, agent: Arc<Agent>) {
        self.by_name.insert(agent.config.name.clone(), agent.id);
        self.by_order.insert(agent.order, agent.id);
        self.by_id.insert(agent.id, agent);
    }
}
