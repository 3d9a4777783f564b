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
//! So an input of [`OFF_THREAD_INPUT_BYTES`] or more is worked on in tokio's blocking pool, at
//! most `permits` inputs at once (the rest wait their turn), while the serving threads go on.
//! The call waits at most until its deadline: the work cannot be stopped midway, so when the
//! deadline passes first it runs on, holding its permit, and its result is dropped; the call
//! is answered at its deadline. Smaller inputs are worked on in place, where a hand-off would
//! cost more than the work.
//!
//! Tool searches (`SearchTools`, and an agent choosing the tools to offer its model) share the
//! same permits: a search scores every tool holding a query word, hundreds of microseconds
//! over 10,000 tools, and the first search of a service builds its index. Run on a thread of
//! their own each, a burst of 64 searches ran 64 threads on two cores; each new thread's
//! first allocations faulted in fresh memory, and the first such burst in the benchmark
//! answered at p99 0.7-1 s (BENCHMARKS.md, item 33).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

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

/// The pool's permits: how many pieces of work are worked on at once.
#[derive(Debug, Clone)]
pub struct HeavyWork {
    permits: Arc<Semaphore>,
}

impl HeavyWork {
    /// At most `permits` (at least 1) pieces of work at once.
    pub fn new(permits: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(permits.max(1))),
        }
    }

    /// Runs `work` on the blocking pool once a permit is free, and returns its result, or
    /// `None` when `deadline` passed first (waiting for a permit or for the work). A panic in
    /// `work` is resumed here, as if it had run in place.
    pub async fn run<T, F>(&self, deadline: Option<Instant>, work: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
            return None;
        }
        match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline.into(), self.run_to_end(work))
                .await
                .ok(),
            None => Some(self.run_to_end(work).await),
        }
    }

    /// Runs `work` on the blocking pool once a permit is free, and returns its result: for a
    /// caller whose deadline is kept elsewhere (dropping the returned future gives up the wait
    /// for a permit, or the result of work already started). A panic in `work` is resumed
    /// here, as if it had run in place.
    pub async fn run_to_end<T, F>(&self, work: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        });
        match task.await {
            Ok(result) => result,
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn work_runs_and_answers() {
        let pool = HeavyWork::new(1);
        assert_eq!(pool.run(None, || 6 * 7).await, Some(42));
        assert!(!is_large(OFF_THREAD_INPUT_BYTES - 1));
        assert!(is_large(OFF_THREAD_INPUT_BYTES));
    }

    /// Work past its deadline is given up on at the deadline and keeps its permit until it
    /// ends, so the next piece waits for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_deadline_ends_the_wait_not_the_work() {
        let pool = HeavyWork::new(1);
        let (release, released) = mpsc::channel::<()>();
        let deadline = Instant::now() + Duration::from_millis(50);
        let first = pool.run(Some(deadline), move || released.recv().is_ok());
        assert_eq!(first.await, None, "given up at the deadline");

        let second = pool.run(Some(Instant::now() + Duration::from_millis(50)), || 2);
        assert_eq!(second.await, None, "the first still holds the only permit");
        release.send(()).expect("the first work still waits");
        assert_eq!(pool.run(None, || 3).await, Some(3), "the permit came back");
    }

    /// Work without a deadline (a search) waits for a permit held by other work (a large
    /// input), and answers once it has run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_without_a_deadline_waits_its_turn() {
        let pool = HeavyWork::new(1);
        let (release, released) = mpsc::channel::<()>();
        let (started, starts) = mpsc::channel::<()>();
        let holder = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.run_to_end(move || {
                    started.send(()).expect("the test waits");
                    released.recv().is_ok()
                })
                .await
            }
        });
        starts.recv().expect("the first work started");
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.run_to_end(|| 2).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the only permit is held");
        release.send(()).expect("the first work still waits");
        assert!(holder.await.expect("no panic"));
        assert_eq!(waiting.await.expect("no panic"), 2);
    }

    #[tokio::test]
    async fn work_past_its_deadline_is_not_started() {
        let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&started);
        let work = move || flag.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            HeavyWork::new(1).run(Some(Instant::now()), work).await,
            None
        );
        assert!(!started.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    #[should_panic(expected = "the work's own panic")]
    async fn a_panic_in_the_work_is_resumed() {
        HeavyWork::new(1)
            .run(None, || panic!("the work's own panic"))
            .await;
    }
}
