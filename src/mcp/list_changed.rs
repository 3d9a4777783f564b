//! `notifications/tools/list_changed` whenever a client's tenant's tool list changes: a service
//! registered, deregistered or expired, or re-registered with other tools.
//!
//! A client of protocol 2025-11-25 or earlier gets them on its session once it has
//! initialized ([`spawn_for_session`]); one of 2026-07-28, which has no sessions, on the
//! `subscriptions/listen` stream it opens for them ([`listen`]). Changes that come together (a
//! provider registering several services at its start) are told once, [`SETTLE`] after the
//! first.

use std::future::Future;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ServerNotification, ToolListChangedNotification};
use rmcp::service::{Peer, SubscriptionContext};
use tokio::sync::broadcast::error::RecvError;

use crate::envelope::TenantId;
use crate::registry::Registry;
use crate::registry::store::{ChangeKind, RegistryEvent};

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
/// `stop` completes or a notification cannot be sent.
async fn tell_changes<Notify, Sent>(
    registry: &Registry,
    tenant: TenantId,
    mut notify: Notify,
    stop: impl Future<Output = ()>,
) where
    Notify: FnMut() -> Sent,
    Sent: Future<Output = bool>,
{
    let mut events = registry.watch(tenant).events;
    let mut stop = std::pin::pin!(stop);
    loop {
        let changed = tokio::select! {
            received = events.recv() => match received {
                Ok(event) => changes_tools(&event),
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
        tell_changes(&registry, tenant, notify, closed).await;
    });
}

/// Tells a `subscriptions/listen` stream of its tenant's tool list changes until the client
/// cancels it.
pub async fn listen(registry: &Registry, tenant: TenantId, subscription: &SubscriptionContext) {
    let notify = || async { subscription.sink().send(notification()).await.is_ok() };
    tell_changes(registry, tenant, notify, subscription.cancelled()).await;
}
