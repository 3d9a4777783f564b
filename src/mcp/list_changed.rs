//! `notifications/tools/list_changed` whenever a client's tenant's tool list changes: a service
//! registered, deregistered or expired, or re-registered with other tools.
//!
//! A client of protocol 2025-11-25 or earlier gets them on its session once it has
//! initialized ([`spawn_for_session`]); one of 2026-07-28, which has no sessions, on the
//! `subscriptions/listen` stream it opens for them ([`listen`]). Changes that come together (a
//! provider registering several services at its start) are told once, [`SETTLE`] after the
//! first.
//!
//! The SDK acknowledges a `subscriptions/listen` request before the stream's handler starts, so
//! a client may change the registry (and expect to hear of it) before the handler subscribes
//! to the changes. The endpoint therefore notes the registry's revision when each request
//! arrives ([`RevisionAtArrival`]), and a stream that starts at a later revision tells of a
//! change at once. The revision counts every tenant's changes, so that first notification may
//! be of another tenant's change: a client reads its list once more, and misses nothing.

use std::future::Future;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ServerNotification, ToolListChangedNotification};
use rmcp::service::{Peer, SubscriptionContext};
use tokio::sync::broadcast::error::RecvError;

use crate::envelope::TenantId;
use crate::registry::Registry;
use crate::registry::store::{ChangeKind, RegistryEvent};

/// The registry's revision when an MCP request arrived, put in the request's extensions by the
/// endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RevisionAtArrival(pub u64);

/// How long after a change further changes are gathered into the same notification.
pub const SETTLE: Duration = Duration::from_millis(50);
/// How often a session with no changes to tell is checked for having closed.
const CLOSED_CHECK: Duration = Duration::from_secs(10);

/// Whether an event changes what `tools/list` answers.
fn changes_tools(event: &RegistryEvent) -> bool {
    match &event.kind {
        ChangeKind::Added | ChangeKind::Removed | ChangeKind::Expired => true,
        ChangeKind::Updated(changes) => !changes.is_empty(),
    }
}

fn notification() -> ServerNotification {
    ServerNotification::ToolListChangedNotification(ToolListChangedNotification {
        method: Default::default(),
        extensions: Default::default(),
    })
}

/// Tells `tenant`'s tool list changes through `notify` (which answers whether it could) until
/// `stop` completes or a notification cannot be sent; at once when the registry changed after
/// revision `since` (see the module docs).
async fn tell_changes<Notify, Sent>(
    registry: &Registry,
    tenant: TenantId,
    since: Option<RevisionAtArrival>,
    mut notify: Notify,
    stop: impl Future<Output = ()>,
) where
    Notify: FnMut() -> Sent,
    Sent: Future<Output = bool>,
{
    let start = registry.watch(tenant);
    // Every change is told, even the removal of a service whose lease had lapsed by the
    // snapshot (which a watch of services leaves out): the client may have read its list
    // before the lapse, with the service in it. At worst it reads an unchanged list once more.
    let mut events = start.events;
    let mut missed = since.is_some_and(|RevisionAtArrival(at)| start.revision > at);
    let mut stop = std::pin::pin!(stop);
    loop {
        let changed = std::mem::take(&mut missed)
            || tokio::select! {
                received = events.recv() => match received {
                    // An event let go (far behind): it may have changed the list.
                    Ok(buffered) => buffered.event().is_none_or(|event| changes_tools(&event)),
                    // Changes were missed: the list may have changed.
                    Err(RecvError::Lagged(_)) => true,
                    Err(RecvError::Closed) => return,
                },
                () = &mut stop => return,
            };
        if !changed {
            continue;
        }
        tokio::time::sleep(SETTLE).await;
        // Everything that came meanwhile is in the list the client reads next.
        events = events.resubscribe();
        if !notify().await {
            tracing::debug!(%tenant, "an MCP client no longer takes tool list changes");
            return;
        }
        tracing::debug!(%tenant, "an MCP client was told its tool list changed");
    }
}

/// Tells a session's client of its tenant's tool list changes for as long as the session is
/// open.
pub fn spawn_for_session(registry: Registry, tenant: TenantId, peer: Peer<RoleServer>) {
    tokio::spawn(async move {
        let closed = async {
            let mut check = tokio::time::interval(CLOSED_CHECK);
            while !peer.is_transport_closed() {
                check.tick().await;
            }
        };
        let notify = || async { peer.send_notification(notification()).await.is_ok() };
        tell_changes(&registry, tenant, None, notify, closed).await;
    });
}

/// Tells a `subscriptions/listen` stream of its tenant's tool list changes until the client
/// cancels it, starting with any change since the request arrived (`since`).
pub async fn listen(
    registry: &Registry,
    tenant: TenantId,
    since: Option<RevisionAtArrival>,
    subscription: &SubscriptionContext,
) {
    let notify = || async { subscription.sink().send(notification()).await.is_ok() };
    tell_changes(registry, tenant, since, notify, subscription.cancelled()).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::mcp::tools::tests::{register, registry, service};
    use crate::registry::RegistrationLimits;
    use crate::registry::memory::MemoryStore;

    /// How many notifications a stream starting now tells within `within`, for a request
    /// that arrived at `since`.
    async fn told(
        registry: &Registry,
        since: Option<RevisionAtArrival>,
        within: Duration,
    ) -> usize {
        let count = AtomicUsize::new(0);
        let notify = || async {
            count.fetch_add(1, Ordering::Relaxed);
            true
        };
        tell_changes(
            registry,
            TenantId(1),
            since,
            notify,
            tokio::time::sleep(within),
        )
        .await;
        count.into_inner()
    }

    /// A change between a listen request's arrival and its stream's start (after the SDK's
    /// acknowledgment) is told at once; with none, nothing is told.
    #[tokio::test]
    async fn a_change_before_the_stream_started_is_told_at_once() {
        let registry = registry();
        let arrived = RevisionAtArrival(registry.revision());
        let quiet = told(&registry, Some(arrived), 3 * SETTLE).await;
        assert_eq!(quiet, 0, "nothing changed since the request arrived");
        register(&registry, "fresh", &["fresh_tool"], None);
        assert_eq!(told(&registry, Some(arrived), 3 * SETTLE).await, 1);
        assert_eq!(
            told(&registry, None, 3 * SETTLE).await,
            0,
            "without the request's revision only later changes are told"
        );
    }

    /// The removal of a service whose lease ran out before the stream started is told: the
    /// client's list may be older than the lapse.
    #[tokio::test]
    async fn the_removal_of_a_service_lapsed_before_the_stream_started_is_told() {
        const SHORT_TTL: Duration = Duration::from_millis(15);
        let limits = RegistrationLimits {
            min_ttl: SHORT_TTL,
            ..RegistrationLimits::default()
        };
        let registry = Registry::new(MemoryStore::start(64, 0), limits, 16);
        let mut spec = service("lapsing", &["lapsing_tool"], None);
        spec.ttl = Some(SHORT_TTL);
        registry.register(TenantId(1), &spec).expect("registered");
        // This test's runtime has one thread, so the expiry task cannot run meanwhile.
        std::thread::sleep(SHORT_TTL * 2);
        assert!(registry.all_tools(TenantId(1)).is_empty(), "lapsed");
        assert_eq!(told(&registry, None, 6 * SETTLE).await, 1);
        assert_eq!(
            registry.watch(TenantId(1)).revision,
            2,
            "the expiry task removed it meanwhile"
        );
    }
}
