//! Whether the server is serving or shutting down, and since when it runs. Shared by the
//! health services and by streams that must end on shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The server's serving state.
#[derive(Debug, Clone)]
pub struct ServingState {
    started: Instant,
    serving: Arc<watch::Sender<bool>>,
}

impl Default for ServingState {
    fn default() -> Self {
        Self::new()
    }
}

impl ServingState {
    /// A state that is serving, started now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            serving: Arc::new(watch::Sender::new(true)),
        }
    }

    /// Whether the server still takes work.
    pub fn is_serving(&self) -> bool {
        *self.serving.borrow()
    }

    /// Marks the server as shutting down; health reports NOT_SERVING from now on.
    pub fn shut_down(&self) {
        self.serving.send_replace(false);
    }

    /// Follows the state: `true` while serving.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.serving.subscribe()
    }

    /// How long the server has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Completes once the server starts shutting down (`serving` is from [`ServingState::subscribe`]).
pub(crate) async fn shutting_down(serving: &mut watch::Receiver<bool>) {
    let _ = serving.wait_for(|serving| !*serving).await;
}

/// Completes on SIGINT or SIGTERM, listening from the call on (call it inside a tokio
/// runtime, before announcing that the server serves).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    // The handlers are installed here, not when the future is first polled: a signal that
    // comes after the caller has announced it is serving, before its server awaits this, is
    // not lost (nor does it kill the process undrained, as the default action would).
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (terminate, interrupt) {
                (Ok(mut terminate), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                (Err(error), _) | (_, Err(error)) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM and SIGINT; only Ctrl-C stops the process");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
