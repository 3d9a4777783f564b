//! Load generation for the benchmarks: a closed loop (a fixed number of callers, each sending
//! its next request when the last one answers) and an open loop (requests sent at a fixed rate
//! whatever happens, with latency measured from each request's *intended* start, so a slow
//! server cannot hide its stalls by slowing the client down: no coordinated omission).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Mutex;

/// The highest latency the histograms track (60 s, in microseconds).
const MAX_TRACKED_MICROS: u64 = 60_000_000;
/// The most open-loop requests in flight at once before new ones count as failed.
const MAX_OPEN_LOOP_IN_FLIGHT: usize = 20_000;

/// What one measurement found.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Successful calls.
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
    /// What the first failed call failed with.
    pub first_error: Option<String>,
    /// How long the measurement ran.
    pub elapsed: Duration,
    /// Latencies of successful calls, in microseconds.
    pub latencies: Histogram<u64>,
}

impl Measured {
    /// Nothing measured yet.
    fn empty() -> Self {
        Self {
            calls: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            latencies: histogram(),
        }
    }

    /// Counts one call's outcome: a success with its latency, or a failure (the first one's
    /// error kept).
    fn count<E: std::fmt::Display>(&mut self, outcome: Result<(), E>, latency: Duration) {
        match outcome {
            Ok(()) => {
                self.calls += 1;
                let _ = self.latencies.record(micros(latency));
            }
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| error.to_string());
            }
        }
    }

    /// Adds another worker's measurement to this one.
    fn add(&mut self, other: Measured) {
        self.calls += other.calls;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        let _ = self.latencies.add(other.latencies);
    }

    /// This measurement when every call succeeded; otherwise an error naming `what`, how many
    /// calls failed and the first failure. Latency and throughput of a run whose calls fail
    /// measure the failing, not the serving, so they are not reported at all.
    pub fn all_succeeded(self, what: &str) -> Result<Self, String> {
        match &self.first_error {
            None => Ok(self),
            Some(first) => Err(format!(
                "{what}: {} of {} calls failed, the first with: {first}",
                self.errors,
                self.errors + self.calls
            )),
        }
    }

    /// Successful calls per second.
    pub fn rps(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile in microseconds.
    pub fn percentile_us(&self, quantile: f64) -> f64 {
        self.latencies.value_at_quantile(quantile) as f64
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_MICROS, 3).expect("static histogram bounds are valid")
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_TRACKED_MICROS)
}

/// Runs `concurrency` callers for `duration`, each calling `call(worker)` back to back.
pub async fn closed_loop<F, Fut, E>(concurrency: usize, duration: Duration, call: F) -> Measured
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display,
{
    let call = Arc::new(call);
    let started = Instant::now();
    let stop_at = started + duration;
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|worker| {
            let call = Arc::clone(&call);
            tokio::spawn(async move {
                let mut measured = Measured::empty();
                while Instant::now() < stop_at {
                    let sent = Instant::now();
                    let outcome = call(worker).await;
                    measured.count(outcome, sent.elapsed());
                }
                measured
            })
        })
        .collect();
    let mut total = Measured::empty();
    for worker in workers {
        if let Ok(measured) = worker.await {
            total.add(measured);
        }
    }
    total.elapsed = started.elapsed();
    total
}

/// Sends `rate` requests per second for `duration`, each at its scheduled time whether or not
/// earlier ones have answered; latency runs from the scheduled time.
pub async fn open_loop<F, Fut, E>(rate: f64, duration: Duration, call: F) -> Measured
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let call = Arc::new(call);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1e-3));
    let total_requests = (duration.as_secs_f64() * rate).ceil() as u64;
    let results = Arc::new(Mutex::new(Measured::empty()));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN_LOOP_IN_FLIGHT));
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total_requests.min(1_000_000) as usize);
    for index in 0..total_requests {
        let intended = started + interval.mul_f64(index as f64);
        tokio::time::sleep_until(intended).await;
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            let not_sent =
                format!("not sent: {MAX_OPEN_LOOP_IN_FLIGHT} requests were already in flight");
            results.lock().await.count(Err(not_sent), Duration::ZERO);
            continue;
        };
        let (call, results) = (Arc::clone(&call), Arc::clone(&results));
        tasks.push(tokio::spawn(async move {
            let outcome = call(index).await;
            let latency = intended.elapsed();
            drop(permit);
            results.lock().await.count(outcome, latency);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut measured = results.lock().await.clone();
    measured.elapsed = started.elapsed();
    measured
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closed_loop_counts_calls_and_errors() {
        let measured = closed_loop(2, Duration::from_millis(50), |worker| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if worker == 0 { Ok(()) } else { Err("refused") }
        })
        .await;
        assert!(measured.calls > 0 && measured.errors > 0);
        assert!(measured.percentile_us(0.5) >= 1000.0);
        let error = measured.all_succeeded("GetTool").expect_err("calls failed");
        assert!(error.starts_with("GetTool: "), "{error}");
        assert!(
            error.ends_with("calls failed, the first with: refused"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_measurement_whose_calls_all_succeed_is_kept() {
        let measured = closed_loop(2, Duration::from_millis(20), |_| async {
            Ok::<(), &str>(())
        })
        .await;
        let calls = measured.calls;
        assert_eq!(
            measured.all_succeeded("GetTool").map(|m| m.calls),
            Ok(calls)
        );
    }

    #[tokio::test]
    async fn open_loop_measures_from_the_intended_start() {
        // A one-at-a-time "server" taking 5 ms per call, offered one call per 5 ms: every
        // scheduled call is sent and counted, and latency includes the time spent queued.
        let gate = Arc::new(tokio::sync::Semaphore::new(1));
        let measured = open_loop(200.0, Duration::from_millis(100), move |_| {
            let gate = Arc::clone(&gate);
            async move {
                let _turn = gate.acquire().await.map_err(|_| "closed")?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<(), &str>(())
            }
        })
        .await;
        assert_eq!(measured.calls, 20);
        assert!(measured.percentile_us(0.99) >= 5000.0);
    }
}
