//! How many bytes a turn's messages take as the turn goes, against what a conversation keeps.

use super::AgentError;
use crate::agent::store::message_bytes;
use crate::agent::types::CanonicalMessage;

/// The bytes of a turn's messages so far, against what a conversation keeps (`max`; 0 sets
/// no bound). Counted as the turn goes, so a turn whose tool results pass the bound is undone
/// before they are sent to the model (128 results of 4 MiB would have made a 512 MB request).
pub(super) struct TurnBytes {
    /// The bytes so far.
    pub(super) used: usize,
    /// The bound; 0 sets none.
    pub(super) max: usize,
}

impl TurnBytes {
    /// Counts `message`, `what` the turn gained; refused past the bound.
    pub(super) fn add(
        &mut self,
        message: &CanonicalMessage,
        what: &'static str,
    ) -> Result<(), AgentError> {
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
}
