//! Opening a session with an MCP server: connecting to one at a URL ([`connect`]) or starting
//! one toolplane runs itself ([`start`]); and the openings under way ([`Openings`]), which
//! closing their session stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use super::access_tokens::AccessTokens;
use super::authorized_http::{SessionTokens, WithAccessTokens};
use super::client::{CONNECT_TIMEOUT, McpSession, SessionEvents};
use super::import_config::{INHERITED_ENV, ServerAuth, StdioServer};
use super::orphans::Started;
use super::server_group::WholeGroup;
use super::server_logs;
use super::session_failures::{Via, initialized};
use super::session_keys::SessionKey;
use super::token_requests::TokenRequests;
use crate::client::TokenFile;
use crate::grpc::outgoing_tls::http_client_builder;
use crate::grpc::provider_tls::ProviderTls;

/// What stops the openings under way, by session: closing a session stops the openings of it
/// begun before (a server being started is stopped), so that an import removed while its
/// server starts, which may take a minute, leaves no server running that nothing uses. A
/// session is known here while an opening of it is under way (from [`Openings::stop_signal`]
/// until the last [`OpeningStop`] of it is dropped), and forgotten after: it holds no more
/// sessions than there are openings under way, so none is pushed out by others (a bounded
/// cache did, after 10,000 others, and a close then neither stopped the opening nor waited
/// for less than its end, up to the start timeout).
#[derive(Debug, Clone, Default)]
pub(super) struct Openings(Arc<Mutex<HashMap<SessionKey, Stop>>>);

/// What stops the openings of one session begun since it was last closed, and tells when
/// they have ended.
#[derive(Debug, Clone, Default)]
struct Stop {
    signal: CancellationToken,
    openings: TaskTracker,
}

/// What a use of a session that opens it (or joins its opening) holds until the opening's
/// outcome is out: the signal that stops the opening, and the use's place among those a close
/// waits for ([`Openings::stop`]). The last one of a session dropped forgets the session.
#[derive(Debug)]
pub(super) struct OpeningStop {
    signal: CancellationToken,
    going_on: Option<TaskTrackerToken>,
    key: SessionKey,
    openings: Openings,
}

impl OpeningStop {
    /// What stops the opening: cancelled once its session is closed.
    pub(super) fn signal(&self) -> CancellationToken {
        self.signal.clone()
    }
}

impl Drop for OpeningStop {
    fn drop(&mut self) {
        let mut known = self.openings.known();
        let Some(going_on) = self.going_on.take() else {
            return;
        };
        // Only while the session's entry is the one this was taken from (a close removes it,
        // and a later opening makes another), and under the lock that new places are taken
        // under, so that none is taken between this check and the removal.
        let ours = (known.get(&self.key))
            .is_some_and(|stop| TaskTracker::ptr_eq(&stop.openings, going_on.task_tracker()));
        drop(going_on);
        if ours
            && known
                .get(&self.key)
                .is_some_and(|stop| stop.openings.is_empty())
        {
            known.remove(&self.key);
        }
    }
}

impl Openings {
    /// The sessions with openings under way (a panic while the lock was held left nothing
    /// half-changed: each change is one map operation).
    fn known(&self) -> MutexGuard<'_, HashMap<SessionKey, Stop>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What an opening of `key` begun now holds until it ends (dropped unused when the
    /// opening joins one under way).
    pub(super) fn stop_signal(&self, key: &SessionKey) -> OpeningStop {
        let mut known = self.known();
        let stop = known.entry(key.clone()).or_default();
        OpeningStop {
            signal: stop.signal.clone(),
            going_on: Some(stop.openings.token()),
            key: key.clone(),
            openings: self.clone(),
        }
    }

    /// Stops the openings of `key` under way, and completes once each has ended: a use of
    /// the session after it opens another, rather than joining one stopped whose task has not
    /// yet seen the stop (and failing with it).
    pub(super) async fn stop(&self, key: &SessionKey) {
        let stop = self.known().remove(key);
        if let Some(stop) = stop {
            stop.signal.cancel();
            stop.openings.close();
            stop.openings.wait().await;
        }
    }

    /// Stops every opening under way.
    pub(super) fn stop_all(&self) {
        for (_, stop) in self.known().drain() {
            stop.signal.cancel();
        }
    }

    /// How many sessions have openings under way.
    #[cfg(test)]
    fn sessions(&self) -> usize {
        self.known().len()
    }
}

