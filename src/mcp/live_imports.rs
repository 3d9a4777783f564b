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
//!
//! An import started where another of the same tenant and service was stopped (one started
//! again, or one removed and added back) begins once that one's session is closed and its
//! registration gone: otherwise the close could stop the new import's own session as it opened.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
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
    /// The imports removed whose retire has not ended, which an import added back waits for.
    retiring: Mutex<BTreeMap<(TenantId, ServiceName), Retiring>>,
}

/// One import running.
#[derive(Debug)]
struct Running {
    import: McpImport,
    state: Arc<ImportState>,
    task: JoinHandle<()>,
    /// The retire of the import it replaced, which its task waits for before it begins.
    after: Option<Retiring>,
}

/// The retire of an import (see [`Shared::retire`]), which ends when its task does: it holds
/// the sender, which nothing sends on, so every receiver sees it gone then (also when it
/// panicked).
#[derive(Debug, Clone)]
struct Retiring(watch::Receiver<()>);

impl Retiring {
    /// Completes once the retire has ended.
    async fn ended(mut self) {
        // Nothing is sent: `changed` answers only once the sender is gone.
        while self.0.changed().await.is_ok() {}
    }

    /// Whether the retire has ended.
    fn has_ended(&self) -> bool {
        self.0.has_changed().is_err()
    }
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
            retiring: Mutex::default(),
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
        let mut retiring = lock(&shared.retiring);
        retiring.retain(|_, retire| !retire.has_ended());
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
                retiring.insert(key, shared.retire(old, true));
                changes.stopped += 1;
            }
        }
        for (key, import) in wanted {
            let started = match running.remove(&key) {
                None => {
                    changes.started += 1;
                    shared.spawn(import, retiring.remove(&key))
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
                    // Retired on a task of its own, so that it completes even when this
                    // import is replaced in turn before it has.
                    let retire = shared.retire(old, moved);
                    shared.spawn(import, Some(retire))
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
        lock(&self.0.running)
    }
}

/// `mutex` locked: every change under these locks is one map operation, so nothing is left
/// half-done by a panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|error| error.into_inner())
}

impl Shared {
    /// Runs `import`, once the retire `after` (of the import it replaces) has ended.
    fn spawn(self: &Arc<Self>, import: &McpImport, after: Option<Retiring>) -> Running {
        let state = Arc::new(ImportState::new(import.approved_tools.clone()));
        let (registry, caller) = (self.registry.clone(), self.caller.clone());
        let heavy_work = self.heavy_work.clone();
        let (task_import, task_state) = (import.clone(), Arc::clone(&state));
        let waited = after.clone();
        let task = tokio::spawn(async move {
            if let Some(retire) = waited {
                retire.ended().await;
            }
            run(task_import, registry, caller, task_state, heavy_work).await;
        });
        Running {
            import: import.clone(),
            state,
            task,
            after,
        }
    }

    /// Stops `old` now, and on a task of its own: waits for its task to end, closes its
    /// session and, with `deregister`, deregisters its service (a registration made since by
    /// another import or provider stays: its lease differs). The retire answered ends then.
    fn retire(self: &Arc<Self>, old: Running, deregister: bool) -> Retiring {
        old.task.abort();
        let (ended, retiring) = watch::channel(());
        tokio::spawn(Arc::clone(self).retired(old, deregister, ended));
        Retiring(retiring)
    }

    /// What [`Self::retire`] does on its task; `_ended` is dropped as it ends.
    async fn retired(self: Arc<Self>, old: Running, deregister: bool, _ended: watch::Sender<()>) {
        // Stopped while it waited for the import it replaced: that one's retire may still be
        // closing the session, so this one ends after it.
        if let Some(before) = old.after {
            before.ended().await;
        }
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

    use tokio::net::TcpListener;
    use tokio::time::Instant;

    use super::*;
    use crate::mcp::approval::ApprovedTools;
    use crate::mcp::import::FIRST_RETRY;
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

    /// An import removed and added back at once opens its session only after the removed
    /// one's session is closed. That close used to stop the new import's opening as it began
    /// (in some of 30 rounds here, every run), which logged that the server could not be
    /// reached and tried again [`FIRST_RETRY`] later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_import_added_back_at_once_opens_its_session_the_first_time() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("its address").port();
        let registry = Registry::new(MemoryStore::start(16, 16), Default::default(), 16);
        let alpha = [import("alpha", port)];
        let caller = McpCaller::default();
        let live = LiveImports::start(&alpha, &registry, &caller, &HeavyWork::new(1));
        // Each import sends its initialize request and waits for an answer; none comes. The
        // connections are kept open: one closed would fail its opening.
        let mut openings = vec![listener.accept().await.expect("the import connects")];
        for round in 0..30 {
            live.apply(&[]);
            live.apply(&alpha);
            let begun = Instant::now();
            openings.push(
                listener
                    .accept()
                    .await
                    .expect("the import added back connects"),
            );
            // A stopped opening is tried again after FIRST_RETRY: one sooner is the first.
            assert!(
                begun.elapsed() < FIRST_RETRY,
                "round {round}: its first opening was stopped"
            );
        }
        live.stop_all();
    }
}
