//! How many bytes a turn's messages take as the turn goes, against what a conversation keeps
//! and what one message may take in an answer.

use super::{AgentError, AgentRunner};
use crate::agent::store::message_bytes;
use crate::agent::types::CanonicalMessage;

/// The transport's measure of one message in its answers, and its bound. Every message of a
/// conversation must fit in one answer (`ListMessages` pages, `Complete`'s answer): one that
/// did not (a model's answer of 5 MB with `max_conversation_bytes` set to 0) would be kept
/// and could never be read, each page starting at it refused by the caller's client.
///
/// The domain knows no encoding: the transport supplies the measure (see
/// `grpc::page_bytes::MESSAGE_BOUND`) and [`AgentRunner::with_message_bound`] applies it.
#[derive(Debug, Clone, Copy)]
pub struct MessageBound {
    /// Most bytes of one message.
    pub max_bytes: usize,
    /// The bytes a message takes in an answer.
    pub size: fn(&CanonicalMessage) -> usize,
}

/// The bytes of a turn's messages so far, against what a conversation keeps (`max`; 0 sets
/// no bound). Counted as the turn goes, so a turn whose tool results pass the bound is undone
/// before they are sent to the model (128 results of 4 MiB would have made a 512 MB request).
pub(super) struct TurnBytes {
    /// The bytes so far.
    pub(super) used: usize,
    /// The bound; 0 sets none.
    pub(super) max: usize,
    /// The bound on each message the turn adds, if any.
    pub(super) message: Option<MessageBound>,
}

impl TurnBytes {
    /// Counts `message`, `what` the turn gained; refused past the bound, or when the message
    /// alone is larger than an answer may carry.
    pub(super) fn add(
        &mut self,
        message: &CanonicalMessage,
        what: &'static str,
    ) -> Result<(), AgentError> {
        let size = self.message.map_or(0, |bound| (bound.size)(message));
        let used = self.used.saturating_add(message_bytes(message));
        if let Some(refusal) = self.refusal(size, used, what) {
            return Err(refusal);
        }
        self.used = used;
        Ok(())
    }

    /// The refusal of a model's answer of `bytes` so far, when [`Self::add`] would refuse it
    /// whatever else it comes to hold; `None` while it may still be kept.
    pub(super) fn answer_refusal(&self, bytes: usize) -> Option<AgentError> {
        // Its content alone, measured both ways: the message holding it only takes more.
        let used = self.used.saturating_add(bytes);
        self.refusal(bytes, used, "the model's answer")
    }

    /// The refusal of a message taking `size` bytes in an answer and leaving the turn at
    /// `used` bytes, `what` the turn gained; `None` within both bounds.
    fn refusal(&self, size: usize, used: usize, what: &'static str) -> Option<AgentError> {
        if let Some(bound) = self.message
            && size > bound.max_bytes
        {
            return Some(AgentError::MessageTooLarge {
                bytes: size,
                max: bound.max_bytes,
                what,
            });
        }
        (self.max != 0 && used > self.max).then(|| AgentError::TurnTooLarge {
            bytes: used,
            max: self.max,
            what,
        })
    }
}

impl AgentRunner {
    /// The same runner, undoing a turn that would add a message larger than `bound` allows.
    pub fn with_message_bound(self, bound: MessageBound) -> Self {
        Self {
            message_bound: Some(bound),
            ..self
        }
    }
}
