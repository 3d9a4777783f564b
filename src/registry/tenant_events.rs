//! Each tenant's change events, on a broadcast channel of its own.
//!
//! One channel for every tenant would wake every watcher of every tenant on every change, and
//! let one tenant's burst of changes push another tenant's slow watcher past its buffer (ended
//! as lagged) though nothing of its own changed. A tenant's channel exists while somebody
//! listens: it is dropped at the tenant's first change after its last receiver went, or at the
//! next subscription of any tenant.
//!
//! A channel holds `buffer` events, and each event holds the service as the change left it
//! until every receiver has read it. A receiver that stops reading (a watcher whose caller
//! reads nothing more, its HTTP/2 window full) kept every version of the tenant's services
//! registered meanwhile, up to `buffer` of them: 300 registrations of a 3 MB service kept
//! 2 GB. So a channel also bounds the bytes of the events its receivers have not all read
//! ([`event_weight`]): past `max_bytes`, the oldest of them are let go
//! ([`BufferedEvent::let_go`]), and a receiver reaching one is ended as lagged. The newest is
//! always kept.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::broadcast;

use super::store::{BufferedEvent, ChangeKind, RegistryEvent};
use crate::envelope::TenantId;

/// A tenant's channel, and the events it holds that some receiver has not read yet.
#[derive(Debug)]
struct Channel {
    sender: broadcast::Sender<Arc<BufferedEvent>>,
    /// The events sent, oldest first, with what each is counted as; an event every receiver
    /// has read (or the channel overwrote) is gone from under its `Weak`.
    unread: VecDeque<(u64, Weak<BufferedEvent>)>,
}

/// The change-event channels of the tenants somebody is watching.
#[derive(Debug)]
pub(super) struct TenantEvents {
    channels: Mutex<HashMap<TenantId, Channel>>,
    buffer: usize,
    /// The most bytes of unread events a channel holds; 0 sets no bound.
    max_bytes: u64,
}

