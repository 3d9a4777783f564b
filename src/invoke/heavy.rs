//! Work that takes time in proportion to a call's input, or to the tools searched, moved off
//! the threads that serve calls.
//!
//! Reading an `InvokeTool` input into JSON, its canonical digest for the record, and its
//! validation against the tool's schema each take time in proportion to the input: about a
//! millisecond for 16 KiB, tens of milliseconds for the 4 MiB a message may hold, and much
//! more when the schema has a `pattern` that runs on the backtracking engine (up to about half
//! a millisecond per string, `registry::validate::PATTERN_BACKTRACK_LIMIT`: minutes for 4 MiB
//! of short strings). The runtime has one thread per core, and a connection's calls run on the
//! task serving the connection (`grpc::call_scheduling`), so done in place that work would stop
//! the connection's other calls, and the thread's other connections, until it ended.
//!
//! So an input of [`OFF_THREAD_INPUT_BYTES`] or more is worked on in a pool of `permits`
//! threads of its own ([`HeavyWork`]; the rest wait their turn), while the serving threads go on.
//! The call waits at most until its deadline; when the deadline passes first (or the caller
//! goes), the call is answered at once and its work given up: a validation stops at the next
//! subschema it applies (`registry::stop_check`), other work (reading JSON, a digest, a
//! search) runs to its end, which its size bounds, and its result is dropped. Smaller inputs
//! are worked on in place, where a hand-off would cost more than the work.
//!
//! Tool searches (`SearchTools`, and an agent choosing the tools to offer its model) share the
//! same threads: a search scores every tool holding a query word, hundreds of microseconds
//! over 10,000 tools, and the first search of a service builds its index. Run on a thread of
//! their own each, a burst of 64 searches ran 64 threads on two cores; each new thread's
//! first allocations faulted in fresh memory, and the first such burst in the benchmark
//! answered at p99 0.7-1 s (BENCHMARKS.md, item 33).
//!
//! Work that waits on files (reading the record log past memory) runs on tokio's blocking
//! threads instead, through [`blocking`], which gives it up in the same way when its caller
//! stops waiting.
//!
//! The pool is shared by every tenant, so its threads take the work waiting in turns, one
//! piece of each tenant's at a time ([`HeavyWork`]): a tenant's burst of large inputs, each of
//! which may hold a thread up to its deadline, delays another tenant's next large input or
//! search by one piece of work per thread, not by the whole burst.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::envelope::TenantId;
use crate::registry::stop_check;

/// Inputs of at least this many bytes (of their encoded form) are worked on off the serving
/// threads.
pub const OFF_THREAD_INPUT_BYTES: usize = 16 * 1024;

/// The number of pieces of work (large inputs, searches) worked on at once by default: half the
/// CPUs, at least one, so that they can never take every core from the calls being served.
pub fn default_permits() -> usize {
    std::thread::available_parallelism().map_or(1, |cpus| (cpus.get() / 2).max(1))
}

/// Whether an input of `bytes` is worked on off the serving threads.
pub fn is_large(bytes: usize) -> bool {
    bytes >= OFF_THREAD_INPUT_BYTES
}

/// The pool: `permits` threads of its own, each taking the next piece of work as soon as it
/// is done with the last (a rayon pool; the caller awaits the result on a oneshot channel).
///
/// The next piece is chosen by tenant, in turns: each tenant with work waiting has its turn,
/// and takes its oldest piece, before any tenant takes a second (round robin over the tenants
/// waiting; a tenant's own pieces keep their order). rayon's own queue is first come, first
/// served, so every piece put in it only takes the next turn of the tenants'.
///
/// The threads live as long as the pool, so the memory their allocator keeps stays warm. A
/// semaphore in front of tokio's blocking pool did the same bounding, but each piece of work
/// then waited for a permit, a wake-up of its task and a wake-up of a blocking thread before
/// it started, and the permit stood idle meanwhile: a burst of searches ran at about half the
/// rate the work itself allowed (BENCHMARKS.md, item 33).
#[derive(Clone)]
pub struct HeavyWork {
    pool: Arc<rayon::ThreadPool>,
    turns: Arc<Turns>,
}

