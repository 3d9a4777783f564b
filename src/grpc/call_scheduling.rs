//! Where a connection's calls run: on the task that serves the connection, or each on a task of
//! its own.
//!
//! hyper's HTTP/2 server hands every stream (one gRPC call) to an executor. tonic's executor
//! spawns a tokio task per stream, so each call pays a spawn and, at every step, a wake-up
//! between two tasks: the connection's task wakes the call's for its request, the call's task
//! wakes the connection's to send its answer, and on two busy vCPUs a wake-up often lands on
//! the other CPU. [`CallScheduling::PerConnection`] (the default) keeps the calls on the
//! connection's own task instead, as Envoy's and nginx's workers keep a connection's requests
//! on one thread: the [`ConnectionExecutor`] queues each new stream and the
//! [`ConnectionDriver`] polls the connection and its streams together, in one task, until
//! neither has work left. Measured in BENCHMARKS.md: about a fifth less CPU per `InvokeTool`
//! and 10-15% more throughput at saturation with eight caller connections; with a single
//! caller connection, whose calls then share one thread, 5% less throughput on two vCPUs.
//! [`CallScheduling::PerCall`] is tonic's way, for a deployment whose callers send much work
//! over few connections to a machine with many cores.
//!
//! Written here because neither hyper nor tonic offers it: hyper takes any executor, but tonic's
//! server always passes its spawning one (so `grpc::connections` serves connections itself).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;
use serde::{Deserialize, Serialize};

/// How many times one poll of a connection goes round its connection and its calls before it
/// lets the runtime run other tasks (and is woken again at once).
const MAX_ROUNDS_PER_POLL: usize = 32;

/// Where a connection's calls run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallScheduling {
    /// On the task serving their connection (see the module docs).
    #[default]
    PerConnection,
    /// Each on a task of its own, which any runtime thread may run.
    PerCall,
}

impl std::fmt::Display for CallScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::PerConnection => "per-connection",
            Self::PerCall => "per-call",
        })
    }
}

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor one connection's hyper server hands its streams to.
#[derive(Clone)]
pub struct ConnectionExecutor {
    /// New streams for the connection's driver; `None` spawns each on its own task.
    inbox: Option<Arc<Mutex<Vec<Call>>>>,
}

impl std::fmt::Debug for ConnectionExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheduling = match self.inbox {
            Some(_) => CallScheduling::PerConnection,
            None => CallScheduling::PerCall,
        };
        f.debug_struct("ConnectionExecutor")
            .field("scheduling", &scheduling)
            .finish()
    }
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for ConnectionExecutor {
    fn execute(&self, call: F) {
        let call = contain_panics(call);
        match &self.inbox {
            Some(inbox) => inbox.lock().unwrap_or_else(|e| e.into_inner()).push(call),
            None => drop(tokio::spawn(call)),
        }
    }
}

/// A panic in one call (outside what `grpc::panics` catches, e.g. while a stream's answer is
/// sent) ends that call only, as it would in a task of its own, not the connection.
fn contain_panics(call: impl Future<Output = ()> + Send + 'static) -> Call {
    Box::pin(AssertUnwindSafe(call).catch_unwind().map(|outcome| {
        if let Err(panic) = outcome {
            let message = super::panics::panic_message(panic.as_ref());
            tracing::error!(
                panic = message,
                "a call panicked while its answer was sent; the call is ended"
            );
        }
    }))
}

/// Wakes the connection's task, unless it is being polled right now, in which case the poll
/// goes round once more instead (a task that wakes itself is queued behind every other ready
/// task and may wake an idle runtime thread to take it).
struct DriverWaker {
    task: AtomicWaker,
    in_poll: AtomicBool,
    woken: AtomicBool,
}

impl Wake for DriverWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, SeqCst);
        if !self.in_poll.load(SeqCst) {
            self.task.wake();
        }
    }
}

/// Polls one connection together with the calls its executor queued.
pub struct ConnectionDriver {
    inbox: Option<Arc<Mutex<Vec<Call>>>>,
    calls: FuturesUnordered<Call>,
    state: Arc<DriverWaker>,
    waker: Waker,
}

impl std::fmt::Debug for ConnectionDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionDriver")
            .field("calls", &self.calls.len())
            .finish_non_exhaustive()
    }
}

impl ConnectionDriver {
    /// A driver and the executor to build the connection's server with.
    pub fn new(scheduling: CallScheduling) -> (Self, ConnectionExecutor) {
        let inbox = (scheduling == CallScheduling::PerConnection).then(Arc::default);
        let state = Arc::new(DriverWaker {
            task: AtomicWaker::new(),
            in_poll: AtomicBool::new(false),
            woken: AtomicBool::new(false),
        });
        let driver = Self {
            inbox: inbox.clone(),
            calls: FuturesUnordered::new(),
            waker: Waker::from(Arc::clone(&state)),
            state,
        };
        (driver, ConnectionExecutor { inbox })
    }

    /// Polls the connection and its calls until neither has work left; ready with the
    /// connection's outcome once it has closed. Calls still running then are moved to tasks of
    /// their own, as they would have run with [`CallScheduling::PerCall`].
    pub fn poll_connection<C: Future + ?Sized>(
        &mut self,
        cx: &mut Context<'_>,
        mut connection: Pin<&mut C>,
    ) -> Poll<C::Output> {
        let Self {
            inbox,
            calls,
            state,
            waker,
        } = self;
        let Some(inbox) = inbox else {
            return connection.poll(cx);
        };
        state.task.register(cx.waker());
        state.in_poll.store(true, SeqCst);
        let mut inner = Context::from_waker(waker);
        for _ in 0..MAX_ROUNDS_PER_POLL {
            state.woken.store(false, SeqCst);
            let polled = connection.as_mut().poll(&mut inner);
            // Drained, not taken: the inbox keeps its capacity for the next calls.
            calls.extend(inbox.lock().unwrap_or_else(|e| e.into_inner()).drain(..));
            if let Poll::Ready(outcome) = polled {
                state.in_poll.store(false, SeqCst);
                for call in std::mem::take(calls) {
                    drop(tokio::spawn(call));
                }
                return Poll::Ready(outcome);
            }
            while let Poll::Ready(Some(())) = calls.poll_next_unpin(&mut inner) {}
            if state.woken.load(SeqCst) {
                continue;
            }
            state.in_poll.store(false, SeqCst);
            // A wake-up between the check above and here found `in_poll` still set.
            if !state.woken.swap(false, SeqCst) {
                return Poll::Pending;
            }
            state.in_poll.store(true, SeqCst);
        }
        state.in_poll.store(false, SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
