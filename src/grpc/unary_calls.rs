//! The calls on one connection of [`super::unary_client`]: how many are in flight, and where
//! a call that ends alone leaves its stream handles.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};

/// The calls on one connection: how many are in flight, and the stream handles of the last
/// one, when it ended with no other call in flight.
///
/// Why: dropping the last handle of a finished h2 stream wakes the connection's task. A call
/// drops its handles as it ends, in the same poll in which hyper hands its answer to the
/// caller's connection and wakes that connection's task. With two tasks made ready in one poll,
/// tokio wakes a parked worker thread to share them; when the connection is otherwise idle
/// that thread wakes on the other CPU, finds nothing, and sleeps again: a futex call and a
/// cross-CPU wake-up per call, at concurrency 1 two of the 3.3-5.1 context switches per call
/// (BENCHMARKS.md, item 16). So a call that ends alone leaves its handles here, and the next
/// call drops them just before it opens its stream, when it wakes the connection's task
/// anyway. A call that ends while others are in flight drops its own: the task is busy then,
/// and keeping them measured 5% fewer calls per second at saturation. Only finished streams
/// are kept: dropping an unfinished one's handles cancels it, which must not wait. An idle
/// connection keeps its last call's handles (a closed stream's slot, no data) until the next
/// call or until the channel is dropped.
#[derive(Debug, Default)]
pub(super) struct Calls {
    in_flight: AtomicUsize,
    last: Mutex<Option<FinishedStream>>,
}

/// The three handles a call holds on its stream.
#[derive(Debug)]
pub(super) struct FinishedStream {
    // Kept only to be dropped. The sender holds a handle on the last stream it opened.
    _sender: SendRequest<Bytes>,
    _request: SendStream<Bytes>,
    _answer: RecvStream,
}

impl FinishedStream {
    /// The handles of a stream that has ended both ways: the answer read to its end.
    pub(super) fn new(
        sender: SendRequest<Bytes>,
        request: SendStream<Bytes>,
        answer: RecvStream,
    ) -> Self {
        Self {
            _sender: sender,
            _request: request,
            _answer: answer,
        }
    }
}

/// A call in flight on a connection, counted until it is dropped.
pub(super) struct InFlight<'a>(&'a Calls);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Calls {
    /// Counts a new call, and drops the handles the last one left.
    pub(super) fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // Taken out first so the lock is released before the handles' drop takes h2's.
        let last = self.last().take();
        drop(last);
        InFlight(self)
    }

    /// The handles of a call that read its answer to the end: kept when no other call is in
    /// flight, dropped now otherwise.
    pub(super) fn finish(&self, stream: FinishedStream) {
        if self.in_flight.load(Ordering::Acquire) == 1 {
            let previous = self.last().replace(stream);
            drop(previous);
        }
    }

    /// Whether a finished call's handles are kept, and how many calls are in flight.
    #[cfg(test)]
    pub(super) fn state(&self) -> (bool, usize) {
        (
            self.last().is_some(),
            self.in_flight.load(Ordering::Acquire),
        )
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<FinishedStream>> {
        // Replacing the value is whole: a panic elsewhere cannot leave it half-changed.
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
