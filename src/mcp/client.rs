//! Calling the tools of MCP servers: the provider caller for services whose endpoint is an MCP
//! server's Streamable HTTP URL written `mcp+http://...` or `mcp+https://...` (the services
//! [`super::import`] registers, or any provider registering such an endpoint), or
//! `mcp+stdio://TENANT/SERVICE` for a server an import starts with its command.
//!
//! Sessions are opened on first use (protocol 2025-11-25, the initialize handshake): each
//! import has its own, shared by its listings and the calls of the service it registered; the
//! services that name an MCP URL themselves share one per URL ([`super::session_keys`]). A
//! session whose connection is lost is opened again on the next call. A call is `tools/call`
//! with the input as its arguments, made and read by [`super::tool_call`]. A health check is
//! an MCP `ping`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rmcp::ClientHandler;
#[allow(deprecated)] // `LoggingMessageNotificationParam`: see `server_logs`.
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ErrorCode, Implementation,
    LoggingMessageNotificationParam, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::NotificationContext;
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
    ServiceError,
};
use rmcp::transport::Transport;
use serde_json::Value;
use tokio::sync::Notify;

use super::import_config::McpImport;
use super::log_budget::server_log_budget;
use super::progress_routes::{ProgressRoutes, ProgressTap};
use super::server_logs;
use super::session_failures::{failure_text, inner_failure, scope_refusal};
use super::session_keys::{ImportEndpoints, Opening, SessionKey};
use super::session_opening::{Openings, connect, start};
use super::token_requests::TokenRequests;
use super::tool_call::{call_reporting_progress, reply_of};
use crate::grpc::provider_tls::ProviderTls;
use crate::invoke::caller::{
    FailureKind, MCP_ENDPOINT_PREFIX, MCP_STDIO_ENDPOINT_PREFIX, ProviderCall, ProviderCaller,
    ProviderFailure, ProviderReply,
};
use crate::log_budget::LogBudget;

/// The longest an MCP session with a server at a URL may take to open (connect and
/// initialize).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a server toolplane starts may take to answer the initialize request, its start
/// included. The MCP SDKs' clients wait as long for an answer (the TypeScript SDK's default
/// request timeout), and a server started by `npx` or `uvx` may fetch its packages first; with
/// [`CONNECT_TIMEOUT`] a server taking longer than 10 s to start was stopped and started again
/// without end, never imported.
pub const STDIO_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a health check's `ping` may take.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a health check waits for the session it pings to open: a little longer than a
/// session at a URL has to open, so that the check reports that session's own failure.
const HEALTH_OPEN_WAIT: Duration = CONNECT_TIMEOUT.saturating_add(Duration::from_secs(1));
/// gRPC codes an MCP failure is reported with.
pub(super) mod code {
    pub(in crate::mcp) const UNKNOWN: i32 = 2;
    pub(in crate::mcp) const INVALID_ARGUMENT: i32 = 3;
    pub(in crate::mcp) const NOT_FOUND: i32 = 5;
    pub(in crate::mcp) const PERMISSION_DENIED: i32 = 7;
    pub(in crate::mcp) const OUT_OF_RANGE: i32 = 11;
    pub(in crate::mcp) const INTERNAL: i32 = 13;
}

/// The longest a session is waited for to close at the server's end: a little more than the
/// 3 s a started server has to end after its standard input is closed and the 3 s more it has
/// after SIGTERM (rmcp's stdio shutdown), or than rmcp's wait for a `DELETE` to be answered.
const SESSION_CLOSE_WAIT: Duration = Duration::from_secs(7);
/// How often a session a call still uses, cancelled at the server's end, is checked for having
/// ended.
const IN_USE_END_CHECK: Duration = Duration::from_millis(20);
/// How many sessions are kept (the least used are closed past it).
const SESSIONS_KEPT: u64 = 10_000;
/// A session with one MCP server.
pub type McpSession = RunningService<RoleClient, SessionEvents>;

