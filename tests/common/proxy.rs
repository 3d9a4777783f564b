//! A TCP proxy whose open connections can be frozen: they stop carrying bytes but stay open,
//! as when the host at the other end vanished (no FIN, no RST). Connections opened after the
//! freeze carry bytes as before. Its connections can also be slowed, as over a long link.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The proxy; stopped, with every connection it holds, when dropped.
pub struct FreezingProxy {
    pub addr: SocketAddr,
    /// Bumped by each freeze; a connection carries bytes while it is the one it opened in.
    epoch: Arc<AtomicU64>,
    /// How long each chunk of bytes is held before it is passed on, in milliseconds.
    delay_ms: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl FreezingProxy {
    /// A proxy on 127.0.0.1 to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("address");
        let epoch = Arc::new(AtomicU64::new(0));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let shared = Arc::clone(&epoch);
        let shared_delay = Arc::clone(&delay_ms);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let epoch = Arc::clone(&shared);
                let delay = Arc::clone(&shared_delay);
                connections.spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let opened_in = epoch.load(Ordering::SeqCst);
                    let (in_read, in_write) = inbound.into_split();
                    let (out_read, out_write) = outbound.into_split();
                    tokio::join!(
                        carry(in_read, out_write, &epoch, opened_in, &delay),
                        carry(out_read, in_write, &epoch, opened_in, &delay)
                    );
                });
            }
        });
        Self {
            addr,
            epoch,
            delay_ms,
            task,
        }
    }

    /// Holds every chunk of bytes, each way, for `delay` before passing it on, from now on.
    pub fn delay(&self, delay: std::time::Duration) {
        let millis = u64::try_from(delay.as_millis()).expect("a delay of a test's length");
        self.delay_ms.store(millis, Ordering::SeqCst);
    }

    /// Freezes every connection open now.
    pub fn freeze_open_connections(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either ends, or forever holds both once frozen.
async fn carry(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    epoch: &AtomicU64,
    opened_in: u64,
    delay_ms: &AtomicU64,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if epoch.load(Ordering::SeqCst) != opened_in {
            // Frozen: nothing more goes through, and nothing is closed.
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        let delay = delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
