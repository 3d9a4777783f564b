//! Accepting connections on a listener without spinning while accepting fails.
//!
//! A process at its file-descriptor limit (`EMFILE`, or the system at its own, `ENFILE`) fails
//! every `accept` at once while a connection waits in the listener's backlog, and the listener
//! stays readable: accepting again at once spins a core for as long as that lasts. tonic's
//! `TcpIncoming` yields such errors and leaves waiting to its caller (tonic's own accept loop
//! logs them and goes on at once); toolplane's gRPC port did the same, taking a whole CPU while
//! a caller held more connections than it had descriptors for. [`accepted`] waits
//! [`ACCEPT_PAUSE`] after such an error before accepting again, as hyper's and axum's accept
//! loops do, so the calls on the connections open go on meanwhile. It is a few lines around
//! `TcpIncoming`; no crate offers it apart from a whole server.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::TcpIncoming;

/// How long accepting waits after an error that is not one connection's own (out of file
/// descriptors or memory) before accepting again.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The connections `listener` accepts, with Nagle off. An error of one connection (aborted or
/// reset before it was accepted) is skipped; after any other, accepting waits
/// [`ACCEPT_PAUSE`]. The first error of a run is logged at WARN (the rest at DEBUG), and the
/// first connection accepted after it at INFO. No error is yielded: the stream ends only when
/// dropped.
pub fn accepted(
    listener: TcpListener,
) -> impl Stream<Item = io::Result<TcpStream>> + Send + 'static {
    // Named in the log lines: which of the server's ports cannot accept.
    let address = (listener.local_addr()).unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    futures_util::stream::unfold(
        (incoming, 0u64),
        move |(mut incoming, mut failed)| async move {
            loop {
                match incoming.next().await? {
                    Ok(stream) => {
                        if failed > 0 {
                            tracing::info!(address = %address, failed, "accepting connections again");
                        }
                        return Some((Ok(stream), (incoming, 0)));
                    }
                    Err(error) if is_one_connections(&error) => {
                        tracing::debug!(address = %address, %error, "a connection was lost before it was accepted");
                    }
                    Err(error) => {
                        failed += 1;
                        log_failure(address, &error, failed);
                        tokio::time::sleep(ACCEPT_PAUSE).await;
                    }
                }
            }
        },
    )
}

/// Whether `error` concerns only the connection being accepted, not the listener.
fn is_one_connections(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

fn log_failure(address: SocketAddr, error: &io::Error, failed: u64) {
    if failed == 1 {
        tracing::warn!(
            %address,
            %error,
            "cannot accept connections (at the file descriptor limit?); trying again every {ACCEPT_PAUSE:?}"
        );
    } else {
        tracing::debug!(%address, %error, failed, "still cannot accept connections");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections are yielded as accepted, with Nagle off.
    #[tokio::test]
    async fn connections_are_accepted_with_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let address = listener.local_addr().expect("an address");
        let mut incoming = Box::pin(accepted(listener));
        let _client = TcpStream::connect(address).await.expect("connected");
        let stream = incoming.next().await.expect("one").expect("accepted");
        assert!(stream.nodelay().expect("read"));
    }

    /// Only a listener's own failures are waited on.
    #[test]
    fn errors_of_one_connection_are_told_from_the_listeners() {
        assert!(is_one_connections(&io::Error::from(
            io::ErrorKind::ConnectionAborted
        )));
        // EMFILE, as `accept` reports it.
        assert!(!is_one_connections(&io::Error::from_raw_os_error(24)));
    }
}
