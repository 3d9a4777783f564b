//! The events of a streamed turn on their way to its caller: [`turn_events`].
//!
//! A turn does not wait for its caller (a caller that stops reading would keep its agent busy
//! and its tool calls paused), so its events wait until the caller's stream has room. The
//! model's words come one event per token, and held one by one they cost far more memory than
//! their text: 1.5 million one-letter words held about 200 MB each for callers that had
//! stopped reading. Words that wait are therefore joined into one delta (up to
//! [`MAX_JOINED_DELTA_BYTES`]) as they arrive, so what waits takes about the memory of its
//! text, which the turn's room bounds; a caller reading as fast as the words come still gets
//! them one by one.
//!
//! Written here rather than taken from tokio's channels: a channel holds each event as sent
//! (unbounded) or makes the turn wait for room (bounded); neither joins what waits.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::runner::TurnEvent;

/// The most bytes of words joined into one delta: well within what a gRPC client reads in
/// one message (4 MiB by default), and large enough that few of them wait.
pub const MAX_JOINED_DELTA_BYTES: usize = 64 * 1024;

/// A sender and a receiver of one turn's events.
pub fn turn_events() -> (TurnEventSender, TurnEventReceiver) {
    let shared = Arc::new(Shared::default());
    (
        TurnEventSender {
            shared: Arc::clone(&shared),
        },
        TurnEventReceiver { shared },
    )
}

#[derive(Debug, Default)]
struct Shared {
    backlog: Mutex<Backlog>,
    ready: Notify,
}

impl Shared {
    fn backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        // The backlog is consistent between any two statements that change it.
        self.backlog.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where a turn sends its events; never waits.
#[derive(Debug, Clone)]
pub struct TurnEventSender {
    shared: Arc<Shared>,
}

impl TurnEventSender {
    /// Adds `event` after those waiting: a delta joins the delta before it when that is the
    /// last event waiting and the two fit in [`MAX_JOINED_DELTA_BYTES`].
    pub fn send(&self, event: TurnEvent) {
        self.shared.backlog().push(event);
        self.shared.ready.notify_one();
    }
}

/// Where a turn's events are taken from, oldest first.
#[derive(Debug)]
pub struct TurnEventReceiver {
    shared: Arc<Shared>,
}

impl TurnEventReceiver {
    /// The oldest event waiting, waiting for one when none does. Cancel-safe: an event is
    /// taken only when it is returned.
    pub async fn recv(&mut self) -> TurnEvent {
        loop {
            if let Some(event) = self.try_recv() {
                return event;
            }
            self.shared.ready.notified().await;
        }
    }

    /// The oldest event waiting, if any.
    pub fn try_recv(&mut self) -> Option<TurnEvent> {
        self.shared.backlog().events.pop_front()
    }
}

/// The events waiting, oldest first, consecutive words joined.
#[derive(Debug, Default)]
struct Backlog {
    events: VecDeque<TurnEvent>,
}

impl Backlog {
    fn push(&mut self, event: TurnEvent) {
        if let (TurnEvent::Delta(more), Some(TurnEvent::Delta(waiting))) =
            (&event, self.events.back_mut())
            && waiting.len() + more.len() <= MAX_JOINED_DELTA_BYTES
        {
            waiting.push_str(more);
            return;
        }
        self.events.push_back(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runner::ToolCallSummary;
    use crate::invoke::records::InvocationStatus;

    fn delta(text: &str) -> TurnEvent {
        TurnEvent::Delta(text.to_owned())
    }

    /// Waiting words are joined up to the bound, in order; other events are kept between
    /// them, and words after one start a new delta.
    #[test]
    fn waiting_words_are_joined_in_order() {
        let (sender, mut receiver) = turn_events();
        assert_eq!(receiver.try_recv(), None);
        sender.send(delta("a "));
        sender.send(delta("b "));
        let call = TurnEvent::ToolCall(ToolCallSummary {
            tool_name: "t".into(),
            service_name: "s".into(),
            invocation_id: "i".into(),
            status: InvocationStatus::Succeeded,
            error_reason: String::new(),
        });
        sender.send(call.clone());
        sender.send(delta("c"));
        let long = "x".repeat(MAX_JOINED_DELTA_BYTES);
        sender.send(delta(&long));
        assert_eq!(receiver.try_recv(), Some(delta("a b ")));
        assert_eq!(receiver.try_recv(), Some(call));
        assert_eq!(receiver.try_recv(), Some(delta("c")));
        assert_eq!(receiver.try_recv(), Some(delta(&long)));
        assert_eq!(receiver.try_recv(), None);
    }

    /// A receiver waiting is woken by the next event, and one sent before it waited is not
    /// missed.
    #[tokio::test]
    async fn a_waiting_receiver_gets_the_next_event() {
        let (sender, mut receiver) = turn_events();
        let waiting = tokio::spawn(async move { receiver.recv().await });
        tokio::task::yield_now().await;
        sender.send(delta("late"));
        assert_eq!(waiting.await.expect("joined"), delta("late"));

        let (sender, mut receiver) = turn_events();
        sender.send(delta("early"));
        assert_eq!(receiver.recv().await, delta("early"));
    }
}
