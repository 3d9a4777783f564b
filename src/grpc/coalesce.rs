//! Fewer writes per HTTP/2 connection: an I/O wrapper that lets a large DATA frame leave in
//! the same write as the frames after it, and a burst of messages leave in a few writes.
//!
//! Why: h2 (0.4) sends every DATA frame of 256 bytes or more from the caller's buffer instead of
//! copying it, and writes it out before it accepts another frame (hyperium/h2#711, #902; the
//! fix, #903, is not released). A unary gRPC answer larger than 256 bytes therefore left in two
//! writes (headers and message, then trailers), and under load every such message costs a write
//! of its own. On loopback each write also wakes the peer, which reads the message, sleeps, and
//! wakes again for the trailers. Neither tonic nor hyper exposes the threshold and no crate
//! changes it, so this is written here.
//!
//! How: writes are copied into a buffer. A flush that directly follows such a frame (a vectored
//! write of a frame header and a separate payload) is put off: h2 makes that flush only to
//! make room, and always flushes again before its poll of the connection ends, with nothing
//! but small frames written since (it stops queueing frames while a large one is pending), so
//! the frames it queues in between join the same write. That holds for every large frame in a
//! poll, so a batch of large messages (requests queued for a provider, answers for a caller)
//! leaves in writes of up to `MAX_BUFFERED` bytes, not one per message; when only the first
//! one's flush was put off, each large message after it forced a write of its own. Every
//! other flush, and any read or shutdown, writes out what is buffered (a read, unless a
//! burst's flush is already waiting: see below). Nothing waits for more traffic: a put-off
//! flush is made up within the same poll.
//!
//! Bursts: when one change reaches 10,000 watch streams, each stream's task hands its message
//! to the connection and wakes the connection's task, which tokio runs next (its LIFO slot), so
//! every message left in a write of its own: 177,000 writes for 200,000 messages in the watch
//! benchmark. So a flush that comes within `BURST_WINDOW` of the connection's last write waits
//! until the runtime has run its other ready tasks (tokio wakes a task that yields only then,
//! or after at most 61 other polls), and writes what they queued together with it: 23,000
//! writes for the same messages. A flush after a quiet spell writes at once, so a single
//! call's answer never waits; one that waited every time cost 30-100 µs per call at
//! concurrency 1 here. While such a flush waits, a read does not write: h2 reads before it
//! writes whenever the connection's task runs, and that task runs again as soon as the next
//! answer is queued, so a read that wrote sent each large answer on its own (toolplane's
//! writes per call at saturation halved when it stopped). The kernel does the same below
//! (TCP autocorking), but only while a previous packet is still queued, which on loopback it
//! rarely is.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker, ready};
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::Connected;

/// Above this many buffered bytes, writes go to the socket before more are buffered; a write
/// at least this large goes out on its own. One full HTTP/2 DATA frame (16 KB, h2's default):
/// with 64 KB, a caller that read more slowly than toolplane wrote (its socket's receive
/// buffer full) had a segment dropped now and then, and with a few large segments in flight
/// nothing after it prompted a fast retransmit, so the connection waited out TCP's
/// retransmission timeout (200 ms, then 400, 800 ...): 250 KB ListTools answers at 64 callers
/// stalled for up to 1.3 s (BENCHMARKS.md, item 36). Smaller writes recover as plain h2's do.
const MAX_BUFFERED: usize = 16 * 1024;
/// A flush this soon after the connection's last write is taken as part of a burst and waits
/// for the runtime's ready tasks. At concurrency 1 a connection writes every 100 µs or more
/// here, so a lone message never waits; a fan-out writes every few µs.
const BURST_WINDOW: Duration = Duration::from_micros(50);
/// The buffer space an idle connection keeps (as much as h2 keeps for its own encoding).
const RETAINED_CAPACITY: usize = 16 * 1024;

