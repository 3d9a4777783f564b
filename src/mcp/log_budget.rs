//! How much of an MCP server's log toolplane's own log takes: at most [`LOG_BURST`] events in
//! each [`LOG_WINDOW`] per server (the lines of a started server's standard error and its
//! session's log messages together); the rest of a window's are counted, not logged, as
//! journald limits a service's messages (its default, 10,000 in 30 s). A server writing
//! without pause (a loop printing an error) would otherwise fill toolplane's log, and the disk
//! or the log shipper behind it, with its lines. When a server first passes the limit in a
//! window a WARN says so; how many were left out is logged (WARN) with its next event after the
//! window, or when its standard error ends.
//!
//! Written here, not with `governor` (which toolplane uses for call rates): a rate limiter
//! answers whether, not how many it refused, which the log is to say.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::server_logs::TARGET;

/// The most events one server's log puts in toolplane's in a [`LOG_WINDOW`].
pub const LOG_BURST: u32 = 10_000;
/// The window [`LOG_BURST`] counts in.
pub const LOG_WINDOW: Duration = Duration::from_secs(30);

/// One server's log budget, shared by its standard error's relay and its session.
#[derive(Debug, Default)]
pub struct LogBudget(Mutex<Window>);

#[derive(Debug, Default)]
struct Window {
    began: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl LogBudget {
    /// Whether an event of the server `server` (as events name it) may be logged now.
    pub fn allows(&self, server: &str) -> bool {
        self.allows_at(server, Instant::now())
    }

    fn allows_at(&self, server: &str, now: Instant) -> bool {
        let (allowed, left_out_before, first_left_out) = {
            let mut window = self.window();
            let mut left_out_before = 0;
            if window
                .began
                .is_none_or(|began| now.duration_since(began) >= LOG_WINDOW)
            {
                left_out_before = window.left_out;
                *window = Window {
                    began: Some(now),
                    ..Window::default()
                };
            }
            if window.logged < LOG_BURST {
                window.logged += 1;
                (true, left_out_before, false)
            } else {
                window.left_out += 1;
                (false, left_out_before, window.left_out == 1)
            }
        };
        if left_out_before > 0 {
            left_out(server, left_out_before);
        }
        if first_left_out {
            tracing::warn!(target: TARGET, mcp_server = server, limit = LOG_BURST, window = ?LOG_WINDOW, "the MCP server logs more than the limit in a window: the rest of this window's lines and messages are counted, not logged");
        }
        allowed
    }

    /// Logs how many events were left out in the window under way, if any: the server's
    /// standard error has ended.
    pub fn ended(&self, server: &str) {
        let left_out_now = std::mem::take(&mut self.window().left_out);
        if left_out_now > 0 {
            left_out(server, left_out_now);
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.0.lock().unwrap_or_else(|error| error.into_inner())
    }
}

fn left_out(server: &str, count: u64) {
    tracing::warn!(target: TARGET, mcp_server = server, left_out = count, "lines and messages of the MCP server were not logged, over the limit of its window");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window takes [`LOG_BURST`] events; the rest are counted, said once as they begin and
    /// once in all after the window, with the next window's first event.
    #[test]
    fn past_the_burst_a_windows_events_are_counted_and_said_after_it() {
        let budget = LogBudget::default();
        let start = Instant::now();
        let (allowed, logs) = crate::test_logs::logged(|| {
            (0..LOG_BURST + 5)
                .filter(|_| budget.allows_at("s", start))
                .count()
        });
        assert_eq!(allowed, LOG_BURST as usize);
        let warnings: Vec<&str> = logs.lines().collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("more than the limit"),
            "{}",
            warnings[0]
        );

        let later = start + LOG_WINDOW;
        let (allowed, logs) = crate::test_logs::logged(|| budget.allows_at("s", later));
        assert!(allowed, "a new window");
        let event: serde_json::Value = serde_json::from_str(logs.trim()).expect("one event");
        assert_eq!(event["level"], "WARN");
        assert_eq!(event["fields"]["left_out"], 5);
        assert_eq!(event["fields"]["mcp_server"], "s");
    }

    /// The window under way says how many it left out when the server's standard error ends;
    /// nothing when it left none out.
    #[test]
    fn an_end_says_what_the_window_left_out() {
        let budget = LogBudget::default();
        let start = Instant::now();
        let ((), quiet) = crate::test_logs::logged(|| {
            assert!(budget.allows_at("s", start));
            budget.ended("s");
        });
        assert!(quiet.is_empty(), "{quiet}");
        let ((), logs) = crate::test_logs::logged(|| {
            for _ in 0..LOG_BURST + 2 {
                budget.allows_at("s", start);
            }
            budget.ended("s");
            budget.ended("s");
        });
        let left_out: Vec<&str> = logs
            .lines()
            .filter(|line| line.contains("left_out"))
            .collect();
        assert_eq!(left_out.len(), 1, "said once: {logs}");
        assert!(left_out[0].contains("\"left_out\":3"), "{}", left_out[0]);
    }
}
