//! How the agents' model calls have fared, counted for the metrics endpoint: calls answered
//! and failed, attempts made again, and the tokens the models reported using.

use std::sync::atomic::{AtomicU64, Ordering};

use super::types::TokenUsage;

/// The agents' model calls since the server started.
#[derive(Debug, Default)]
pub struct ModelCalls {
    answered: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

/// What [`ModelCalls`] has counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelCallCounts {
    /// Calls whose answer the turn used.
    pub answered: u64,
    /// Calls that failed: the model could not be reached, answered an error, or gave an answer
    /// toolplane does not use.
    pub failed: u64,
    /// Attempts made again within calls (see [`super::model_retries`]).
    pub retries: u64,
    /// Prompt tokens the answers reported.
    pub prompt_tokens: u64,
    /// Completion tokens the answers reported.
    pub completion_tokens: u64,
}

impl ModelCalls {
    /// Counts a call answered, with the tokens it reported using, if it did.
    pub fn answered(&self, usage: Option<TokenUsage>) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        if let Some(usage) = usage {
            (self.prompt_tokens).fetch_add(u64::from(usage.prompt_tokens), Ordering::Relaxed);
            (self.completion_tokens)
                .fetch_add(u64::from(usage.completion_tokens), Ordering::Relaxed);
        }
    }

    /// Counts a call failed.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an attempt made again.
    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// What has been counted.
    pub fn counts(&self) -> ModelCallCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ModelCallCounts {
            answered: read(&self.answered),
            failed: read(&self.failed),
            retries: read(&self.retries),
            prompt_tokens: read(&self.prompt_tokens),
            completion_tokens: read(&self.completion_tokens),
        }
    }
}
