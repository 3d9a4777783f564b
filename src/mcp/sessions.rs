//! The MCP endpoint's sessions: how many are held, in all and by the tenant that opened each.
//!
//! The SDK's session manager holds the sessions (and ends them on `DELETE` or after 5 idle
//! minutes) but knows nothing of tenants, so the endpoint notes which tenant opened each
//! session (the `toolplane-tenant-id` of its `initialize`), and a tenant's count is its noted
//! sessions the manager still holds, looked up as the tenant opens another. Sessions noted for
//! tenants that open no more are swept once the notes outnumber the sessions held twice over,
//! so the notes stay within a few times the sessions held, however many tenants come and go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::envelope::TenantId;

/// Notes past twice the sessions held (and this many more) are swept.
const SWEEP_SLACK: usize = 64;

/// The MCP endpoint's sessions; cheap to clone, shared with the metrics endpoint.
#[derive(Clone, Default)]
pub struct McpSessions {
    manager: Arc<LocalSessionManager>,
    /// How many were held when last counted.
    last_counted: Arc<AtomicUsize>,
    /// Which tenant opened which session.
    opened: Arc<Mutex<OpenedBy>>,
}

/// The sessions noted as opened, by tenant; some may have ended since.
#[derive(Default)]
struct OpenedBy {
    by_tenant: HashMap<TenantId, Vec<Arc<str>>>,
    /// How many ids `by_tenant` holds.
    noted: usize,
}

impl std::fmt::Debug for McpSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessions").finish_non_exhaustive()
    }
}

impl McpSessions {
    /// The SDK's session manager, which holds the sessions.
    pub(super) fn manager(&self) -> Arc<LocalSessionManager> {
        Arc::clone(&self.manager)
    }

    /// How many sessions are held now, without waiting: in the instant one is being opened or
    /// closed, how many were held when last counted.
    pub fn held_now(&self) -> usize {
        match self.manager.sessions.try_read() {
            Ok(sessions) => self.counted(sessions.len()),
            Err(_) => self.last_counted.load(Ordering::Relaxed),
        }
    }

    /// How many sessions are held now.
    pub(super) async fn held(&self) -> usize {
        self.counted(self.manager.sessions.read().await.len())
    }

    fn counted(&self, held: usize) -> usize {
        self.last_counted.store(held, Ordering::Relaxed);
        held
    }

    /// Whether the session `id` is held now.
    pub(super) async fn holds(&self, id: &str) -> bool {
        self.manager.sessions.read().await.contains_key(id)
    }

    /// How many of the sessions held now `tenant` opened.
    pub(super) async fn held_by(&self, tenant: TenantId) -> usize {
        let sessions = self.manager.sessions.read().await;
        let mut opened = self
            .opened
            .lock()
            .expect("session notes are never poisoned");
        let OpenedBy { by_tenant, noted } = &mut *opened;
        let mut held = 0;
        if let Some(ids) = by_tenant.get_mut(&tenant) {
            let before = ids.len();
            ids.retain(|id| sessions.contains_key(id));
            held = ids.len();
            *noted -= before - held;
            if held == 0 {
                by_tenant.remove(&tenant);
            }
        }
        if *noted > 2 * sessions.len() + SWEEP_SLACK {
            by_tenant.retain(|_, ids| {
                ids.retain(|id| sessions.contains_key(id));
                !ids.is_empty()
            });
            *noted = by_tenant.values().map(Vec::len).sum();
        }
        held
    }

    /// Notes that `tenant` opened the session `id`.
    pub(super) fn note_opened(&self, tenant: TenantId, id: &str) {
        let mut opened = self
            .opened
            .lock()
            .expect("session notes are never poisoned");
        opened.by_tenant.entry(tenant).or_default().push(id.into());
        opened.noted += 1;
    }

    /// How many session ids are noted, ended ones not yet swept among them.
    #[cfg(test)]
    fn noted(&self) -> usize {
        self.opened.lock().expect("never poisoned").noted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_server::session::SessionManager;

    /// Opens a session in the SDK's manager, as `initialize` does, and returns its id.
    async fn open(sessions: &McpSessions) -> Arc<str> {
        let (id, _transport) = sessions.manager.create_session().await.expect("opened");
        id
    }

    #[tokio::test]
    async fn a_tenants_count_is_of_the_sessions_it_opened_still_held() {
        let sessions = McpSessions::default();
        let (one, two) = (TenantId(1), TenantId(2));
        let mut ones = Vec::new();
        for _ in 0..3 {
            let id = open(&sessions).await;
            sessions.note_opened(one, &id);
            ones.push(id);
        }
        let twos = open(&sessions).await;
        sessions.note_opened(two, &twos);
        assert_eq!(sessions.held().await, 4);
        assert_eq!(sessions.held_by(one).await, 3);
        assert_eq!(sessions.held_by(two).await, 1);
        assert_eq!(sessions.held_by(TenantId(3)).await, 0);

        sessions
            .manager
            .close_session(&ones[0])
            .await
            .expect("closed");
        assert_eq!(sessions.held_by(one).await, 2);
        assert_eq!(sessions.held_by(two).await, 1);
        assert_eq!(sessions.noted(), 3);
    }

    #[tokio::test]
    async fn notes_of_ended_sessions_are_swept_whoever_opened_them() {
        let sessions = McpSessions::default();
        for tenant in 0..500 {
            let id = open(&sessions).await;
            sessions.note_opened(TenantId(tenant), &id);
            sessions.manager.close_session(&id).await.expect("closed");
        }
        assert_eq!(sessions.noted(), 500);
        // Looking up a tenant that opened nothing sweeps the notes of the 500 that went.
        assert_eq!(sessions.held_by(TenantId(10_000)).await, 0);
        assert_eq!(sessions.noted(), 0);
        assert!(sessions.opened.lock().expect("held").by_tenant.is_empty());
    }
}
