//! Agents kept on disk (`agents_path`): one JSON file per agent, `AGENT_ID.json`, holding its
//! definition, tenant, state, recent transitions and conversation.
//!
//! A file is written whole to a temporary file in the same directory, flushed to the disk and
//! renamed over the agent's file (tempfile's `persist`), so a crash leaves the old file or the
//! new one, never a mix; the temporary file of a write a crash cut short is removed when the
//! directory is opened. A file per agent, rewritten whole, because each change rewrites one
//! agent (a finished turn: its conversation, at most `max_conversation_bytes`), and a JSON
//! file per agent is what an operator can read, back up and move; an embedded database would
//! add a format to manage for no gain here.
//!
//! Each change is written before it is answered, on a blocking thread; the change and its
//! writing finish together even when the caller goes away meanwhile, so memory and disk never
//! part (see [`AgentStore::finish`]).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    Agent, AgentConfig, AgentData, AgentError, AgentStatus, AgentStore, StoredMessage, Transition,
    message_bytes,
};
use crate::agent::types::AgentId;
use crate::envelope::TenantId;

/// The version of the files' format this build reads and writes.
const FORMAT: u32 = 1;

/// The prefix of the temporary files a write goes through.
const TEMPORARY_PREFIX: &str = ".agent-";

/// The file a server holds an exclusive lock on while it keeps its agents in the directory.
const LOCK_FILE: &str = ".lock";

/// Why the agents' directory could not be read at the start.
#[derive(Debug, thiserror::Error)]
pub enum AgentFilesError {
    /// The directory could not be created or listed, or a file could not be read.
    #[error("agents_path {path}: {error}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// Another server keeps its agents in the directory.
    #[error(
        "agents_path {path} is in use by another toolplane (it holds the lock on {path}/{LOCK_FILE}); \
         give each server a directory of its own"
    )]
    InUse {
        /// The directory.
        path: PathBuf,
    },
    /// A file does not hold an agent as this build writes them.
    #[error(
        "agents_path {path}: not an agent toolplane can read: {problem}; move the file away to \
         start without that agent"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// Two files hold agents that cannot both be a tenant's: the same name, or the same place
    /// in its listing (creation order).
    #[error(
        "agents_path {path}: tenant {tenant} has another agent {clash}, in {other}; move one of \
         the two files away to start without that agent"
    )]
    Clash {
        /// The file of the agent created later.
        path: PathBuf,
        /// The file of the other agent.
        other: PathBuf,
        /// Their tenant.
        tenant: TenantId,
        /// What they share (`named "NAME"`, `of creation order N`).
        clash: String,
    },
}

/// The directory agents are kept in, one file each, locked for this server's use.
#[derive(Debug)]
pub struct AgentFiles {
    directory: PathBuf,
    /// The directory itself, open once, flushed after each file renamed or removed there.
    entries: std::fs::File,
    /// Holds the directory's lock (released when closed).
    _lock: std::fs::File,
}

/// What an agent's file holds (borrowed from the agent when written, owned when read).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedAgent<'a> {
    /// The version of the format ([`FORMAT`]).
    format: u32,
    tenant: u64,
    config: Cow<'a, AgentConfig>,
    created_at: DateTime<Utc>,
    /// Creation order, which listing pages follow.
    order: u64,
    status: AgentStatus,
    /// The position the next message takes.
    next_sequence: u64,
    transitions: Cow<'a, VecDeque<Transition>>,
    /// The conversation, oldest first, within the conversation bounds.
    conversation: Vec<Cow<'a, StoredMessage>>,
}

impl AgentFiles {
    /// Reads the agents kept in `directory` without changing anything there (a directory that
    /// does not exist holds none), as `toolplane config check` does. A file that is not an
    /// agent is an error naming it.
    pub fn read(directory: &Path) -> Result<Vec<Agent>, AgentFilesError> {
        if !directory.exists() {
            return Ok(Vec::new());
        }
        Self::read_agents(directory, false)
    }