/// Opens a session with the MCP server at `url` (an `http://` or `https://` URL), over TLS as
/// `tls` says (the TLS to providers: `provider_ca_file` and the client certificate),
/// authenticating as `auth` says: a bearer token sent as `Authorization: Bearer ...` (its own,
/// or a file's, read again as [`TokenFile`] says), or access tokens got with OAuth client
/// credentials ([`AccessTokens`], each request for one counted in
/// `token_requests`). The server's log messages name it `endpoint`.
pub(super) async fn connect(
    endpoint: &str,
    url: &str,
    auth: Option<ServerAuth>,
    tls: &ProviderTls,
    token_requests: Arc<TokenRequests>,
) -> Result<McpSession, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    let client = http_client_builder(Some(&tls.http_config()))
        .build()
        .map_err(|error| format!("cannot make an HTTP client for {url}: {error}"))?;
    let events = SessionEvents::of(endpoint);
    // Tokens that may change while the session lasts go on each request through
    // `WithAccessTokens`; a fixed token is the transport's own header.
    let tokens = match auth {
        Some(ServerAuth::ClientCredentials(credentials)) => {
            let obtaining = AccessTokens::obtain(url, &credentials, tls, token_requests);
            let tokens = tokio::time::timeout(CONNECT_TIMEOUT, obtaining)
                .await
                .map_err(|_| {
                    format!(
                        "MCP server {url}'s authorization server did not give an access token \
                         within {CONNECT_TIMEOUT:?}"
                    )
                })??;
            Some(SessionTokens::OAuth(Arc::new(tokens)))
        }
        Some(ServerAuth::BearerFile { path, every }) => {
            let file = TokenFile::open(&path, every)
                .map_err(|error| format!("no bearer token for MCP server {url}: {error}"))?;
            Some(SessionTokens::File(Arc::new(file)))
        }
        Some(ServerAuth::Bearer(token)) => {
            config = config.auth_header(token.0);
            None
        }
        None => None,
    };
    match tokens {
        Some(tokens) => {
            let client = WithAccessTokens {
                http: client,
                tokens,
            };
            let transport = StreamableHttpClientTransport::with_client(client, config);
            initialized(url, events.open(transport), Via::Http(tls)).await
        }
        None => {
            let transport = StreamableHttpClientTransport::with_client(client, config);
            initialized(url, events.open(transport), Via::Http(tls)).await
        }
    }
}

/// Starts the MCP server `server` and opens a session with it over its standard input and
/// output; its log messages and the lines of its standard error are logged naming it
/// `endpoint` ([`server_logs`]). It gets the [`INHERITED_ENV`] variables of toolplane's
/// environment and its own, no others. It is stopped when the session ends, with what it
/// left running ([`WholeGroup`]).
pub(super) async fn start(endpoint: &str, server: &StdioServer) -> Result<McpSession, String> {
    let shown = server.command.join(" ");
    let (program, args) = server
        .command
        .split_first()
        .ok_or_else(|| "an empty MCP server command".to_owned())?;
    let mut process = tokio::process::Command::new(program);
    process.args(args).env_clear().kill_on_drop(true);
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            process.env(name, value);
        }
    }
    for (name, value) in &server.env {
        process.env(name, &value.0);
    }
    // In a process group of its own, which its stop signals (SIGTERM, SIGKILL) reach whole, as
    // the MCP Python SDK's client starts a server (a session of its own): a server started
    // through a launcher (`npx`, `uvx`, a shell) that does not end by itself is stopped with
    // its launcher; without, SIGTERM reached the launcher alone, and the server ran on.
    let mut process = CommandWrap::from(process);
    process.wrap(ProcessGroup::leader());
    let starting = Started::starting();
    let (transport, stderr) = TokioChildProcess::builder(process)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot start MCP server {shown:?}: {error}"))?;
    // Its session waits for it (forgotten when the session's transport goes, `WholeGroup`).
    starting.note(transport.id());
    let events = SessionEvents::of(endpoint);
    if let Some(stderr) = stderr {
        let budget = Arc::clone(&events.log_budget);
        server_logs::relay_stderr(endpoint.into(), stderr, budget);
    }
    let opening = events.open(WholeGroup::of(transport, endpoint));
    initialized(&shown, opening, Via::Stdio { endpoint }).await
}

#[cfg(test)]
#[path = "session_opening_tests.rs"]
mod tests;
