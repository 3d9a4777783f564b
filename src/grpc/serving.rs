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
