//! Importing the tools of MCP servers: for each `[[mcp_imports]]` entry, toolplane opens an MCP
//! session with the server (at its URL, or started by its command over stdio), lists its tools
//! (every page) and registers them as a service of its own under a lease it keeps alive, with
//! the server's URL after `mcp+` (or `mcp+stdio://TENANT/SERVICE`) as endpoint, so its tools
//! are discovered, validated, bounded, recorded and invoked like any other (calls go over MCP,
//! see [`super::client`]).
//!
//! The list is read again every `refresh_interval`, and when the server sends
//! `notifications/tools/list_changed` (at once, but no sooner than [`MIN_LISTING_GAP`] after
//! the last reading); a changed list registers the service again (an `UPDATED` event), an
//! unchanged one renews the lease. A listing is checked, and a changed registration
//! validated, in the pool of heavy work (`invoke::heavy`, by the import's tenant in turns), not
//! on a thread serving calls. A tool toolplane cannot take (a name outside
//! `[A-Za-z0-9_.-]`, a schema that does not compile) is left out, with a warning (once per
//! definition: see [`CheckedTools`]). While the server cannot be reached, toolplane tries
//! again (1 s, doubling up to the refresh interval) and the lease is not renewed, so the
//! service expires after `3 x refresh_interval` (at most `max_ttl`) and comes back when the
//! server does. How toolplane authenticates to a server at a URL (a bearer token from the
//! environment or a file, or OAuth client credentials) is [`super::import_auth`]'s. An entry
//! with
//! `approved_tools` registers only the tools approved at the definition listed, holding the
//! others back ([`super::approval`]); when its approvals change, its server is listed again
//! at once.

use std::time::Duration;

use rmcp::model::Tool;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::approval::{ApprovedTools, HeldLog, HeldTool, Verdict};
use super::client::{McpCaller, McpSession};
pub use super::import_config::{
    DEFAULT_REFRESH_INTERVAL, INHERITED_ENV, McpImport, McpImportConfig, McpImportsSource,
    McpSource, ReadMcpImports, Secret, ServerAuth, StdioServer,
};
pub use super::import_listing::{
    CheckedTools, LISTING_TIMEOUT, ListedTool, MAX_LISTING_PAGES, keep_within_limit, list_tools,
    read_listing,
};
use super::import_states::ImportState;
pub use super::live_imports::{ImportChanges, LiveImports};
use super::session_keys::SessionKey;
use crate::invoke::heavy::HeavyWork;
use crate::registry::model::{ServiceSpec, ToolSpec};
use crate::registry::validate::is_service_version;
use crate::registry::{LeaseId, PreparedRegistration, Registry, RegistryError};

/// The first wait before trying an unreachable server again.
pub(super) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// How often an import checks that its session is still open.
const SESSION_CHECK: Duration = Duration::from_secs(1);
/// The shortest time between two listings a server's `list_changed` asks for: a server
/// announcing changes without pause is listed once a second, not back to back.
pub const MIN_LISTING_GAP: Duration = Duration::from_secs(1);
/// The version an imported service gets when its server names none in semantic versioning.
pub(super) const UNVERSIONED: &str = "0.0.0";

/// Returns when the tools are to be listed again: `refresh` after the listing that began at
/// `listed_at`, or when `changed` is notified (the server's `list_changed`), but no sooner
/// than [`MIN_LISTING_GAP`] after it.
async fn next_listing(refresh: Duration, listed_at: Instant, changed: &Notify) {
    tokio::select! {
        () = tokio::time::sleep_until(listed_at + refresh) => {}
        () = changed.notified() => {
            tokio::time::sleep_until(listed_at + MIN_LISTING_GAP).await;
        }
    }
}

/// What an import registered last: its lease, and the version and tools it registered under
/// it.
struct Registered {
    lease: LeaseId,
    version: String,
    tools: Vec<ToolSpec>,
}

