//! How much of toolplane's log one source of events may take: at most a burst of events in
//! each window; the rest of a window's are counted, not logged, as journald limits a
//! service's messages. A source writing without pause (an MCP server printing an error in a
//! loop, a caller retrying a refused call at once) would otherwise fill the log, and the disk
//! or the log shipper behind it. When a source first passes its limit in a window its
//! [`OverBudget::limit_reached`] says so; how many were left out is said with
//! [`OverBudget::left_out`] when the window ends (from a task, where a Tokio runtime runs),
//! with the source's next event after the window, or at [`LogBudget::ended`], whichever
//! comes first.
//!
//! Written here, not with `governor` (which toolplane uses for call rates): a rate limiter
//! answers whether, not how many it refused, which the log is to say.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Tokio's, which is std's unless a test pauses Tokio's clock.
use tokio::time::Instant;

/// What a [`LogBudget`] says of its source when events are left out (in the log, as WARN).
pub trait OverBudget: Send + Sync + 'static {
    /// The source has passed its limit of `burst` events in `window`: the rest of this
    /// window's are counted, not logged.
    fn limit_reached(&self, burst: u32, window: Duration);
    /// `count` events of the source were left out over the limit.
    fn left_out(&self, count: u64);
}

/// One source's log budget.
pub struct LogBudget {
    burst: u32,
    window: Duration,
    state: Arc<Mutex<Window>>,
    says: Arc<dyn OverBudget>,
}

impl fmt::Debug for LogBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogBudget")
            .field("burst", &self.burst)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Window {
    began: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl LogBudget {
    /// A budget of `burst` events in each `window`, whose events left out `says` reports.
    pub fn new(burst: u32, window: Duration, says: impl OverBudget) -> Self {
        Self {
            burst,
            window,
            state: Arc::default(),
            says: Arc::new(says),
        }
    }

    /// Whether an event of the source may be logged now.
    pub fn allows(&self) -> bool {
        self.allows_at(Instant::now())
    }

    fn allows_at(&self, now: Instant) -> bool {
        let (allowed, left_out_before, first_left_out) = {
            let mut window = lock(&self.state);
            let mut left_out_before = 0;
            if (window.began).is_none_or(|began| now.duration_since(began) >= self.window) {
                left_out_before = window.left_out;
                *window = Window {
                    began: Some(now),
                    ..Window::default()
                };
            }
            if window.logged < self.burst {
                window.logged += 1;
                (true, left_out_before, None)
            } else {
                window.left_out += 1;
                (
                    false,
                    left_out_before,
                    window.began.filter(|_| window.left_out == 1),
                )
            }
        };
        if left_out_before > 0 {
            self.says.left_out(left_out_before);
        }
        if let Some(began) = first_left_out {
            self.says.limit_reached(self.burst, self.window);
            self.say_at_the_end_of(began);
        }
        allowed
    }

    /// Says how many events the window that began at `began` left out once it has ended,
    /// unless something said it before (the next window's first event, [`Self::ended`]).
    fn say_at_the_end_of(&self, began: Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (state, says) = (Arc::clone(&self.state), Arc::clone(&self.says));
        let end = began + self.window;
        runtime.spawn(async move {
            tokio::time::sleep_until(end).await;
            let left_out = {
                let mut window = lock(&state);
                if window.began == Some(began) {
                    std::mem::take(&mut window.left_out)
                } else {
                    0
                }
            };
            if left_out > 0 {
                says.left_out(left_out);
            }
        });
    }

    /// Says how many events were left out in the window under way, if any: the source has
    /// ended (an MCP server's standard error closed).
    pub fn ended(&self) {
        let left_out = std::mem::take(&mut lock(&self.state).left_out);
        if left_out > 0 {
            self.says.left_out(left_out);
        }
    }
}

fn lock(state: &Mutex<Window>) -> std::sync::MutexGuard<'_, Window> {
    state.lock().unwrap_or_else(|error| error.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a budget said: `limit` for each limit reached, and each count left out.
    #[derive(Debug, Clone, Default)]
    struct Said(Arc<Mutex<Vec<String>>>);

    impl Said {
        fn taken(&self) -> Vec<String> {
            std::mem::take(&mut self.0.lock().expect("not poisoned"))
        }
    }

    impl OverBudget for Said {
        fn limit_reached(&self, burst: u32, _window: Duration) {
            self.0
                .lock()
                .expect("not poisoned")
                .push(format!("limit {burst}"));
        }
        fn left_out(&self, count: u64) {
            self.0
                .lock()
                .expect("not poisoned")
                .push(format!("left out {count}"));
        }
    }

    const WINDOW: Duration = Duration::from_secs(30);

    /// A window takes its burst; the rest are counted, said once as they begin and once in all
    /// after the window, with the next window's first event (no runtime: no task says it).
    #[test]
    fn past_the_burst_a_windows_events_are_counted_and_said_after_it() {
        let said = Said::default();
        let budget = LogBudget::new(10, WINDOW, said.clone());
        let start = Instant::now();
        let allowed = (0..15).filter(|_| budget.allows_at(start)).count();
        assert_eq!(allowed, 10);
        assert_eq!(said.taken(), ["limit 10"]);
        assert!(budget.allows_at(start + WINDOW), "a new window");
        assert_eq!(said.taken(), ["left out 5"]);
    }

    /// The window under way says how many it left out when its source ends; nothing when it
    /// left none out, and nothing twice.
    #[test]
    fn an_end_says_what_the_window_left_out() {
        let said = Said::default();
        let budget = LogBudget::new(10, WINDOW, said.clone());
        let start = Instant::now();
        assert!(budget.allows_at(start));
        budget.ended();
        assert_eq!(said.taken(), Vec::<String>::new());
        for _ in 0..12 {
            budget.allows_at(start);
        }
        budget.ended();
        budget.ended();
        assert_eq!(said.taken(), ["limit 10", "left out 3"]);
    }

    /// Within a runtime, what a window left out is said when it ends, though no event follows;
    /// the next window's first event then has nothing more to say.
    #[tokio::test(start_paused = true)]
    async fn within_a_runtime_the_window_s_end_says_what_it_left_out() {
        let said = Said::default();
        let budget = LogBudget::new(10, WINDOW, said.clone());
        for _ in 0..14 {
            budget.allows();
        }
        assert_eq!(said.taken(), ["limit 10"]);
        tokio::time::sleep(WINDOW - Duration::from_secs(1)).await;
        assert_eq!(said.taken(), Vec::<String>::new(), "not before its end");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(said.taken(), ["left out 4"]);
        assert!(budget.allows());
        assert_eq!(said.taken(), Vec::<String>::new(), "said once");
    }
}
