//! Each tenant's change events, on a broadcast channel of its own.
//!
//! One channel for every tenant would wake every watcher of every tenant on every change, and
//! let one tenant's burst of changes push another tenant's slow watcher past its buffer (ended
//! as lagged) though nothing of its own changed. A tenant's channel exists while somebody
//! listens: it is dropped at the tenant's first change after its last receiver went, or at the
//! next subscription of any tenant. Each channel holds `buffer` slots (tens of bytes each).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::broadcast;

use super::store::RegistryEvent;
use crate::envelope::TenantId;

type Sender = broadcast::Sender<Arc<RegistryEvent>>;

/// The change-event channels of the tenants somebody is watching.
#[derive(Debug)]
pub(super) struct TenantEvents {
    senders: Mutex<HashMap<TenantId, Sender>>,
    buffer: usize,
}

impl TenantEvents {
    /// No channels yet; each will hold `buffer` events for its slowest receiver.
    pub(super) fn new(buffer: usize) -> Self {
        Self {
            senders: Mutex::new(HashMap::new()),
            buffer: buffer.max(1),
        }
    }

    fn senders(&self) -> MutexGuard<'_, HashMap<TenantId, Sender>> {
        // Every change under this lock is one map operation: nothing is left half-done.
        self.senders
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes to the tenant's events from now on.
    pub(super) fn subscribe(&self, tenant: TenantId) -> broadcast::Receiver<Arc<RegistryEvent>> {
        let mut senders = self.senders();
        senders.retain(|_, sender| sender.receiver_count() > 0);
        senders
            .entry(tenant)
            .or_insert_with(|| broadcast::channel(self.buffer).0)
            .subscribe()
    }

    /// Sends the event `event` builds to the tenant's receivers; builds nothing when it has
    /// none.
    pub(super) fn send(&self, tenant: TenantId, event: impl FnOnce() -> RegistryEvent) {
        let mut senders = self.senders();
        let Some(sender) = senders.get(&tenant) else {
            return;
        };
        if sender.receiver_count() == 0 {
            senders.remove(&tenant);
            return;
        }
        // A receiver may go between the count and the send: then nobody missed the event.
        let _ = sender.send(Arc::new(event()));
    }

    /// How many tenants have a channel.
    #[cfg(test)]
    pub(super) fn channels(&self) -> usize {
        self.senders().len()
    }
}