impl TenantEvents {
    /// No channels yet; each will hold `buffer` events for its slowest receiver, and at most
    /// `max_bytes` of them (0: no bound).
    pub(super) fn new(buffer: usize, max_bytes: u64) -> Self {
        Self {
            channels: Mutex::new(HashMap::new()),
            buffer: buffer.max(1),
            max_bytes,
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<TenantId, Channel>> {
        // Every change under this lock is one map operation or one channel's send: nothing is
        // left half-done.
        self.channels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Subscribes to the tenant's events from now on.
    pub(super) fn subscribe(&self, tenant: TenantId) -> broadcast::Receiver<Arc<BufferedEvent>> {
        let mut channels = self.channels();
        channels.retain(|_, channel| channel.sender.receiver_count() > 0);
        channels
            .entry(tenant)
            .or_insert_with(|| Channel {
                sender: broadcast::channel(self.buffer).0,
                unread: VecDeque::new(),
            })
            .sender
            .subscribe()
    }

    /// Sends the event `event` builds to the tenant's receivers; builds nothing when it has
    /// none.
    pub(super) fn send(&self, tenant: TenantId, event: impl FnOnce() -> RegistryEvent) {
        let mut channels = self.channels();
        let Some(channel) = channels.get_mut(&tenant) else {
            return;
        };
        if channel.sender.receiver_count() == 0 {
            channels.remove(&tenant);
            return;
        }
        let event = event();
        let weight = event_weight(&event);
        let buffered = Arc::new(BufferedEvent::new(event));
        if self.max_bytes > 0 {
            channel
                .unread
                .push_back((weight, Arc::downgrade(&buffered)));
            channel.bound(self.max_bytes);
        }
        // A receiver may go between the count and the send: then nobody missed the event.
        let _ = channel.sender.send(buffered);
    }

    /// The most bytes of unread events a channel holds (0: no bound).
    pub(super) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// How many tenants have a channel.
    #[cfg(test)]
    pub(super) fn channels_open(&self) -> usize {
        self.channels().len()
    }
}

impl Channel {
    /// Forgets the events every receiver has read, then lets the oldest unread ones go while
    /// they come to more than `max_bytes` (the newest, last, stays).
    fn bound(&mut self, max_bytes: u64) {
        // Events go in the order they were sent (receivers read in order; the channel
        // overwrites the oldest first), so those gone are the oldest.
        while self
            .unread
            .front()
            .is_some_and(|(_, event)| event.strong_count() == 0)
        {
            self.unread.pop_front();
        }
        let mut total: u64 = self.unread.iter().map(|(weight, _)| weight).sum();
        while total > max_bytes && self.unread.len() > 1 {
            let Some((weight, oldest)) = self.unread.pop_front() else {
                break;
            };
            total -= weight;
            if let Some(oldest) = oldest.upgrade() {
                oldest.let_go();
            }
        }
    }
}

/// What one tool of a changed service is counted as beyond its definition's bytes: its name,
/// hashes and the structures holding them.
const BYTES_PER_TOOL: u64 = 512;
/// What an event is counted as beyond its service and tool changes.
const BYTES_PER_EVENT: u64 = 256;

/// About the memory `event` holds while buffered: twice its service's tool definitions (the
/// definitions, and each tool's encoded form, built at the registration's answer) and its
/// tool changes.
pub(super) fn event_weight(event: &RegistryEvent) -> u64 {
    let service = event.entry.as_ref().map_or(0, |entry| {
        let usage = entry.usage();
        2 * usage.tool_bytes + BYTES_PER_TOOL * usage.tools
    });
    let changes = match &event.kind {
        ChangeKind::Updated(changes) => changes
            .iter()
            .map(|change| change.tool.as_str().len() as u64 + BYTES_PER_TOOL)
            .sum(),
        ChangeKind::Added | ChangeKind::Removed | ChangeKind::Expired => 0,
    };
    BYTES_PER_EVENT + service + changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ServiceName;

    /// A change of service `s` (no service left: counted as [`BYTES_PER_EVENT`]).
    fn removal(revision: u64) -> RegistryEvent {
        RegistryEvent {
            revision,
            tenant: TenantId(0),
            service: ServiceName::parse("s").expect("a name"),
            kind: ChangeKind::Removed,
            entry: None,
            wire: Default::default(),
        }
    }

    fn kept(received: &[Arc<BufferedEvent>]) -> Vec<u64> {
        (received.iter())
            .filter_map(|buffered| buffered.event().map(|event| event.revision))
            .collect()
    }

    /// A receiver that reads nothing finds the oldest changes let go once they come to more
    /// than the bound; the newest stays, even when it alone is over it. One that reads every
    /// change as it comes loses none: what was read no longer counts.
    #[tokio::test]
    async fn unread_changes_past_the_bound_are_let_go_and_read_ones_do_not_count() {
        let events = TenantEvents::new(16, 3 * BYTES_PER_EVENT);
        let mut stalled = events.subscribe(TenantId(0));
        for revision in 1..=5 {
            events.send(TenantId(0), || removal(revision));
        }
        let received: Vec<_> = (0..5).map(|_| stalled.try_recv().expect("sent")).collect();
        assert_eq!(kept(&received), [3, 4, 5]);

        let events = TenantEvents::new(16, 3 * BYTES_PER_EVENT);
        let mut reading = events.subscribe(TenantId(0));
        for round in 0..3 {
            for revision in 1..=3 {
                events.send(TenantId(0), || removal(round * 3 + revision));
            }
            let read: Vec<_> = (0..3).map(|_| reading.try_recv().expect("sent")).collect();
            assert_eq!(
                kept(&read),
                (1..=3).map(|r| round * 3 + r).collect::<Vec<_>>()
            );
        }
        let events = TenantEvents::new(16, u64::MAX);
        let mut reading = events.subscribe(TenantId(0));
        for revision in 1..=100 {
            events.send(TenantId(0), || removal(revision));
            reading.try_recv().expect("sent");
        }
        let unread = events.channels()[&TenantId(0)].unread.len();
        assert!(unread <= 1, "{unread} changes read are still tracked");

        let events = TenantEvents::new(16, 1);
        let mut stalled = events.subscribe(TenantId(0));
        events.send(TenantId(0), || removal(1));
        events.send(TenantId(0), || removal(2));
        let received: Vec<_> = (0..2).map(|_| stalled.try_recv().expect("sent")).collect();
        assert_eq!(kept(&received), [2], "the newest stays");
    }

    /// With no bound (0) nothing is let go.
    #[tokio::test]
    async fn with_no_bound_every_change_is_kept() {
        let events = TenantEvents::new(16, 0);
        let mut stalled = events.subscribe(TenantId(0));
        for revision in 1..=10 {
            events.send(TenantId(0), || removal(revision));
        }
        let received: Vec<_> = (0..10).map(|_| stalled.try_recv().expect("sent")).collect();
        assert_eq!(kept(&received), (1..=10).collect::<Vec<_>>());
    }
}