    /// Reads the agents kept in `directory`, in creation order, in one pass over it; with
    /// `clean_up`, removes the temporary files of writes a crash cut short on the way.
    fn read_agents(directory: &Path, clean_up: bool) -> Result<Vec<Agent>, AgentFilesError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |error| AgentFilesError::Io { path, error }
        };
        let mut agents = Vec::new();
        for entry in std::fs::read_dir(directory).map_err(io(directory))? {
            let path = entry.map_err(io(directory))?.path();
            let temporary = (path.file_name().and_then(|name| name.to_str()))
                .is_some_and(|name| name.starts_with(TEMPORARY_PREFIX));
            if temporary && clean_up {
                tracing::warn!(file = %path.display(), "removing a write of an agent cut short");
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
            let Some(id) = agent_id_of(&path) else {
                continue;
            };
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let agent = read_agent(id, &bytes).map_err(|problem| AgentFilesError::Unreadable {
                path: path.clone(),
                problem,
            })?;
            agents.push(agent);
        }
        agents.sort_by_key(|agent| agent.order);
        Self::check_no_clash(directory, &agents)?;
        Ok(agents)
    }

    /// Refuses `agents` (in creation order) when two of one tenant share a name or a creation
    /// order, naming both files.
    fn check_no_clash(directory: &Path, agents: &[Agent]) -> Result<(), AgentFilesError> {
        let mut names = HashMap::new();
        let mut orders = HashMap::new();
        for agent in agents {
            let (tenant, name) = (agent.tenant, agent.config.name.as_str());
            let clash = if let Some(other) = names.insert((tenant, name), agent.id) {
                Some((other, format!("named {name:?}")))
            } else {
                (orders.insert((tenant, agent.order), agent.id))
                    .map(|other| (other, format!("of creation order {}", agent.order)))
            };
            if let Some((other, clash)) = clash {
                let path = |id| directory.join(format!("{id}.json"));
                return Err(AgentFilesError::Clash {
                    path: path(agent.id),
                    other: path(other),
                    tenant,
                    clash,
                });
            }
        }
        Ok(())
    }

    /// Opens `directory` (created when missing) and locks it for this server (refused when
    /// another holds it), removes the temporary files of writes a crash cut short, and reads
    /// the agents kept there.
    pub fn open(directory: &Path) -> Result<(Self, Vec<Agent>), AgentFilesError> {
        let io = |error| AgentFilesError::Io {
            path: directory.to_owned(),
            error,
        };
        std::fs::create_dir_all(directory).map_err(io)?;
        let lock = std::fs::File::create(directory.join(LOCK_FILE)).map_err(io)?;
        lock.try_lock().map_err(|error| match error {
            std::fs::TryLockError::WouldBlock => AgentFilesError::InUse {
                path: directory.to_owned(),
            },
            std::fs::TryLockError::Error(error) => io(error),
        })?;
        let agents = Self::read_agents(directory, true)?;
        let files = Self {
            directory: directory.to_owned(),
            entries: std::fs::File::open(directory).map_err(io)?,
            _lock: lock,
        };
        Ok((files, agents))
    }

    fn path(&self, id: AgentId) -> PathBuf {
        self.directory.join(format!("{id}.json"))
    }

    /// Replaces agent `id`'s file with `bytes`, whole, on the disk when it returns (the file,
    /// then the directory that names it).
    fn write(&self, id: AgentId, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = tempfile::Builder::new()
            .prefix(TEMPORARY_PREFIX)
            .tempfile_in(&self.directory)?;
        file.write_all(bytes)?;
        file.as_file().sync_data()?;
        file.persist(self.path(id))?;
        self.sync_directory()
    }

    /// Removes agent `id`'s file (one already gone is not an error), on the disk when it
    /// returns.
    fn remove(&self, id: AgentId) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(id)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => self.sync_directory(),
        }
    }

    /// Flushes the directory's entries to the disk, so a file renamed or removed there stays
    /// so after a power loss.
    fn sync_directory(&self) -> std::io::Result<()> {
        self.entries.sync_all()
    }
}

/// The agent id a file of the directory is named for, when it is an agent's file.
fn agent_id_of(path: &Path) -> Option<AgentId> {
    let name = path.file_name()?.to_str()?.strip_suffix(".json")?;
    uuid::Uuid::parse_str(name).ok().map(AgentId)
}

/// The agent file `bytes` of agent `id` hold, or what is wrong with them.
fn read_agent(id: AgentId, bytes: &[u8]) -> Result<Agent, String> {
    let deserializer = &mut serde_json::Deserializer::from_slice(bytes);
    let saved: SavedAgent<'_> =
        serde_path_to_error::deserialize(deserializer).map_err(|error| error.to_string())?;
    if saved.format != FORMAT {
        return Err(format!(
            "format {} (this build reads format {FORMAT})",
            saved.format
        ));
    }
    if saved.status.id != id {
        return Err(format!(
            "it holds agent {}, not the agent it is named for",
            saved.status.id
        ));
    }
    let conversation: VecDeque<StoredMessage> = saved
        .conversation
        .into_iter()
        .map(Cow::into_owned)
        .collect();
    if let Some(stored) =
        (conversation.iter()).find(|stored| stored.sequence >= saved.next_sequence)
    {
        return Err(format!(
            "message {} is at or past next_sequence {}",
            stored.sequence, saved.next_sequence
        ));
    }
    let conversation_bytes = (conversation.iter())
        .map(|stored| message_bytes(&stored.message))
        .sum();
    Ok(Agent {
        id,
        tenant: TenantId(saved.tenant),
        config: saved.config.into_owned(),
        created_at: saved.created_at,
        order: saved.order,
        data: Mutex::new(AgentData {
            status: saved.status,
            conversation,
            transitions: saved.transitions.into_owned(),
            busy: false,
            deleting: false,
            next_sequence: saved.next_sequence,
            conversation_bytes,
        }),
    })
}