/// A piece of work waiting for a thread.
type Piece = Box<dyn FnOnce() + Send>;

/// The work waiting, by tenant, and whose turn is next. Written here, not taken from a crate:
/// rayon has no fair queue, and a round robin over a few queues is a few lines.
#[derive(Default)]
struct Turns {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    /// The tenants with work waiting, in the order of their turns.
    order: VecDeque<TenantId>,
    /// Each tenant's work waiting, oldest first; a tenant with none has no entry.
    pieces: HashMap<TenantId, VecDeque<Piece>>,
}

impl Turns {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(|error| error.into_inner())
    }

    /// Puts `piece` at the end of `tenant`'s queue (and `tenant` at the end of the turns when
    /// it had nothing waiting).
    fn push(&self, tenant: TenantId, piece: Piece) {
        let mut waiting = self.waiting();
        let queue = waiting.pieces.entry(tenant).or_default();
        queue.push_back(piece);
        if queue.len() == 1 {
            waiting.order.push_back(tenant);
        }
    }

    /// The oldest piece of the tenant whose turn it is; that tenant's next turn comes after
    /// every other tenant's waiting.
    fn next(&self) -> Option<Piece> {
        let mut waiting = self.waiting();
        let tenant = waiting.order.pop_front()?;
        let queue = waiting.pieces.get_mut(&tenant)?;
        let piece = queue.pop_front();
        if queue.is_empty() {
            waiting.pieces.remove(&tenant);
        } else {
            waiting.order.push_back(tenant);
        }
        piece
    }
}

impl std::fmt::Debug for HeavyWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyWork")
            .field("threads", &self.pool.current_num_threads())
            .finish()
    }
}

impl HeavyWork {
    /// At most `permits` (at least 1) pieces of work at once, on as many threads.
    pub fn new(permits: usize) -> Self {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(permits.max(1))
            .thread_name(|index| format!("toolplane-heavy-{index}"))
            .build()
            .expect("the heavy work's threads start");
        Self {
            pool: Arc::new(pool),
            turns: Arc::default(),
        }
    }

    /// Puts `piece` in `tenant`'s queue, and a turn in the pool's: whichever thread takes that
    /// turn runs the piece whose turn it is, this one or another tenant's.
    fn submit(&self, tenant: TenantId, piece: Piece) {
        self.turns.push(tenant, piece);
        let turns = Arc::clone(&self.turns);
        self.pool.spawn(move || {
            // One turn for every piece pushed, so there is always one.
            if let Some(piece) = turns.next() {
                piece();
            }
        });
    }

    /// Runs `work`, `tenant`'s, on the pool at its turn, and returns its result, or `None` when
    /// `deadline` passed first (waiting for a thread or for the work). A panic in `work` is
    /// resumed here, as if it had run in place.
    pub async fn run<T, F>(&self, tenant: TenantId, deadline: Option<Instant>, work: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            return None;
        }
        match deadline {
            Some(deadline) => {
                tokio::time::timeout_at(deadline.into(), self.run_to_end(tenant, work))
                    .await
                    .ok()
            }
            None => Some(self.run_to_end(tenant, work).await),
        }
    }

    /// Runs `work`, `tenant`'s, on the pool at its turn, and returns its result: for a caller
    /// whose deadline is kept elsewhere. Dropping the returned future gives up the work: work
    /// not started by then is never started, and validations in work under way stop
    /// ([`stop_check::watching`]). A panic in `work` is resumed here, as if it had run in
    /// place.
    pub async fn run_to_end<T, F>(&self, tenant: TenantId, work: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let given_up = GiveUpOnDrop::default();
        let flag = Arc::clone(&given_up.0);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let piece = move || {
            if answer.is_closed() {
                return;
            }
            let work = || stop_check::watching(&flag, work);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            // The caller may have gone meanwhile: then the result is dropped.
            let _ = answer.send(result);
        };
        self.submit(tenant, Box::new(piece));
        match answered.await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => unreachable!("every piece of work the pool takes is answered"),
        }
    }
}

