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
        if let Some(bound) = self.message {
            let bytes = (bound.size)(message);
            if bytes > bound.max_bytes {
                return Err(AgentError::MessageTooLarge {
                    bytes,
                    max: bound.max_bytes,
                    what,
                });
            }
        }
        self.used = self.used.saturating_add(message_bytes(message));
        if self.max != 0 && self.used > self.max {
            return Err(AgentError::TurnTooLarge {
                bytes: self.used,
                max: self.max,
                what,
            });
        }
        Ok(())
    }

    /// The most bytes the model's answer may still take: past them, [`Self::add`] would
    /// refuse it whatever else it holds.
    pub(super) fn answer_room(&self) -> usize {
        let left = match self.max {
            0 => usize::MAX,
            max => max.saturating_sub(self.used),
        };
        self.message.map_or(left, |bound| left.min(bound.max_bytes))
    }

    /// The refusal of an answer of at least `bytes`, past [`Self::answer_room`].
    pub(super) fn answer_refusal(&self, bytes: usize) -> AgentError {
        let what = "the model's answer";
        match self.message {
            Some(bound) if bytes > bound.max_bytes => AgentError::MessageTooLarge {
                bytes,
                max: bound.max_bytes,
                what,
            },
            _ => AgentError::TurnTooLarge {
                bytes: self.used.saturating_add(bytes),
                max: self.max,
                what,
            },
        }
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
