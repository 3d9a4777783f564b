//! The imports running, kept as the configuration file says while the server runs: one task
//! per `[[mcp_imports]]` entry (see [`super::import`]), each known by its tenant and service.
//! [`LiveImports::apply`] takes the entries as the file gives them now:
//!
//! - an entry added is started;
//! - an entry gone is stopped: its task ends, its session with the server is closed (a server
//!   toolplane started is stopped), and its service is deregistered, so watchers see it
//!   `REMOVED` and nothing calls it;
//! - an entry whose server settings changed (URL or command, environment, token, refresh
//!   interval) is started again with them, over a new session; its registration stays until the
//!   new one replaces it, unless its endpoint changed, in which case it is deregistered at once
//!   (its tools would otherwise still be called at the old server);
//! - an entry whose `approved_tools` alone changed keeps running with the new approvals, and
//!   lists its server again at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::JoinHandle;

use super::client::McpCaller;
use super::import::run;
use super::import_config::McpImport;
use super::import_states::ImportState;
use super::session_keys::SessionKey;
use crate::envelope::TenantId;
use crate::invoke::heavy::HeavyWork;
use crate::registry::{Registry, ServiceName};

/// The running imports, shared by the configuration file's watch and the metrics endpoint.
#[derive(Debug, Clone)]
pub struct LiveImports(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    registry: Registry,
    caller: McpCaller,
    /// Where listings are worked out.
    heavy_work: HeavyWork,
    running: Mutex<BTreeMap<(TenantId, ServiceName), Running>>,
}

/// One import running.
#[derive(Debug)]
struct Running {
    import: McpImport,
    state: Arc<ImportState>,
    task: JoinHandle<()>,
}

/// What [`LiveImports::apply`] changed: how many imports it started, started again with other
/// settings, stopped, and gave other approvals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImportChanges {
    /// Imports added.
    pub started: usize,
    /// Imports whose server settings changed, started again.
    pub restarted: usize,
    /// Imports gone, stopped and their services deregistered.
    pub stopped: usize,
    /// Imports whose `approved_tools` alone changed.
    pub approvals_changed: usize,
}

impl ImportChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl LiveImports {
    /// Starts `imports`, registering their tools in `registry` and calling their servers
    /// through `caller` (whose sessions the imports share with calls); their listings are
    /// checked in `heavy_work`. Call within a Tokio runtime.
    pub fn start(
        imports: &[McpImport],
        registry: &Registry,
        caller: &McpCaller,
        heavy_work: &HeavyWork,
    ) -> Self {
        let live = Self(Arc::new(Shared {
            registry: registry.clone(),
            caller: caller.clone(),
            heavy_work: heavy_work.clone(),
            running: Mutex::default(),
        }));
        live.apply(imports);
        live
    }

    /// Makes the running imports those of `now`, matched by tenant and service (see the
    /// module docs); answers what changed. Call within a Tokio runtime.
    pub fn apply(&self, now: &[McpImport]) -> ImportChanges {
        let shared = &self.0;
        let mut changes = ImportChanges::default();
        let mut running = self.running();
        // Sessions opened from now on use the settings of `now`.
        shared.caller.set_imports(now);
        let wanted: BTreeMap<_, _> = now
            .iter()
            .map(|import| ((import.tenant, import.service.clone()), import))
            .collect();
        let gone: Vec<_> = running
            .keys()
            .filter(|key| !wanted.contains_key(*key))
            .cloned()
            .collect();
        for key in gone {
            if let Some(old) = running.remove(&key) {
                shared.retire(old, true);
                changes.stopped += 1;
            }
        }
        for (key, import) in wanted {
            let started = match running.remove(&key) {
                None => {
                    changes.started += 1;
                    shared.spawn(import, None)
                }
                Some(mut current) if current.import.same_server_as(import) => {
                    if current.state.approve(&import.approved_tools) {
                        changes.approvals_changed += 1;
                    }
                    current.import = import.clone();
                    current
                }
                Some(old) => {
                    changes.restarted += 1;
                    let moved = old.import.endpoint() != import.endpoint();
                    shared.spawn(import, Some((old, moved)))
                }
            };
            running.insert(key, started);
        }
        changes
    }

    /// Stops every import (the server is ending), and every MCP session's opening under way
    /// (a server being started is stopped): their registrations are left to expire.
    pub fn stop_all(&self) {
        self.abort_all();
        self.0.caller.stop_openings();
    }

    /// Stops every import, once its task has ended: none holds its session any more, so the
    /// sessions (and their openings under way) can be closed ([`McpCaller::close_all`]).
    pub async fn end(&self) {
        for (_, running) in self.abort_all() {
            // Aborted (or it panicked, which the log shows): it has ended.
            let _ended = running.task.await;
        }
    }

    /// Aborts every import's task; the imports that ran.
    fn abort_all(&self) -> BTreeMap<(TenantId, ServiceName), Running> {
        let running = std::mem::take(&mut *self.running());
        for running in running.values() {
            running.task.abort();
        }
        running
    }