impl AgentStore {
    /// The same store, keeping its agents in `directory` (`agents_path`): the agents kept there
    /// are taken in (their conversations cut to this store's bounds), and every change is
    /// written there from now on.
    pub fn kept_in(mut self, directory: &Path) -> Result<Self, AgentFilesError> {
        let (files, agents) = AgentFiles::open(directory)?;
        let tenants = self.tenants.get_mut().unwrap_or_else(|p| p.into_inner());
        for agent in agents {
            let agents = tenants.entry(agent.tenant).or_default();
            agent
                .data()
                .enforce_bound(self.max_messages, self.max_conversation_bytes);
            self.next_order
                .fetch_max(agent.order + 1, std::sync::atomic::Ordering::Relaxed);
            agents.insert(Arc::new(agent));
        }
        self.files = Some(Arc::new(files));
        tracing::info!(agents_path = %directory.display(), agents = self.count(), "agents read");
        Ok(self)
    }

    /// Whether agents are kept on disk (`agents_path`), not in memory only.
    pub fn keeps_files(&self) -> bool {
        self.files.is_some()
    }

    /// How many agents the store holds, across tenants.
    pub fn count(&self) -> usize {
        let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        tenants.values().map(|agents| agents.by_id.len()).sum()
    }

    /// Writes `agent` as it is now to its file (when agents are kept on disk), its
    /// conversation cut to the store's bounds as [`AgentData::enforce_bound`] would cut it.
    /// Blocks: call it from [`Self::finish`].
    pub(crate) fn save(&self, agent: &Agent) -> Result<(), AgentError> {
        let Some(files) = &self.files else {
            return Ok(());
        };
        let bytes = {
            let data = agent.data();
            let dropped = data.oldest_over_bound(self.max_messages, self.max_conversation_bytes);
            let saved = SavedAgent {
                format: FORMAT,
                tenant: agent.tenant.0,
                config: Cow::Borrowed(&agent.config),
                created_at: agent.created_at,
                order: agent.order,
                status: data.status,
                next_sequence: data.next_sequence,
                transitions: Cow::Borrowed(&data.transitions),
                conversation: data
                    .conversation
                    .iter()
                    .skip(dropped)
                    .map(Cow::Borrowed)
                    .collect(),
            };
            serde_json::to_vec(&saved).expect("an agent serializes to JSON")
        };
        files
            .write(agent.id, &bytes)
            .map_err(|error| self.not_saved(agent, &error))
    }

    /// Removes `agent`'s file (when agents are kept on disk). Blocks: call it from
    /// [`Self::finish`].
    pub(super) fn unsave(&self, agent: &Agent) -> Result<(), AgentError> {
        match &self.files {
            Some(files) => (files.remove(agent.id)).map_err(|error| self.not_saved(agent, &error)),
            None => Ok(()),
        }
    }

    /// Runs `change` (which may write an agent's file) so that the caller going away cannot
    /// stop it half-way: on a blocking thread when agents are kept on disk, at once otherwise.
    pub(crate) async fn finish<T: Send + 'static>(
        &self,
        change: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
    ) -> Result<T, AgentError> {
        if self.files.is_none() {
            return change();
        }
        match tokio::task::spawn_blocking(change).await {
            Ok(finished) => finished,
            Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
            Err(_) => Err(AgentError::NotSaved {
                id: None,
                problem: "the server is shutting down".to_owned(),
            }),
        }
    }

    /// How many changes failed because their agent file could not be written or removed.
    pub fn save_failures(&self) -> u64 {
        self.save_failures
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The error of a file of `agent` that could not be written or removed, counted and
    /// logged.
    fn not_saved(&self, agent: &Agent, error: &std::io::Error) -> AgentError {
        self.save_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::error!(agent = %agent.id, %error, "cannot save an agent to agents_path");
        AgentError::NotSaved {
            id: Some(agent.id),
            problem: error.to_string(),
        }
    }
}

#[cfg(test)]
#[path = "store_files_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "store_concurrency_tests.rs"]
mod concurrency_tests;
