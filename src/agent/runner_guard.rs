//! Undoing a turn that does not finish: [`TurnGuard`].

use std::sync::Arc;

use crate::agent::error::AgentError;
use crate::agent::store::{Agent, AgentStore};
use crate::agent::types::{AgentState, ChatCompletionRequest};

/// The note on the transition back to Idle of a turn that did not finish.
const UNDONE: &str = "turn did not finish (cancelled or failed); conversation restored";

/// Undoes an unfinished turn: the conversation goes back to its length before the turn and the
/// agent to Idle, and (when agents are kept on disk) the agent is saved so, its history noting
/// the undone turn. A turn that fails is undone by [`TurnGuard::give_up`], before its error is
/// answered; one whose caller goes away, when the guard is dropped.
pub(super) struct TurnGuard {
    agent: Arc<Agent>,
    store: Arc<AgentStore>,
    length_before: usize,
    added_messages: u64,
    finished: bool,
}

impl TurnGuard {
    /// Begins a turn of `agent` for `request`: makes it busy and adds the request's messages
    /// to its conversation, guarded. Refused when it is busy or not idle, or when a message's
    /// id is one its conversation holds already (message ids are unique).
    pub(super) fn begin(
        agent: Arc<Agent>,
        store: Arc<AgentStore>,
        request: &ChatCompletionRequest,
    ) -> Result<Self, AgentError> {
        let mut data = agent.data();
        let state = data.status.state;
        if data.busy {
            return Err(AgentError::Busy {
                id: agent.id,
                state,
            });
        }
        if state != AgentState::Idle {
            return Err(AgentError::NotIdle {
                id: agent.id,
                state,
            });
        }
        if let Some((index, id)) = data.first_id_held(&request.messages) {
            return Err(AgentError::MessageIdTaken { index, id });
        }
        data.busy = true;
        let (length_before, added_messages) = (data.len(), request.messages.len() as u64);
        for message in &request.messages {
            data.push(message.clone());
        }
        data.status.messages_processed += added_messages;
        drop(data);
        Ok(Self {
            agent,
            store,
            length_before,
            added_messages,
            finished: false,
        })
    }

    /// The agent whose turn this is.
    pub(super) fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// Keeps the turn: dropped from now on, the guard undoes nothing.
    pub(super) fn keep(&mut self) {
        self.finished = true;
    }

    /// Undoes the turn in memory and frees the agent, without saving: for a turn whose own
    /// save failed, so that its file still holds the agent as it was before the turn.
    pub(super) fn undo_unsaved(&mut self) {
        self.undo();
        self.agent.data().busy = false;
    }

    /// Undoes the failed turn, saves the agent so and frees it, even if the caller goes away
    /// meanwhile.
    pub(super) async fn give_up(mut self) {
        self.undo();
        let (store, agent) = (Arc::clone(&self.store), Arc::clone(&self.agent));
        let _ = (self.store)
            .finish(move || {
                save_and_free(&store, &agent);
                Ok(())
            })
            .await;
    }

    /// Puts the conversation, the count of messages and the state back (the agent stays busy).
    fn undo(&mut self) {
        self.finished = true;
        let mut data = self.agent.data();
        data.truncate(self.length_before);
        data.status.messages_processed = data
            .status
            .messages_processed
            .saturating_sub(self.added_messages);
        data.force_state(AgentState::Idle, UNDONE);
    }
}