/// Runs `import` until it is aborted, using the session `caller` keeps with its server (the
/// one its tools are called over), and telling `state` how it goes.
pub(super) async fn run(
    import: McpImport,
    registry: Registry,
    caller: McpCaller,
    state: Arc<ImportState>,
    heavy_work: HeavyWork,
) {
    let endpoint = import.endpoint();
    let key = SessionKey::of_import(&import);
    let mut retry = FIRST_RETRY;
    let mut registered: Option<Registered> = None;
    let mut held_log = HeldLog::default();
    let mut checked = CheckedTools::default();
    loop {
        match caller.session(&key).await {
            Ok(session) => loop {
                let version = session
                    .peer_info()
                    .and_then(|info| info.server_info.clone())
                    .map(|implementation| implementation.version)
                    .filter(|version| is_service_version(version))
                    .unwrap_or_else(|| UNVERSIONED.to_owned());
                let listed_at = Instant::now();
                match list_tools(&session, &import, registry.limits()).await {
                    Ok(tools) => {
                        retry = FIRST_RETRY;
                        let listed = Listed {
                            endpoint: endpoint.clone(),
                            version,
                            tools,
                            approved: state.approved(),
                        };
                        // The server answered: its lease is renewed now, not after the pool
                        // gets to the listing (its tenant's other work may keep it waiting
                        // past the lease's end). A changed listing registers again below.
                        let renewed = registered.as_ref().is_some_and(|current| {
                            (registry.heartbeat(import.tenant, &import.service, current.lease))
                                .is_ok()
                        });
                        let taken = (std::mem::take(&mut checked), registered.take());
                        let work = worked_out(&import, &registry, listed, taken, renewed);
                        let worked = heavy_work.run_to_end(import.tenant, work).await;
                        checked = worked.checked;
                        held_log.report(&import.service, &worked.held);
                        state.set_held(worked.held.len());
                        registered = match worked.next {
                            Next::Renewed => worked.registered,
                            Next::Store(store) => {
                                let (spec, prepared) = *store;
                                stored(&import, &registry, spec, prepared)
                            }
                        };
                        state.set_imported(registered.is_some());
                        if let Some(current) = &registered {
                            state.set_lease(Some(current.lease));
                        }
                    }
                    Err(error) => {
                        tracing::warn!(service = %import.service, source = %import.source, %error, "cannot list the MCP server's tools");
                        caller.forget(&key, &session).await;
                        state.set_imported(false);
                        break;
                    }
                }
                let changed = &session.service().tools_changed;
                tokio::select! {
                    () = next_listing(import.refresh_interval, listed_at, changed) => {}
                    // The configuration file approves other tools: list again at once.
                    () = state.approvals_changed() => {}
                    // A call found it broken, or a server toolplane started exited: follow the
                    // session opened in its place, and list again on it.
                    () = closed(&session) => break,
                }
            },
            Err(error) => {
                state.set_imported(false);
                tracing::warn!(service = %import.service, %error, retry_in = ?retry, "cannot reach the MCP server to import");
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(import.refresh_interval);
    }
}

/// Completes once `session` has closed (checked every [`SESSION_CHECK`]).
async fn closed(session: &McpSession) {
    while !session.is_transport_closed() {
        tokio::time::sleep(SESSION_CHECK).await;
    }
}

/// The registration of `tools`: those toolplane can take, each checked on its own (unless
/// `checked` holds it as listed), and, when the import asks for approval, approved at the
/// definition listed; and the tools held back for approval.
fn service_spec(
    import: &McpImport,
    registry: &Registry,
    listing: Listing<'_>,
    checked: &mut CheckedTools,
) -> (ServiceSpec, Vec<HeldTool>) {
    let ttl = import.lease(registry.limits().max_ttl);
    let mut spec = ServiceSpec {
        name: import.service.to_string(),
        version: listing.version,
        endpoint: listing.endpoint.to_owned(),
        tools: Vec::new(),
        ttl: Some(ttl),
        instance_id: String::new(),
    };
    let mut held = Vec::new();
    let limits = registry.limits();
    for listed in read_listing(import, listing.approved, limits, listing.tools, checked) {
        match listed.verdict {
            None | Some(Verdict::Approved) => spec.tools.push(listed.spec),
            Some(verdict) => held.push(HeldTool {
                name: listed.spec.name,
                sha256: listed.sha256,
                verdict,
            }),
        }
    }
    keep_within_limit(import, limits, &mut spec.tools, checked);
    (spec, held)
}

/// A listing of a server's, and the approvals in force for it, to be worked out in the pool
/// of heavy work.
struct Listed {
    endpoint: String,
    version: String,
    tools: Vec<Tool>,
    approved: Arc<Option<ApprovedTools>>,
}

/// A listing worked out: the tools held back, the checks kept for the next listing, what was
/// registered last, and what to do with the registration the listing makes.
struct Worked {
    held: Vec<HeldTool>,
    checked: CheckedTools,
    registered: Option<Registered>,
    next: Next,
}

/// What to do with the registration a listing makes.
enum Next {
    /// The tools registered last, unchanged, and their lease renewed: nothing more.
    Renewed,
    /// Other tools, or the lease gone (it expired while the server could not be reached, or
    /// was deregistered): store the registration, validated (or refused).
    Store(Box<(ServiceSpec, Result<PreparedRegistration, RegistryError>)>),
}

/// The work of reading `listed`: each new tool checked on its own, and a registration
/// validated, every schema compiled, unless it lists the tools `registered` (whose lease was
/// `renewed`) unchanged. It takes time with the schemas' size (BENCHMARKS.md, item 49), so it
/// runs in the pool of heavy work, by the import's tenant in turns, as a large
/// `RegisterService` does, not on a thread serving calls; the registration is stored back on
/// the import's task, so an import stopped meanwhile stores nothing.
fn worked_out(
    import: &McpImport,
    registry: &Registry,
    listed: Listed,
    (mut checked, registered): (CheckedTools, Option<Registered>),
    renewed: bool,
) -> impl FnOnce() -> Worked + Send + 'static {
    let (import, registry) = (import.clone(), registry.clone());
    move || {
        let listing = Listing {
            endpoint: &listed.endpoint,
            version: listed.version,
            tools: &listed.tools,
            approved: listed.approved.as_ref().as_ref(),
        };
        let (spec, held) = service_spec(&import, &registry, listing, &mut checked);
        let unchanged = (registered.as_ref())
            .is_some_and(|current| current.tools == spec.tools && current.version == spec.version);
        let next = if renewed && unchanged {
            Next::Renewed
        } else {
            let prepared = registry.prepare(&spec);
            Next::Store(Box::new((spec, prepared)))
        };
        Worked {
            held,
            checked,
            registered,
            next,
        }
    }
}

/// What one listing of a server gave, and the approvals in force for it.
struct Listing<'a> {
    endpoint: &'a str,
    version: String,
    tools: &'a [Tool],
    approved: Option<&'a ApprovedTools>,
}