/// The client side of a session: how toolplane introduces itself (protocol 2025-11-25, the
/// initialize handshake, which servers of every recent version answer), a wake-up for
/// whoever follows the server's tool list ([`super::import`]) when the server says it changed,
/// and the server's log messages, logged ([`server_logs`]).
#[derive(Debug, Clone)]
pub struct SessionEvents {
    config: ClientConfig,
    /// The server, as its log messages name it: the session's endpoint.
    server: Arc<str>,
    /// Notified on each `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
    /// The calls waiting for the server's `notifications/progress`, by progress token.
    pub(super) progress: Arc<ProgressRoutes>,
    /// How much of the server's log is logged (shared with its standard error's relay).
    pub(super) log_budget: Arc<LogBudget>,
}

impl SessionEvents {
    /// The events of a session with `server` (the endpoint, as the server's log messages are
    /// to name it).
    pub(super) fn of(server: &str) -> Self {
        let server: Arc<str> = server.into();
        Self {
            log_budget: Arc::new(server_log_budget(Arc::clone(&server))),
            server,
            config: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("toolplane", env!("CARGO_PKG_VERSION")),
            )
            .with_protocol_version(ProtocolVersion::V_2025_11_25),
            tools_changed: Arc::new(Notify::new()),
            progress: Arc::default(),
        }
    }

    /// Opens a session over `transport` (the initialize handshake), its progress reports
    /// routed to the calls they are for as they are received ([`ProgressTap`]).
    pub(super) fn open<T>(
        self,
        transport: T,
    ) -> impl Future<Output = Result<McpSession, ClientInitializeError>> + Send
    where
        T: Transport<RoleClient> + 'static,
    {
        let tap = ProgressTap {
            inner: transport,
            routes: Arc::clone(&self.progress),
        };
        self.serve_with_lifecycle(tap, ClientLifecycleMode::Initialize)
    }
}

impl ClientHandler for SessionEvents {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    #[allow(deprecated)] // MCP logging, deprecated by 2026-07-28: see `server_logs`.
    async fn on_logging_message(
        &self,
        message: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if self.log_budget.allows() {
            server_logs::log_message(&self.server, &message);
        }
    }
}

/// Calls tools of MCP servers: over each import's own session for the service it registered,
/// else over one session per endpoint (see [`super::session_keys`]).
#[derive(Debug, Clone)]
pub struct McpCaller {
    sessions: moka::future::Cache<SessionKey, Arc<McpSession>>,
    /// What the imports running now say of their endpoints (replaced when they change).
    imports: Arc<ArcSwap<ImportEndpoints>>,
    /// How `mcp+https://` servers are reached: the TLS to providers.
    tls: ProviderTls,
    /// The OAuth access tokens asked for by the sessions opened.
    token_requests: Arc<TokenRequests>,
    /// What stops the openings under way.
    openings: Openings,
}

impl Default for McpCaller {
    /// A caller with no imports' tokens or commands, checking servers' certificates against
    /// the public CAs.
    fn default() -> Self {
        Self {
            sessions: moka::future::Cache::builder()
                .max_capacity(SESSIONS_KEPT)
                .build(),
            imports: Arc::default(),
            tls: ProviderTls::default(),
            token_requests: Arc::default(),
            openings: Openings::default(),
        }
    }
}

/// Ends `session`, waiting for its end up to [`SESSION_CLOSE_WAIT`]: the server toolplane
/// started stopped, or the `DELETE` of a session at a URL sent. A session a call still uses
/// (one past the drain's grace) is cancelled, which ends it on rmcp's task as closing does,
/// and waited for as well (it was not, and the process often ended before its end was sent).
async fn closed(session: Arc<McpSession>) {
    match Arc::try_unwrap(session) {
        Ok(mut session) => {
            // Either way it is ended: a join error is a panic, which the log shows.
            let _closed = session.close_with_timeout(SESSION_CLOSE_WAIT).await;
        }
        Err(in_use) => {
            in_use.cancellation_token().cancel();
            // rmcp answers no end of its task to a shared session; its transport reads as
            // closed once the task has ended, its cleanup done.
            let ended = async {
                while !in_use.is_transport_closed() {
                    tokio::time::sleep(IN_USE_END_CHECK).await;
                }
            };
            let _in_time = tokio::time::timeout(SESSION_CLOSE_WAIT, ended).await;
        }
    }
}