/// Runs `work`, which waits on files, on tokio's blocking threads (not the pool's, which it
/// would hold while it waits), and returns its result; an error when it panicked. Dropping the
/// returned future gives the work up, as [`HeavyWork::run_to_end`] does:
/// [`stop_check::is_given_up`] turns true for it, and work that looks stops.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let given_up = GiveUpOnDrop::default();
    let flag = Arc::clone(&given_up.0);
    tokio::task::spawn_blocking(move || stop_check::watching(&flag, work)).await
}

/// Gives the work up when the caller stops waiting for it (its result, or the future dropped
/// at the deadline or by a caller gone): set after the work ended, the flag is read by nobody.
/// A bare atomic flag, not tokio-util's `CancellationToken` (whose drop guard would do the
/// same): its `is_cancelled` takes a mutex, and validation reads the flag at every subschema it
/// applies.
#[derive(Default)]
struct GiveUpOnDrop(Arc<AtomicBool>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    const TENANT: TenantId = TenantId(0);

    #[tokio::test]
    async fn work_runs_and_answers() {
        let pool = HeavyWork::new(1);
        assert_eq!(pool.run(TENANT, None, || 6 * 7).await, Some(42));
        assert!(!is_large(OFF_THREAD_INPUT_BYTES - 1));
        assert!(is_large(OFF_THREAD_INPUT_BYTES));
    }

    /// Work past its deadline is given up on at the deadline and keeps its thread until it
    /// ends, so the next piece waits for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_deadline_ends_the_wait_not_the_work() {
        let pool = HeavyWork::new(1);
        let (release, released) = mpsc::channel::<()>();
        let deadline = Instant::now() + Duration::from_millis(50);
        let first = pool.run(TENANT, Some(deadline), move || released.recv().is_ok());
        assert_eq!(first.await, None, "given up at the deadline");

        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&started);
        let second = pool.run(
            TENANT,
            Some(Instant::now() + Duration::from_millis(50)),
            move || {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            },
        );
        assert_eq!(second.await, None, "the first still holds the only thread");
        release.send(()).expect("the first work still waits");
        assert_eq!(
            pool.run(TENANT, None, || 3).await,
            Some(3),
            "the thread came back"
        );
        assert!(
            !started.load(std::sync::atomic::Ordering::SeqCst),
            "work whose caller had gone was not started"
        );
    }

    /// Work without a deadline (a search) waits for the thread held by other work (a large
    /// input), and answers once it has run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_without_a_deadline_waits_its_turn() {
        let pool = HeavyWork::new(1);
        let (release, released) = mpsc::channel::<()>();
        let (started, starts) = mpsc::channel::<()>();
        let holder = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run_to_end(TENANT, move || {
                    started.send(()).expect("the test waits");
                    released.recv().is_ok()
                })
                .await
            }
        });
        starts.recv().expect("the first work started");
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.run_to_end(TENANT, || 2).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the only thread is busy");
        release.send(()).expect("the first work still waits");
        assert!(holder.await.expect("no panic"));
        assert_eq!(waiting.await.expect("no panic"), 2);
    }

    /// Work whose caller stops waiting, at the deadline or by going, is told so
    /// (`stop_check::is_given_up`, which validations read); work waited for is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_no_longer_waited_for_is_given_up() {
        let pool = HeavyWork::new(1);
        assert_eq!(
            pool.run(TENANT, None, stop_check::is_given_up).await,
            Some(false)
        );

        let until_given_up = |started: mpsc::Sender<()>, seen: mpsc::Sender<()>| {
            move || {
                started.send(()).expect("the test waits");
                while !stop_check::is_given_up() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                seen.send(()).expect("the test waits");
            }
        };
        let (started, starts) = mpsc::channel();
        let (seen, sees) = mpsc::channel();
        let deadline = Instant::now() + Duration::from_millis(50);
        let work = until_given_up(started.clone(), seen.clone());
        assert_eq!(pool.run(TENANT, Some(deadline), work).await, None);
        starts.recv().expect("the work started");
        sees.recv_timeout(Duration::from_secs(10))
            .expect("given up at the deadline");

        let waiting = tokio::spawn({
            let (pool, work) = (pool.clone(), until_given_up(started, seen));
            async move { pool.run_to_end(TENANT, work).await }
        });
        starts.recv().expect("the work started");
        waiting.abort();
        sees.recv_timeout(Duration::from_secs(10))
            .expect("given up when its caller went");
        assert_eq!(
            pool.run(TENANT, None, stop_check::is_given_up).await,
            Some(false)
        );
    }

    /// Work waiting is taken by tenant in turns: a tenant's second piece waits for every
    /// other tenant's first, whichever came first. Before, the pool took the work in the order
    /// it came, so one tenant's burst held up every other tenant's work until it had all run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tenants_take_turns() {
        let pool = HeavyWork::new(1);
        let (release, released) = mpsc::channel::<()>();
        let (started, starts) = mpsc::channel::<()>();
        let (ran, order) = mpsc::channel::<&'static str>();
        let holder = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run_to_end(TenantId(1), move || {
                    started.send(()).expect("the test waits");
                    released.recv().is_ok()
                })
                .await
            })
        };
        starts.recv().expect("the first work started");
        let mut waiting = Vec::new();
        for (tenant, name) in [(1, "one's second"), (1, "one's third"), (2, "two's first")] {
            let (pooled, ran) = (pool.clone(), ran.clone());
            let work = move || ran.send(name).expect("the test waits");
            waiting.push(tokio::spawn(async move {
                pooled.run_to_end(TenantId(tenant), work).await
            }));
            // Each is in its queue before the next is put in its own.
            while pool
                .turns
                .waiting()
                .pieces
                .values()
                .map(VecDeque::len)
                .sum::<usize>()
                < waiting.len()
            {
                tokio::task::yield_now().await;
            }
        }
        release.send(()).expect("the first work still waits");
        assert!(holder.await.expect("no panic"));
        for work in waiting {
            work.await.expect("no panic");
        }
        let order: Vec<_> = order.try_iter().collect();
        assert_eq!(order, ["one's second", "two's first", "one's third"]);
        let waiting = pool.turns.waiting();
        assert!(waiting.order.is_empty() && waiting.pieces.is_empty());
    }

    /// Blocking work is told when its caller stops waiting, as pool work is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_work_no_longer_waited_for_is_given_up() {
        assert!(!blocking(stop_check::is_given_up).await.expect("ran"));
        let (started, starts) = mpsc::channel();
        let (seen, sees) = mpsc::channel();
        let waiting = tokio::spawn(blocking(move || {
            started.send(()).expect("the test waits");
            while !stop_check::is_given_up() {
                std::thread::sleep(Duration::from_millis(1));
            }
            seen.send(()).expect("the test waits");
        }));
        starts.recv().expect("the work started");
        waiting.abort();
        sees.recv_timeout(Duration::from_secs(10))
            .expect("given up when its caller went");
    }

    #[tokio::test]
    async fn work_past_its_deadline_is_not_started() {
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&started);
        let work = move || flag.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            HeavyWork::new(1)
                .run(TENANT, Some(Instant::now()), work)
                .await,
            None
        );
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    #[should_panic(expected = "the work's own panic")]
    async fn a_panic_in_the_work_is_resumed() {
        HeavyWork::new(1)
            .run(TENANT, None, || panic!("the work's own panic"))
            .await;
    }
}
