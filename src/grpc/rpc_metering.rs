//! The layer that counts every call into [`RpcStats`]: started when the call reaches the
//! services, handled when its `grpc-status` is known.
//!
//! The code is read where the caller reads it: from the answer's headers when the call failed
//! before answering anything (tonic's trailers-only answer), else from the trailers that end
//! the answer's body. A call that ends with neither, because the caller went away or its
//! deadline passed before an answer began (the connection answers `DEADLINE_EXCEEDED` then,
//! `grpc::connections`), counts as `Canceled` or `DeadlineExceeded`, which is what its caller
//! saw. Handling time runs from the call reaching the services to that moment.
//!
//! With spans exported ([`crate::spans`]), each call also gets a server span, a child of the
//! caller's `traceparent`, ended with the same code (not the calls of `grpc.health.v1` and
//! reflection); the span's context is left in the request's extensions ([`CallTrace`]) for the
//! services to send on to providers.
//!
//! Without stats (no metrics endpoint and no spans configured) the layer passes calls through
//! untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http_body::Frame;
use tonic::Code;
use tower::{Layer, Service};

use super::deadline::CallDeadline;
use super::rpc_stats::RpcStats;
use super::trace_headers::{TRACEPARENT, TRACESTATE};
use crate::spans::{ExportedSpan, Spans, rpc_attributes};
use crate::trace_context::TraceContext;

/// Counts calls into the stats it holds, if any, and gives each a span when spans are on.
#[derive(Debug, Clone, Default)]
pub struct RpcMeteringLayer {
    stats: Option<Arc<RpcStats>>,
    spans: Spans,
}

impl RpcMeteringLayer {
    /// Counts into `stats` (`None` counts nothing) and starts a span per call in `spans`
    /// (which needs `stats` for the methods' names).
    pub fn new(stats: Option<Arc<RpcStats>>, spans: Spans) -> Self {
        Self { stats, spans }
    }
}

/// The trace context a call's services send on, its server span's, in the request's extensions
/// when spans are exported; without it the caller's headers are used.
#[derive(Debug, Clone)]
pub struct CallTrace(pub TraceContext);

impl<S> Layer<S> for RpcMeteringLayer {
    type Service = RpcMetering<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetering {
            inner,
            stats: self.stats.clone(),
            spans: self.spans.clone(),
        }
    }
}

/// The service [`RpcMeteringLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct RpcMetering<S> {
    inner: S,
    stats: Option<Arc<RpcStats>>,
    spans: Spans,
}

impl<S, RequestBody, AnswerBody> Service<http::Request<RequestBody>> for RpcMetering<S>
where
    S: Service<http::Request<RequestBody>, Response = http::Response<AnswerBody>>,
{
    type Response = http::Response<MeteredBody<AnswerBody>>;
    type Error = S::Error;
    type Future = MeteredCall<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<RequestBody>) -> Self::Future {
        let observer = self.stats.as_ref().map(|stats| {
            let method = stats.method_of(request.uri().path());
            stats.started(method);
            let span = self
                .spans
                .is_on()
                .then(|| server_span(&self.spans, stats, method, &request))
                .flatten();
            if let Some(span) = &span {
                request
                    .extensions_mut()
                    .insert(CallTrace(span.trace_context()));
            }
            CallObserver {
                span,
                stats: Arc::clone(stats),
                method,
                started: Instant::now(),
                deadline: request
                    .extensions()
                    .get::<CallDeadline>()
                    .map(|CallDeadline(at)| *at),
                counted: false,
            }
        });
        MeteredCall {
            answer: self.inner.call(request),
            observer,
        }
    }
}

/// The server span of a call to `method`, a child of the caller's trace context.
fn server_span<B>(
    spans: &Spans,
    stats: &RpcStats,
    method: usize,
    request: &http::Request<B>,
) -> Option<ExportedSpan> {
    let header = |name| request.headers().get(name).map(|value| value.as_bytes());
    let parent = TraceContext::from_headers(header(&TRACEPARENT), header(&TRACESTATE));
    let served = &stats.methods()[method];
    // Probes and tooling, not work: a kubelet's health probe every few seconds would bury
    // the calls in traces.
    if served.service == "grpc.health.v1.Health" || served.service.starts_with("grpc.reflection.") {
        return None;
    }
    spans.start(
        format!("{}/{}", served.service, served.method),
        opentelemetry::trace::SpanKind::Server,
        parent.as_ref(),
        rpc_attributes(&served.service, &served.method),
    )
}

/// One call being counted; counted as what its caller saw when dropped uncounted.
#[derive(Debug)]
struct CallObserver {
    span: Option<ExportedSpan>,
    stats: Arc<RpcStats>,
    method: usize,
    started: Instant,
    deadline: Option<Instant>,
    counted: bool,
}

impl CallObserver {
    fn handled(mut self, code: Code) {
        self.count(code);
    }

    fn count(&mut self, code: Code) {
        self.counted = true;
        if let Some(span) = self.span.take() {
            span.end(code as i32);
        }
        self.stats
            .handled(self.method, code, self.started.elapsed());
    }
}

impl Drop for CallObserver {
    fn drop(&mut self) {
        if !self.counted {
            let past_deadline = self.deadline.is_some_and(|at| Instant::now() >= at);
            self.count(if past_deadline {
                Code::DeadlineExceeded
            } else {
                Code::Cancelled
            });
        }
    }
}

/// The code a `grpc-status` header or trailer carries.
fn status_code(headers: &http::HeaderMap) -> Option<Code> {
    headers
        .get("grpc-status")
        .map(|value| Code::from_bytes(value.as_bytes()))
}

pin_project_lite::pin_project! {
    /// A call's answer being awaited.
    #[derive(Debug)]
    pub struct MeteredCall<F> {
        #[pin]
        answer: F,
        observer: Option<CallObserver>,
    }
}

impl<F, AnswerBody, E> Future for MeteredCall<F>
where
    F: Future<Output = Result<http::Response<AnswerBody>, E>>,
{
    type Output = Result<http::Response<MeteredBody<AnswerBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let answer = ready!(this.answer.poll(cx))?;
        let observer = this.observer.take().and_then(|observer| {
            match status_code(answer.headers()) {
                Some(code) => {
                    observer.handled(code);
                    None
                }
                // Counted when the trailers pass.
                None => Some(observer),
            }
        });
        Poll::Ready(Ok(answer.map(|inner| MeteredBody { inner, observer })))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, counted when its trailers pass.
    #[derive(Debug)]
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        observer: Option<CallObserver>,
    }
}

impl<B: http_body::Body> http_body::Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if this.observer.is_some() {
            let code = match &frame {
                Some(Ok(frame)) => frame.trailers_ref().map(|trailers| {
                    // Trailers without a status end the call as gRPC clients read it.
                    status_code(trailers).unwrap_or(Code::Unknown)
                }),
                // The stream is reset; gRPC clients read that as INTERNAL.
                Some(Err(_)) => Some(Code::Internal),
                // Ended with no trailers: no status, which gRPC clients read as UNKNOWN.
                None => Some(Code::Unknown),
            };
            if let Some(code) = code
                && let Some(observer) = this.observer.take()
            {
                observer.handled(code);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "rpc_metering_tests.rs"]
mod tests;