fn unavailable(message: String, unsent: bool) -> ProviderFailure {
    ProviderFailure {
        kind: FailureKind::Unavailable,
        reason: "TOOL_UNAVAILABLE".to_owned(),
        message,
        unsent,
        detail: None,
    }
}

impl McpCaller {
    /// A caller that knows how to reach the servers of `imports` (how toolplane authenticates
    /// to them, and the commands that start servers over stdio) and `https` servers (`tls`,
    /// the TLS to providers, read again when its files are renewed).
    pub fn for_imports(imports: &[McpImport], tls: ProviderTls) -> Self {
        let caller = Self {
            tls,
            ..Self::default()
        };
        caller.set_imports(imports);
        caller
    }

    /// Puts in force what `imports` (the imports running now) say of their servers: the
    /// credentials used and the commands started by the sessions opened from now on.
    pub fn set_imports(&self, imports: &[McpImport]) {
        self.imports.store(Arc::new(ImportEndpoints::of(imports)));
    }

    /// The OAuth access tokens its sessions have asked for, by reason and outcome.
    pub fn token_requests(&self) -> Arc<TokenRequests> {
        Arc::clone(&self.token_requests)
    }

    /// Closes the session `key`, if it is open (stopping a server toolplane started, once the
    /// calls on it have ended), and stops its openings under way (a server being started is
    /// stopped), waiting until they have ended: the next use opens another.
    pub async fn close(&self, key: &SessionKey) {
        self.openings.stop(key).await;
        self.drop_session(key).await;
    }

    /// Stops every opening of a session under way (the server is ending): a server being
    /// started is stopped, rather than left to finish starting.
    pub fn stop_openings(&self) {
        self.openings.stop_all();
    }

    /// Closes every session as MCP asks of a client done with its servers, all at once and
    /// each within 7 s (the server is ending, its calls drained): a server toolplane started
    /// has its standard input closed and 3 s to end by itself, then is sent SIGTERM and, 3 s
    /// later, killed (rmcp's stdio shutdown); rmcp ends a session at a URL with `DELETE`. A
    /// session a call still uses (one past the drain's grace) is ended and waited for too.
    /// Openings under way are stopped. (Left to the end of the process, a started server was
    /// killed with no chance to end by itself.)
    pub async fn close_all(&self) {
        self.openings.stop_all();
        let keys: Vec<SessionKey> = (self.sessions.iter())
            .map(|(key, _)| SessionKey::clone(&key))
            .collect();
        let mut removed = Vec::new();
        for key in keys {
            removed.extend(self.sessions.remove(&key).await);
        }
        // moka holds a removed entry until its housekeeping.
        self.sessions.run_pending_tasks().await;
        futures_util::future::join_all(removed.into_iter().map(closed)).await;
    }

    /// Drops the session `key` from those kept, if it is there: the next use opens another.
    async fn drop_session(&self, key: &SessionKey) {
        self.sessions.invalidate(key).await;
        // moka keeps an invalidated entry (here, the session) until its next housekeeping,
        // which runs only as the cache is used again: without this, a removed import's server
        // kept running (and its connection open) until another session was looked up.
        self.sessions.run_pending_tasks().await;
    }

