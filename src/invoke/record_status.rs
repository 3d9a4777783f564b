//! How an invocation ended ([`InvocationStatus`]), as its record writes it.

use serde::{Deserialize, Serialize};

/// How an invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    /// The provider answered.
    Succeeded,
    /// The input did not match the schema; nothing was called.
    InvalidInput,
    /// The tool could not be resolved; nothing was called.
    Rejected,
    /// Over a rate limit, or over the bound on calls in flight; nothing was called.
    RateLimited,
    /// The deadline passed: before the provider answered (its call was cancelled), or while
    /// a large input or output was checked against the tool's schema.
    TimedOut,
    /// The provider could not be reached or is unhealthy.
    Unavailable,
    /// The provider answered with an error.
    Failed,
    /// The caller went away; the provider's call was cancelled.
    Cancelled,
}

impl InvocationStatus {
    /// Every status, in declaration order (so `status as usize` indexes it).
    pub const ALL: [Self; 8] = [
        Self::Succeeded,
        Self::InvalidInput,
        Self::Rejected,
        Self::RateLimited,
        Self::TimedOut,
        Self::Unavailable,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The status as a record's JSON writes it (`invalid_input`); a test holds it to serde's.
    pub fn name(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::InvalidInput => "invalid_input",
            Self::Rejected => "rejected",
            Self::RateLimited => "rate_limited",
            Self::TimedOut => "timed_out",
            Self::Unavailable => "unavailable",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}
