//! What a server toolplane started leaves behind. Each is started as the leader of a process
//! group of its own ([`super::session_opening`]), and rmcp's stdio shutdown (its standard
//! input closed, then SIGTERM, then SIGKILL) signals the whole group, but only while the
//! server runs: a server that ends by itself when its standard input closes, as the MCP SDKs'
//! servers do, leaves the processes it started and did not stop (a helper, a browser) running,
//! with nothing to stop them. [`WholeGroup`] ends them too once the server has ended, as
//! systemd ends what a service's main process leaves: SIGTERM, then SIGKILL to those still
//! there after [`GROUP_END_WAIT`].
//!
//! Signals go through `libc::killpg`: neither rmcp nor process-wrap signals a group once its
//! leader has been reaped.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::{TokioChildProcess, Transport};

use super::orphans::Started;

/// How long what a server left running has to end after SIGTERM before it is killed.
pub(super) const GROUP_END_WAIT: Duration = Duration::from_secs(1);
/// How often, meanwhile, the group is checked for processes still running.
const GROUP_END_CHECK: Duration = Duration::from_millis(20);

/// A started server's transport that ends the rest of its process group once it has closed.
pub(super) struct WholeGroup {
    server: TokioChildProcess,
    /// The server's process id, its process group's too, which the reaper leaves to it while
    /// it lasts ([`super::orphans`]).
    pid: Option<u32>,
    /// Whether what the server left in its group has been ended.
    group_ended: bool,
    /// The server, as toolplane's log names it.
    endpoint: String,
}

impl WholeGroup {
    /// The transport of `server`, started as a process group's leader, named `endpoint`.
    pub(super) fn of(server: TokioChildProcess, endpoint: &str) -> Self {
        Self {
            pid: server.id(),
            group_ended: false,
            server,
            endpoint: endpoint.to_owned(),
        }
    }
}

impl Transport<RoleClient> for WholeGroup {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.server.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.server.receive()
    }

    /// rmcp's stdio shutdown of the server, then the end of what it left in its group. (A
    /// transport dropped without closing has rmcp kill the server's group at once.)
    async fn close(&mut self) -> Result<(), Self::Error> {
        let closed = self.server.close().await;
        if !std::mem::replace(&mut self.group_ended, true)
            && let Some(group) = self.pid
        {
            end_group(group, &self.endpoint).await;
        }
        closed
    }
}

impl Drop for WholeGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            Started::forget(pid);
        }
    }
}

/// Sends SIGTERM to the processes left in `group`, and SIGKILL to those still there
/// [`GROUP_END_WAIT`] later. Its leader has been reaped: the group's id stays taken (no new
/// process gets it) while any process of the group runs, so only they are signalled; when
/// none is left the first signal finds none.
#[cfg(unix)]
async fn end_group(group: u32, endpoint: &str) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    // SAFETY: killpg only sends a signal, to a group of processes toolplane started.
    let signal = |signal| unsafe { libc::killpg(group, signal) } == 0;
    if !signal(libc::SIGTERM) {
        return;
    }
    tracing::info!(target: super::server_logs::TARGET, mcp_server = endpoint, "the MCP server ended and left processes running in its process group: sent SIGTERM");
    let give_up = tokio::time::Instant::now() + GROUP_END_WAIT;
    while tokio::time::Instant::now() < give_up {
        tokio::time::sleep(GROUP_END_CHECK).await;
        if !signal(0) {
            return;
        }
    }
    signal(libc::SIGKILL);
}

/// Elsewhere than Unix there are no process groups to end.
#[cfg(not(unix))]
async fn end_group(_group: u32, _endpoint: &str) {}