/// A connection whose writes are gathered and sent together (see the module docs).
#[derive(Debug)]
pub struct CoalescingIo<T> {
    inner: T,
    buffered: Vec<u8>,
    /// How much of `buffered` the socket has taken.
    sent: usize,
    /// A flush after a large frame was put off and nothing has been written out since.
    flush_owed: bool,
    /// The last write was a frame header with its payload in a second buffer, and no flush has
    /// been put off since.
    chained: bool,
    /// The flush of a burst that waits for the runtime's ready tasks, if one does.
    later: Option<Arc<FlushLater>>,
    /// When buffered bytes last went to the socket.
    last_drain: Option<Instant>,
    /// `BURST_WINDOW`, except in tests.
    burst_window: Duration,
}

/// A flush put off until the runtime has no other ready task: the waker handed to tokio's
/// `yield_now`, which tokio keeps until its worker runs out of ready tasks (or every 61 task
/// polls) and then wakes.
#[derive(Debug)]
struct FlushLater {
    due: AtomicBool,
    task: Waker,
}

impl Wake for FlushLater {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.due.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl FlushLater {
    /// Asks the runtime to wake `task` once its ready tasks have run.
    fn start(task: &Waker) -> Arc<Self> {
        let later = Arc::new(Self {
            due: AtomicBool::new(false),
            task: task.clone(),
        });
        let waker = Waker::from(Arc::clone(&later));
        // yield_now's first poll hands the waker to the runtime's deferred list and is
        // Pending; outside a runtime it wakes at once, which makes the flush due.
        let _ = pin!(tokio::task::yield_now()).poll(&mut Context::from_waker(&waker));
        later
    }
}

impl<T> CoalescingIo<T> {
    /// Wraps a connection.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            buffered: Vec::new(),
            sent: 0,
            flush_owed: false,
            chained: false,
            later: None,
            last_drain: None,
            burst_window: BURST_WINDOW,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite + Unpin> CoalescingIo<T> {
    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buffered.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffered[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buffered.clear();
        self.buffered.shrink_to(RETAINED_CAPACITY);
        self.sent = 0;
        self.flush_owed = false;
        self.last_drain = Some(Instant::now());
        Poll::Ready(Ok(()))
    }

    /// Whether a flush waits because it belongs to a burst (see the module docs): it does until
    /// the runtime has run the tasks that were ready, and then writes.
    fn put_off(&mut self, task: &Waker) -> bool {
        if let Some(later) = &self.later {
            if later.due.load(Ordering::Acquire) {
                self.later = None;
                return false;
            }
            if later.task.will_wake(task) {
                return true;
            }
        } else if self
            .last_drain
            .is_none_or(|at| at.elapsed() >= self.burst_window)
        {
            return false;
        }
        self.later = Some(FlushLater::start(task));
        true
    }

    /// Makes room before buffering `incoming` more bytes.
    fn poll_room(&mut self, cx: &mut Context<'_>, incoming: usize) -> Poll<io::Result<()>> {
        if self.buffered.len() + incoming > MAX_BUFFERED && !self.buffered.is_empty() {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for CoalescingIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A burst's flush is made when the runtime wakes it (see the module docs).
        if this.flush_owed
            && this.later.is_none()
            && let Poll::Ready(Err(error)) = this.poll_drain(cx)
        {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescingIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.chained = false;
        ready!(this.poll_room(cx, buf.len()))?;
        if buf.len() >= MAX_BUFFERED {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.buffered.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|buf| buf.len()).sum();
        this.chained = bufs.iter().filter(|buf| !buf.is_empty()).count() > 1;
        ready!(this.poll_room(cx, total))?;
        if total >= MAX_BUFFERED {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            this.buffered.extend_from_slice(buf);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.buffered.is_empty() {
            this.later = None;
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        if this.chained {
            this.chained = false;
            this.flush_owed = true;
            return Poll::Ready(Ok(()));
        }
        if this.put_off(cx.waker()) {
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: Connected> Connected for CoalescingIo<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The connections a server accepts on `listener`, with Nagle off and writes coalesced;
/// accepting waits a moment after failing ([`super::accepting`]).
pub fn incoming(
    listener: TcpListener,
) -> impl Stream<Item = io::Result<CoalescingIo<TcpStream>>> + Send + 'static {
    super::accepting::accepted(listener).map(|accepted| accepted.map(CoalescingIo::new))
}

#[cfg(test)]
#[path = "coalesce_tests.rs"]
mod tests;