/// Saves the undone turn's `agent` and frees it. A save that fails (logged and counted by the
/// store; the turn's own error is what its caller is told) leaves the agent's file as it was
/// before the turn, since a turn saves nothing until it finishes. Blocks when agents are kept
/// on disk.
fn save_and_free(store: &AgentStore, agent: &Agent) {
    let _ = store.save(agent);
    agent.data().busy = false;
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.undo();
        // The caller went away: the agent is saved on a blocking thread, and stays busy until
        // then (so no later change's save can be overtaken by this one's).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if self.store.keeps_files() => {
                let (store, agent) = (Arc::clone(&self.store), Arc::clone(&self.agent));
                runtime.spawn_blocking(move || save_and_free(&store, &agent));
            }
            _ => self.agent.data().busy = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::store::{AgentConfig, AgentFiles};
    use crate::agent::types::{CanonicalMessage, Role};
    use crate::envelope::TenantId;
    use std::path::Path;

    fn kept_in(directory: &Path) -> Arc<AgentStore> {
        Arc::new(
            AgentStore::new(100, 0, 0)
                .kept_in(directory)
                .expect("agents read"),
        )
    }

    /// An agent of `store` in the middle of a turn (busy, Thinking, one message added) and the
    /// turn's guard.
    async fn turn_begun(store: &Arc<AgentStore>) -> (Arc<Agent>, TurnGuard) {
        let config = AgentConfig {
            name: "helper".to_owned(),
            model: None,
            system_prompt: None,
            allowed_tools: None,
        };
        let agent = (store.create(TenantId(1), config).await).expect("created");
        let request = ChatCompletionRequest {
            messages: vec![CanonicalMessage::new(Role::User, "hello".to_owned())],
            model: None,
            temperature: None,
            max_tokens: None,
            stream: false,
        };
        let guard = TurnGuard::begin(Arc::clone(&agent), Arc::clone(store), &request)
            .expect("an idle agent");
        (agent.data().transition(AgentState::Thinking, "")).expect("idle -> thinking");
        (agent, guard)
    }

    /// The agent as its file holds it: state, messages processed, conversation length and the
    /// last transition's note.
    fn as_saved(directory: &Path) -> (AgentState, u64, usize, String) {
        let agents = AgentFiles::read(directory).expect("agents read");
        let [agent] = agents.as_slice() else {
            panic!("one agent kept, not {}", agents.len());
        };
        let data = agent.data();
        let note = data.transitions.back().map(|last| last.note.clone());
        let saved = (data.status.state, data.status.messages_processed);
        (saved.0, saved.1, data.len(), note.unwrap_or_default())
    }

    /// A failed turn given up is undone, saved so (its history noting it) and the agent freed
    /// before `give_up` returns.
    #[tokio::test]
    async fn a_failed_turn_is_saved_undone_before_its_error_is_answered() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let store = kept_in(directory.path());
        let (agent, guard) = turn_begun(&store).await;
        guard.give_up().await;
        assert!(!agent.data().busy);
        assert_eq!(agent.data().len(), 0);
        let saved = as_saved(directory.path());
        assert_eq!(saved, (AgentState::Idle, 0, 0, UNDONE.to_owned()));
    }

    /// A turn whose caller goes away (its guard dropped) is undone and saved so on a blocking
    /// thread; the agent stays busy until it is saved.
    #[tokio::test]
    async fn a_turn_whose_caller_goes_away_is_saved_undone() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let store = kept_in(directory.path());
        let (agent, guard) = turn_begun(&store).await;
        drop(guard);
        for _ in 0..1000 {
            if !agent.data().busy {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!agent.data().busy, "freed once saved");
        assert_eq!(agent.data().status.state, AgentState::Idle);
        let saved = as_saved(directory.path());
        assert_eq!(saved, (AgentState::Idle, 0, 0, UNDONE.to_owned()));
    }

    /// Kept in memory only, a dropped guard undoes the turn and frees the agent at once.
    #[tokio::test]
    async fn in_memory_a_dropped_turn_is_undone_at_once() {
        let store = Arc::new(AgentStore::new(100, 0, 0));
        let (agent, guard) = turn_begun(&store).await;
        drop(guard);
        let data = agent.data();
        assert!(!data.busy);
        assert_eq!((data.status.state, data.len()), (AgentState::Idle, 0));
        assert_eq!(data.transitions.back().expect("noted").note, UNDONE);
    }
}
