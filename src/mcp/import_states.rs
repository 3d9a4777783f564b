//! What the running imports share with the rest of the server: whether each one's tools are
//! registered now and how many it holds back for approval (for the metrics endpoint), and the
//! `approved_tools` in force for each, which the configuration file's watch replaces while
//! the server runs ([`ImportStates::approve`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use super::approval::ApprovedTools;
use super::import_config::McpImport;

/// The state of each running import, by its index in the configuration.
#[derive(Debug, Clone, Default)]
pub struct ImportStates(Arc<[ImportState]>);

/// One import's state.
#[derive(Debug, Default)]
struct ImportState {
    imported: AtomicBool,
    held: AtomicU64,
    approved: ArcSwap<Option<ApprovedTools>>,
    approvals_changed: Notify,
}

impl ImportStates {
    /// The states of `count` imports asking for no approval, none imported yet.
    pub fn new(count: usize) -> Self {
        Self((0..count).map(|_| ImportState::default()).collect())
    }

    /// The states of `imports`, none imported yet, each with the tools its entry approves.
    pub fn for_imports(imports: &[McpImport]) -> Self {
        Self(
            imports
                .iter()
                .map(|import| ImportState {
                    approved: ArcSwap::from_pointee(import.approved_tools.clone()),
                    ..ImportState::default()
                })
                .collect(),
        )
    }

    /// How many imports are imported now, and how many are not.
    pub fn counts(&self) -> (u64, u64) {
        let imported = self
            .0
            .iter()
            .filter(|state| state.imported.load(Ordering::Relaxed))
            .count();
        (imported as u64, (self.0.len() - imported) as u64)
    }

    /// How many listed tools the imports hold back, not approved, at their last listings.
    pub fn held_tools(&self) -> u64 {
        self.0
            .iter()
            .map(|state| state.held.load(Ordering::Relaxed))
            .sum()
    }

    /// Puts in force the `approved_tools` that `now` (the imports as the configuration file
    /// gives them now) give the running `imports` (those this was made for, in order), each
    /// matched by tenant and service; an import whose approvals changed lists its server again
    /// at once. Imports added to the file, or gone from it, wait for a restart; the number of
    /// approvals changed is answered.
    pub fn approve(&self, imports: &[McpImport], now: &[McpImport]) -> usize {
        let mut changed = 0;
        for (import, state) in imports.iter().zip(self.0.iter()) {
            let Some(entry) = now
                .iter()
                .find(|entry| entry.tenant == import.tenant && entry.service == import.service)
            else {
                continue;
            };
            if **state.approved.load() != entry.approved_tools {
                state.approved.store(Arc::new(entry.approved_tools.clone()));
                state.approvals_changed.notify_one();
                changed += 1;
            }
        }
        changed
    }

    /// The approvals in force for import `index`.
    pub(super) fn approved(&self, index: usize) -> Arc<Option<ApprovedTools>> {
        self.0
            .get(index)
            .map(|state| state.approved.load_full())
            .unwrap_or_default()
    }

    /// Completes when the approvals of import `index` are replaced (at once when they were
    /// since this was last awaited).
    pub(super) async fn approvals_changed(&self, index: usize) {
        match self.0.get(index) {
            Some(state) => state.approvals_changed.notified().await,
            None => std::future::pending().await,
        }
    }

    pub(super) fn set(&self, index: usize, imported: bool) {
        if let Some(state) = self.0.get(index) {
            state.imported.store(imported, Ordering::Relaxed);
        }
    }

    pub(super) fn set_held(&self, index: usize, held: usize) {
        if let Some(state) = self.0.get(index) {
            state.held.store(held as u64, Ordering::Relaxed);
        }
    }
}
