//! The task that removes lapsed leases from the [`MemoryStore`] close to their deadline.
//!
//! Each registration hands the task one ticket. When a ticket falls due the store is asked to
//! expire the lease; a lease renewed by heartbeats meanwhile comes back with its new deadline
//! and is queued again, so heartbeats themselves never touch the task.

use std::sync::Weak;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;

use super::lease::{LeaseId, instant_of};
use super::memory::{ExpiryOutcome, MemoryStore};
use super::model::ServiceName;
use crate::envelope::TenantId;

/// A lease to check at its deadline.
#[derive(Debug, Clone)]
pub(crate) struct ExpiryTicket {
    pub(crate) tenant: TenantId,
    pub(crate) service: ServiceName,
    pub(crate) lease: LeaseId,
    /// Monotonic nanoseconds (see [`super::lease::monotonic_now`]).
    pub(crate) deadline: u64,
}

/// Runs until the store is dropped.
pub(crate) fn spawn_expiry_task(
    store: Weak<MemoryStore>,
    mut tickets: mpsc::UnboundedReceiver<ExpiryTicket>,
) {
    tokio::spawn(async move {
        let mut queue: DelayQueue<ExpiryTicket> = DelayQueue::new();
        loop {
            tokio::select! {
                ticket = tickets.recv() => match ticket {
                    Some(ticket) => {
                        let due = tokio::time::Instant::from_std(instant_of(ticket.deadline));
                        queue.insert_at(ticket, due);
                    }
                    None => return,
                },
                Some(due) = queue.next() => {
                    let mut ticket = due.into_inner();
                    let Some(store) = store.upgrade() else { return };
                    if let ExpiryOutcome::CheckAgainAt(deadline) = store.expire(&ticket) {
                        ticket.deadline = deadline;
                        queue.insert_at(ticket, tokio::time::Instant::from_std(instant_of(deadline)));
                    }
                }
            }
        }
    });
}
