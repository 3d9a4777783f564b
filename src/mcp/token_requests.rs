//! How many OAuth access tokens toolplane has asked MCP servers' authorization servers for
//! ([`super::access_tokens`]), by why and how each request ended: the counts behind the
//! `toolplane_mcp_import_token_requests` metric.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a token was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenReason {
    /// A session with the server is opening.
    Session,
    /// The token in use is about to expire.
    Expiring,
    /// The server refused the token in use (401).
    Rejected,
    /// The server asked for more scopes (403 `insufficient_scope`).
    InsufficientScope,
}

impl TokenReason {
    /// Every reason, in the order of [`TokenRequests::counts`].
    pub const ALL: [Self; 4] = [
        Self::Session,
        Self::Expiring,
        Self::Rejected,
        Self::InsufficientScope,
    ];

    /// Its name, as the metric's `reason` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Expiring => "expiring",
            Self::Rejected => "rejected",
            Self::InsufficientScope => "insufficient_scope",
        }
    }
}

/// Token requests since the server started, by reason and outcome; shared by every import.
#[derive(Debug, Default)]
pub struct TokenRequests {
    /// Per reason (as [`TokenReason::ALL`]): those granted, and those that failed.
    counts: [[AtomicU64; 2]; 4],
}

impl TokenRequests {
    /// Counts one request for `reason`, granted or not.
    pub fn count(&self, reason: TokenReason, granted: bool) {
        self.counts[reason as usize][usize::from(!granted)].fetch_add(1, Ordering::Relaxed);
    }

    /// Per reason (as [`TokenReason::ALL`]): how many were granted, and how many failed.
    pub fn counts(&self) -> [(u64, u64); 4] {
        self.counts.each_ref().map(|[granted, failed]| {
            (
                granted.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each request is counted under its reason and outcome only.
    #[test]
    fn requests_are_counted_by_reason_and_outcome() {
        let requests = TokenRequests::default();
        requests.count(TokenReason::Session, true);
        requests.count(TokenReason::Session, true);
        requests.count(TokenReason::InsufficientScope, false);
        assert_eq!(requests.counts(), [(2, 0), (0, 0), (0, 0), (0, 1)]);
    }
}