    /// How many imports are imported now, and how many are not.
    pub fn counts(&self) -> (u64, u64) {
        let running = self.running();
        let imported = running
            .values()
            .filter(|running| running.state.is_imported())
            .count();
        (imported as u64, (running.len() - imported) as u64)
    }

    /// How many listed tools the imports hold back, not approved, at their last listings.
    pub fn held_tools(&self) -> u64 {
        self.running()
            .values()
            .map(|running| running.state.held())
            .sum()
    }

    fn running(&self) -> MutexGuard<'_, BTreeMap<(TenantId, ServiceName), Running>> {
        self.0
            .running
            .lock()
            .unwrap_or_else(|error| error.into_inner())
    }
}

impl Shared {
    /// Runs `import`, once `replaced` (the import it replaces, and whether its registration is
    /// to go at once) has been retired.
    fn spawn(self: &Arc<Self>, import: &McpImport, replaced: Option<(Running, bool)>) -> Running {
        // Retired on a task of its own, so that it completes even when this import is
        // replaced in turn before it has.
        let retiring = replaced.map(|(old, deregister)| self.retire(old, deregister));
        let state = Arc::new(ImportState::new(import.approved_tools.clone()));
        let (registry, caller) = (self.registry.clone(), self.caller.clone());
        let heavy_work = self.heavy_work.clone();
        let (task_import, task_state) = (import.clone(), Arc::clone(&state));
        let task = tokio::spawn(async move {
            if let Some(retiring) = retiring {
                // It cannot fail but by panicking, which the log shows.
                let _retired = retiring.await;
            }
            run(task_import, registry, caller, task_state, heavy_work).await;
        });
        Running {
            import: import.clone(),
            state,
            task,
        }
    }

    /// Stops `old` now, and on a task answered: waits for its task to end, closes its session
    /// and, with `deregister`, deregisters its service (a registration made since by another
    /// import or provider stays: its lease differs).
    fn retire(self: &Arc<Self>, old: Running, deregister: bool) -> JoinHandle<()> {
        old.task.abort();
        tokio::spawn(Arc::clone(self).retired(old, deregister))
    }

    async fn retired(self: Arc<Self>, old: Running, deregister: bool) {
        // Ended (aborted, or it panicked): it registers nothing more.
        let _ended = old.task.await;
        self.caller.close(&SessionKey::of_import(&old.import)).await;
        if deregister && let Some(lease) = old.state.lease() {
            let import = &old.import;
            match self
                .registry
                .deregister(import.tenant, &import.service, lease)
            {
                Ok(()) => {
                    tracing::info!(service = %import.service, tenant = %import.tenant, "MCP import stopped and its service deregistered");
                }
                Err(error) => {
                    tracing::debug!(service = %import.service, %error, "an MCP import stopped; its registration had gone or been replaced");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::mcp::approval::ApprovedTools;
    use crate::mcp::import_config::McpSource;
    use crate::registry::memory::MemoryStore;

    /// An import of `service` from a server at `port` of the loopback address (none listens).
    fn import(service: &str, port: u16) -> McpImport {
        McpImport {
            service: ServiceName::parse(service).expect("a service name"),
            source: McpSource::Http(format!("http://127.0.0.1:{port}/mcp")),
            tenant: TenantId(0),
            refresh_interval: Duration::from_secs(60),
            auth: None,
            approved_tools: None,
        }
    }

    /// Each entry is matched by tenant and service: added ones start, gone ones stop, ones
    /// with other server settings start again, and ones with other approvals alone only take
    /// them.
    #[tokio::test]
    async fn apply_tells_added_changed_approved_and_gone_imports_apart() {
        let registry = Registry::new(MemoryStore::start(16, 16), Default::default(), 16);
        let live = LiveImports::start(
            &[import("alpha", 9), import("beta", 9)],
            &registry,
            &McpCaller::default(),
            &HeavyWork::new(1),
        );
        assert_eq!(live.counts(), (0, 2));
        let mut approving = import("alpha", 9);
        let table = BTreeMap::from([("add".to_owned(), "a".repeat(64))]);
        approving.approved_tools =
            Some(ApprovedTools::check(&approving.service, &table).expect("a valid table"));
        let now = [approving.clone(), import("gamma", 9)];
        let changes = live.apply(&now);
        assert_eq!(
            changes,
            ImportChanges {
                started: 1,
                restarted: 0,
                stopped: 1,
                approvals_changed: 1,
            }
        );
        assert!(live.apply(&now).is_empty());
        let moved = live.apply(&[approving, import("gamma", 10)]);
        assert_eq!(moved.restarted, 1);
        assert_eq!(moved.started + moved.stopped + moved.approvals_changed, 0);
        assert_eq!(live.counts(), (0, 2));
        live.stop_all();
        assert_eq!(live.counts(), (0, 0));
    }
}
