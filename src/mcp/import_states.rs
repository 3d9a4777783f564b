//! What one running import shares with the rest of the server ([`super::live_imports`]):
//! whether its tools are registered now and under which lease, how many tools it holds back
//! for approval (for the metrics endpoint), and the `approved_tools` in force, which the
//! configuration file's watch replaces while it runs ([`ImportState::approve`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use super::approval::ApprovedTools;
use crate::registry::LeaseId;

/// One import's state.
#[derive(Debug, Default)]
pub(super) struct ImportState {
    imported: AtomicBool,
    held: AtomicU64,
    lease: Mutex<Option<LeaseId>>,
    approved: ArcSwap<Option<ApprovedTools>>,
    approvals_changed: Notify,
}

impl ImportState {
    /// The state of an import not imported yet, approving `approved`.
    pub(super) fn new(approved: Option<ApprovedTools>) -> Self {
        Self {
            approved: ArcSwap::from_pointee(approved),
            ..Self::default()
        }
    }

    /// Whether its tools are registered now (as of its last listing).
    pub(super) fn is_imported(&self) -> bool {
        self.imported.load(Ordering::Relaxed)
    }

    /// How many listed tools it held back, not approved, at its last listing.
    pub(super) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Puts `approved` in force; when they differ from the approvals in force, the import
    /// lists its server again at once, and `true` is answered.
    pub(super) fn approve(&self, approved: &Option<ApprovedTools>) -> bool {
        if **self.approved.load() == *approved {
            return false;
        }
        self.approved.store(Arc::new(approved.clone()));
        self.approvals_changed.notify_one();
        true
    }

    /// The approvals in force.
    pub(super) fn approved(&self) -> Arc<Option<ApprovedTools>> {
        self.approved.load_full()
    }

    /// Completes when the approvals are replaced (at once when they were since this was last
    /// awaited).
    pub(super) async fn approvals_changed(&self) {
        self.approvals_changed.notified().await;
    }

    pub(super) fn set_imported(&self, imported: bool) {
        self.imported.store(imported, Ordering::Relaxed);
    }

    pub(super) fn set_held(&self, held: usize) {
        self.held.store(held as u64, Ordering::Relaxed);
    }

    /// The lease of its registration, the last it made (`None` before its first).
    pub(super) fn lease(&self) -> Option<LeaseId> {
        *self.lease.lock().unwrap_or_else(|error| error.into_inner())
    }

    pub(super) fn set_lease(&self, lease: Option<LeaseId>) {
        *self.lease.lock().unwrap_or_else(|error| error.into_inner()) = lease;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::ServiceName;
    use std::collections::BTreeMap;

    fn approving(tool: &str) -> Option<ApprovedTools> {
        let service = ServiceName::parse("github").expect("a service name");
        let table = BTreeMap::from([(tool.to_owned(), "a".repeat(64))]);
        Some(ApprovedTools::check(&service, &table).expect("a valid table"))
    }

    /// Approvals are replaced only when they differ, and a replacement wakes the import once.
    #[tokio::test]
    async fn only_other_approvals_wake_the_import() {
        let state = ImportState::new(approving("list_issues"));
        assert!(!state.approve(&approving("list_issues")));
        assert!(state.approve(&approving("create_issue")));
        // The wake-up waits for the import, which takes it at its next wait.
        tokio::time::timeout(std::time::Duration::from_secs(1), state.approvals_changed())
            .await
            .expect("woken");
        assert_eq!(*state.approved(), approving("create_issue"));
        assert!(state.approve(&None));
        assert_eq!(*state.approved(), None);
    }
}