    /// The session `key`, opened now when there is none (or it closed); the error says why it
    /// cannot be opened.
    pub async fn session(&self, key: &SessionKey) -> Result<Arc<McpSession>, String> {
        if let Some(session) = self.sessions.get(key).await {
            if !session.is_transport_closed() {
                return Ok(session);
            }
            // Not `close`: an opening another use began since is not to be stopped.
            self.drop_session(key).await;
        }
        let endpoint = &key.endpoint;
        let url = endpoint
            .strip_prefix(MCP_ENDPOINT_PREFIX)
            .unwrap_or(endpoint)
            .to_owned();
        let Opening { auth, command } = self.imports.load().opening(key);
        let tls = self.tls.clone();
        let token_requests = Arc::clone(&self.token_requests);
        let stdio = endpoint.starts_with(MCP_STDIO_ENDPOINT_PREFIX);
        let stop = self.openings.stop_signal(key);
        let stopped = stop.signal();
        let (endpoint, sessions, key) = (endpoint.clone(), self.sessions.clone(), key.clone());
        let opening = async move {
            let open = async {
                match command {
                    Some(server) => start(&endpoint, &server).await,
                    None if stdio => Err(format!(
                        "no MCP server command is configured for {url}: only an \
                         [[mcp_imports]] entry starts a server over stdio"
                    )),
                    None => connect(&endpoint, &url, auth, &tls, token_requests).await,
                }
            };
            tokio::select! {
                biased;
                () = stopped.cancelled() => {
                    tracing::info!(mcp_server = %endpoint, "an MCP session was closed while it was opening: its opening is stopped");
                    Err(format!(
                        "the MCP session with {endpoint} was closed while it was opening (its \
                         import was removed or changed, or toolplane is stopping)"
                    ))
                }
                opened = open => opened.map(Arc::new),
            }
        };
        // Opened on a task of its own, which those waiting for it (calls, the import's listing,
        // health checks) join: whichever began it, one that gives up (a call at its deadline, a
        // health check after HEALTH_OPEN_WAIT) does not stop it, so a server toolplane starts,
        // which may take up to STDIO_START_TIMEOUT, is not stopped and started again. What
        // stops it is closing the session (`close`: its import removed or changed) or
        // `stop_openings` (the server ending).
        let opened = tokio::spawn(async move {
            let opened = sessions.try_get_with(key, opening).await;
            // Held until the cache has given out the opening's outcome (which happens after
            // the opening has ended), so that a close waits for that: a use of the session
            // after the close otherwise joined the opening it stopped, and failed with it.
            drop(stop);
            opened.map_err(|error| error.to_string())
        });
        opened
            .await
            .map_err(|failed| format!("opening the MCP session failed: {failed}"))?
    }

    /// Forgets `session`, the session `key` (it failed), so the next use opens another; a
    /// newer session already opened in its place stays.
    pub async fn forget(&self, key: &SessionKey, session: &Arc<McpSession>) {
        if let Some(current) = self.sessions.get(key).await
            && Arc::ptr_eq(&current, session)
        {
            self.drop_session(key).await;
        }
    }

