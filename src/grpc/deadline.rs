//! The `grpc-timeout` request header (gRPC over HTTP/2): reading a caller's deadline, writing
//! one for a call, and ending a streamed answer when the deadline passes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::Frame;

/// When a call's `grpc-timeout` runs out, measured from the arrival of its headers: put in
/// the request's extensions by the connection serving it (`grpc::connections`), so that the
/// time taken to receive a large request body counts against the deadline, as the caller
/// counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallDeadline(pub Instant);

/// What is left of the caller's deadline: until the [`CallDeadline`] the connection noted
/// when the call arrived, or else the whole `grpc-timeout` header (e.g. `1500m`, `2S`).
pub fn caller_timeout<T>(request: &tonic::Request<T>) -> Option<Duration> {
    match request.extensions().get::<CallDeadline>() {
        Some(CallDeadline(deadline)) => Some(deadline.saturating_duration_since(Instant::now())),
        None => timeout_of(request.metadata().get("grpc-timeout")?.as_encoded_bytes()),
    }
}

/// Reads a `grpc-timeout` header's value; `None` when it is not one.
pub fn timeout_of(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A `grpc-timeout` header value (at most 8 digits and a unit, per the gRPC HTTP/2 spec).
pub fn grpc_timeout(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let millis = timeout.as_millis();
    if millis <= MAX {
        format!("{}m", millis.max(1))
    } else {
        format!("{}S", timeout.as_secs().min(MAX as u64))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that ends `DEADLINE_EXCEEDED` when the call's deadline passes before
    /// the body has ended, as gRPC servers elsewhere end a stream at its deadline (grpc-go
    /// cancels the call's context): a `WatchServices` or `StreamComplete` stream opened with a
    /// `grpc-timeout` lasts that long, not until the caller goes. The answer's own frames come
    /// first; the deadline is looked at only while the answer has nothing to send, so a unary
    /// answer, sent whole, is never held to it.
    #[derive(Debug)]
    pub struct DeadlineBody<B> {
        #[pin]
        answer: B,
        deadline: Pin<Box<tokio::time::Sleep>>,
        ended: bool,
    }
}

impl<B> DeadlineBody<B> {
    /// `answer`, ended at `deadline` (the timer the call has been waiting on).
    pub fn new(answer: B, deadline: Pin<Box<tokio::time::Sleep>>) -> Self {
        Self {
            answer,
            deadline,
            ended: false,
        }
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for DeadlineBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if *this.ended {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = this.answer.poll_frame(cx) {
            *this.ended = frame.is_none();
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        *this.ended = true;
        let mut trailers = http::HeaderMap::with_capacity(2);
        let code = tonic::Code::DeadlineExceeded as i32;
        trailers.insert("grpc-status", code.into());
        // Printable ASCII without '%' needs no percent-encoding in grpc-message.
        trailers.insert(
            "grpc-message",
            http::HeaderValue::from_static(
                "the call's deadline (its grpc-timeout) passed; the stream ends here",
            ),
        );
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.answer.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.answer.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_deadlines_read_back() {
        for timeout in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_secs(3600),
        ] {
            let mut request = tonic::Request::new(());
            request.metadata_mut().insert(
                "grpc-timeout",
                grpc_timeout(timeout).parse().expect("ascii"),
            );
            assert_eq!(caller_timeout(&request), Some(timeout));
        }
        let mut odd = tonic::Request::new(());
        odd.metadata_mut()
            .insert("grpc-timeout", "5x".parse().expect("ascii"));
        assert_eq!(caller_timeout(&odd), None);
        assert_eq!(caller_timeout(&tonic::Request::new(())), None);
    }

    /// The deadline noted at the call's arrival wins over the header, and time passes on it.
    #[test]
    fn the_deadline_noted_at_arrival_counts_down() {
        let mut request = tonic::Request::new(());
        request
            .metadata_mut()
            .insert("grpc-timeout", "10S".parse().expect("ascii"));
        request
            .extensions_mut()
            .insert(CallDeadline(Instant::now() + Duration::from_secs(1)));
        let left = caller_timeout(&request).expect("a deadline");
        assert!(left <= Duration::from_secs(1), "{left:?}");
        request
            .extensions_mut()
            .insert(CallDeadline(Instant::now() - Duration::from_secs(1)));
        assert_eq!(caller_timeout(&request), Some(Duration::ZERO), "passed");
    }
}
