//! When a model call is tried again, and how long after: the policy of OpenAI's own client
//! libraries, so that a model server's rate limit or a restart behind a load balancer does not
//! fail an agent's turn. A request that could not be sent (no connection) and an answer of 408,
//! 409, 429 or 5xx are tried again, up to `model_max_retries` times (2 by default), unless the
//! server says `x-should-retry: false` (and `x-should-retry: true` asks for it on any status).
//! The wait is what the server asks for (`retry-after-ms`, or `retry-after` in seconds or as a
//! date) when that is under a minute, else 0.5 s doubling to at most 8 s, less up to a quarter
//! at random. A call that timed out is not tried again: the caller has waited the whole
//! `model_timeout` already. The waits use the invocation retry policy's backoff
//! ([`RetryPolicy`]).

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::invoke::policy::RetryPolicy;

/// The most `model_max_retries` may be.
pub const MAX_MODEL_RETRIES: u32 = 10;

/// The default number of times a failed model call is tried again (as OpenAI's clients do).
pub const DEFAULT_MODEL_RETRIES: u32 = 2;

/// The longest wait a server may ask for and have honoured; past it the backoff is used.
const LONGEST_ASKED_WAIT: Duration = Duration::from_secs(60);

/// How the waits between attempts grow.
const BACKOFF: RetryPolicy = RetryPolicy {
    max_attempts: MAX_MODEL_RETRIES + 1,
    initial_backoff: Duration::from_millis(500),
    max_backoff: Duration::from_secs(8),
    multiplier: 2.0,
    jitter: 0.25,
};

/// Whether an answer of `status` with `headers` is worth trying again.
pub(super) fn status_is_retried(status: StatusCode, headers: &HeaderMap) -> bool {
    match headers.get("x-should-retry").map(|v| v.as_bytes()) {
        Some(b"true") => return true,
        Some(b"false") => return false,
        _ => {}
    }
    matches!(
        status,
        StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS
    ) || status.is_server_error()
}

/// Whether a request that failed with `error` (no answer came) is worth trying again: one
/// that could not connect or was cut off before its answer, not one that timed out.
pub(super) fn error_is_retried(error: &reqwest::Error) -> bool {
    !error.is_timeout() && (error.is_connect() || error.is_request())
}

/// The wait before attempt `failed + 1`, after `failed` attempts (from 1): what `headers` ask
/// for, when they ask for less than a minute, else the backoff.
pub(super) fn wait_after(failed: u32, headers: Option<&HeaderMap>) -> Duration {
    headers
        .and_then(|headers| asked_wait(headers, SystemTime::now()))
        .filter(|wait| *wait < LONGEST_ASKED_WAIT)
        .unwrap_or_else(|| BACKOFF.backoff(failed))
}

/// The wait `headers` ask for: `retry-after-ms` (milliseconds), else `retry-after` (seconds,
/// or an HTTP date, counted from `now`).
fn asked_wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|ms| ms.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let after = text("retry-after")?;
    if let Ok(seconds) = after.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = httpdate::parse_http_date(after).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_headers::headers;

    #[test]
    fn rate_limits_and_server_errors_are_retried_and_refusals_are_not() {
        let none = HeaderMap::new();
        for status in [408, 409, 429, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(status).expect("a status");
            assert!(status_is_retried(status, &none), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422] {
            let status = StatusCode::from_u16(status).expect("a status");
            assert!(!status_is_retried(status, &none), "{status}");
        }
        let forbidden = headers(&[("x-should-retry", "false")]);
        assert!(!status_is_retried(
            StatusCode::TOO_MANY_REQUESTS,
            &forbidden
        ));
        let asked = headers(&[("x-should-retry", "true")]);
        assert!(status_is_retried(StatusCode::BAD_REQUEST, &asked));
    }

    #[test]
    fn the_wait_is_the_one_asked_for_under_a_minute_else_the_backoff() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let asked = |pairs: &[(&'static str, &str)]| asked_wait(&headers(pairs), now);
        assert_eq!(
            asked(&[("retry-after-ms", "250")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            asked(&[("retry-after-ms", "40"), ("retry-after", "9")]),
            Some(Duration::from_millis(40))
        );
        assert_eq!(asked(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        let in_three = httpdate::fmt_http_date(now + Duration::from_secs(3));
        assert_eq!(
            asked(&[("retry-after", &in_three)]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(asked(&[("retry-after", "soon")]), None);
        assert_eq!(asked(&[("retry-after-ms", "-5")]), None);

        let long = headers(&[("retry-after", "3600")]);
        for failed in 1..=4 {
            let ceiling = Duration::from_millis(500 << (failed - 1)).min(Duration::from_secs(8));
            let wait = wait_after(failed, Some(&long));
            assert!(
                wait <= ceiling && wait >= ceiling * 3 / 4,
                "{failed}: {wait:?}"
            );
        }
        assert_eq!(
            wait_after(1, Some(&headers(&[("retry-after-ms", "10")]))),
            Duration::from_millis(10)
        );
    }
}