    /// Runs one `tools/call`.
    async fn call_tool(self, call: ProviderCall) -> Result<ProviderReply, ProviderFailure> {
        let Value::Object(arguments) = &*call.input else {
            return Err(ProviderFailure {
                kind: FailureKind::Other(code::INVALID_ARGUMENT),
                reason: "TOOL_FAILED".to_owned(),
                message: "an MCP tool takes an object of arguments".to_owned(),
                unsent: true,
                detail: None,
            });
        };
        let key = self
            .imports
            .load()
            .for_call(call.tenant, &call.service, &call.endpoint);
        let session = self
            .session(&key)
            .await
            .map_err(|message| unavailable(message, true))?;
        let mut params =
            CallToolRequestParams::new(call.tool.clone()).with_arguments(arguments.clone());
        if let Some(trace) = &call.trace {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(trace.traceparent());
            if let Some(state) = trace.tracestate() {
                meta.set_tracestate(state);
            }
            params.meta = Some(meta);
        }
        let calling = call_reporting_progress(&session, params, call.progress.clone());
        let answer = match tokio::time::timeout(call.timeout, calling).await {
            Ok(answer) => answer,
            Err(_) => {
                return Err(ProviderFailure {
                    kind: FailureKind::DeadlineExceeded,
                    reason: "TOOL_TIMEOUT".to_owned(),
                    message: format!("the MCP server did not answer within {:?}", call.timeout),
                    unsent: false,
                    detail: None,
                });
            }
        };
        match answer {
            Ok(result) => reply_of(result),
            Err(ServiceError::McpError(error)) => Err(ProviderFailure {
                kind: FailureKind::Other(match error.code {
                    ErrorCode::INVALID_PARAMS => code::INVALID_ARGUMENT,
                    ErrorCode::METHOD_NOT_FOUND => code::NOT_FOUND,
                    _ => code::INTERNAL,
                }),
                reason: "TOOL_FAILED".to_owned(),
                message: format!("the MCP server refused the call: {}", error.message),
                unsent: false,
                detail: None,
            }),
            // The server kept its session: only this call was refused.
            Err(ServiceError::TransportSend(error)) if let Some(why) = scope_refusal(&error) => {
                Err(ProviderFailure {
                    kind: FailureKind::Other(code::PERMISSION_DENIED),
                    reason: "TOOL_FAILED".to_owned(),
                    message: format!(
                        "the MCP server refused the call for want of an OAuth scope: {why}"
                    ),
                    unsent: false,
                    detail: None,
                })
            }
            Err(other) => {
                self.forget(&key, &session).await;
                let ended = key.endpoint.starts_with(MCP_STDIO_ENDPOINT_PREFIX)
                    && matches!(
                        other,
                        ServiceError::TransportClosed | ServiceError::TransportSend(_)
                    );
                let message = if ended {
                    format!(
                        "the MCP server's process ended during the call ({other}); it is \
                         started again by the next call, and {}",
                        server_logs::where_its_stderr_is(&key.endpoint)
                    )
                } else if let ServiceError::TransportSend(error) = &other {
                    format!(
                        "the MCP session failed: cannot send to the server: {}",
                        failure_text(inner_failure(error))
                    )
                } else {
                    format!("the MCP session failed: {other}")
                };
                Err(unavailable(message, false))
            }
        }
    }

    /// An MCP `ping` of `endpoint`'s server, over its session opened now when there is none.
    async fn ping(self, endpoint: String) -> Result<(), String> {
        let key = self.imports.load().for_health_check(&endpoint);
        // Waited for at most HEALTH_OPEN_WAIT: a round of health checks is not held up for as
        // long as a server toolplane starts may take (STDIO_START_TIMEOUT); the opening goes
        // on, and a later check finds its session.
        let session = match tokio::time::timeout(HEALTH_OPEN_WAIT, self.session(&key)).await {
            Ok(opened) => opened?,
            Err(_) => {
                return Err(format!(
                    "the MCP session is still opening after {HEALTH_OPEN_WAIT:?} (a server \
                     toolplane starts has {STDIO_START_TIMEOUT:?} to answer)"
                ));
            }
        };
        match tokio::time::timeout(PING_TIMEOUT, session.send_request(ping_request())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => {
                self.forget(&key, &session).await;
                Err(format!("MCP ping failed: {error}"))
            }
            Err(_) => Err(format!("MCP ping unanswered within {PING_TIMEOUT:?}")),
        }
    }
}

fn ping_request() -> rmcp::model::ClientRequest {
    rmcp::model::ClientRequest::PingRequest(rmcp::model::PingRequest::default())
}

impl ProviderCaller for McpCaller {
    fn call(
        &self,
        call: ProviderCall,
    ) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>> {
        self.clone().call_tool(call).boxed()
    }

    fn check_health(&self, endpoint: &str) -> BoxFuture<'static, Result<(), String>> {
        self.clone().ping(endpoint.to_owned()).boxed()
    }
}