/// Stores the registration `prepared` of `spec` (unless it was refused); answers what is
/// registered now.
fn stored(
    import: &McpImport,
    registry: &Registry,
    spec: ServiceSpec,
    prepared: Result<PreparedRegistration, RegistryError>,
) -> Option<Registered> {
    match prepared.and_then(|prepared| registry.register_prepared(import.tenant, prepared)) {
        Ok(entry) => {
            tracing::info!(service = %import.service, source = %import.source, tools = spec.tools.len(), "MCP server's tools imported");
            Some(Registered {
                lease: entry.last_registered().lease.id,
                version: spec.version,
                tools: spec.tools,
            })
        }
        Err(error) => {
            tracing::warn!(service = %import.service, %error, "cannot register the MCP server's tools");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFRESH: Duration = Duration::from_secs(60);

    /// How long `next_listing` takes, in paused time, after `since_listing` has passed.
    async fn wait_after(since_listing: Duration, changed: &Notify) -> Duration {
        let listed_at = Instant::now();
        tokio::time::advance(since_listing).await;
        let start = Instant::now();
        next_listing(REFRESH, listed_at, changed).await;
        Instant::now() - start
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_is_listed_at_once_but_never_sooner_than_the_gap_after_a_listing() {
        let changed = Notify::new();
        changed.notify_one();
        assert_eq!(
            wait_after(Duration::from_secs(5), &changed).await,
            Duration::ZERO
        );
        changed.notify_one();
        let waited = wait_after(Duration::from_millis(200), &changed).await;
        assert_eq!(waited, MIN_LISTING_GAP - Duration::from_millis(200));
        // Without a change, the refresh interval after the listing.
        let waited = wait_after(Duration::from_secs(10), &changed).await;
        assert_eq!(waited, REFRESH - Duration::from_secs(10));
    }
}
