//! The W3C trace context headers (`traceparent`, `tracestate`) of a gRPC call: read from a
//! call that arrives, written on a call toolplane makes (see [`crate::trace_context`]).

use http::{HeaderName, HeaderValue};
use tonic::metadata::MetadataMap;

use super::rpc_metering::CallTrace;
use crate::trace_context::TraceContext;

/// The `traceparent` header.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The `tracestate` header.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The trace context a call arrived with, if it carried a valid one.
pub fn trace_context(metadata: &MetadataMap) -> Option<TraceContext> {
    let header = |name: &str| metadata.get(name).map(|value| value.as_bytes());
    TraceContext::from_headers(header("traceparent"), header("tracestate"))
}

/// The trace context a served call sends on to providers: its server span's when spans are
/// exported (left by `grpc::rpc_metering`), else the one the caller sent.
pub fn call_trace<T>(request: &tonic::Request<T>) -> Option<TraceContext> {
    match request.extensions().get::<CallTrace>() {
        Some(CallTrace(trace)) => Some(trace.clone()),
        None => trace_context(request.metadata()),
    }
}

/// The headers that pass `trace` on.
pub fn trace_headers(trace: &TraceContext) -> Vec<(HeaderName, HeaderValue)> {
    [
        (TRACEPARENT, Some(trace.traceparent())),
        (TRACESTATE, trace.tracestate()),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name, HeaderValue::from_str(value?).ok()?)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_read_from_headers_is_written_back_the_same() {
        let mut metadata = MetadataMap::new();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        metadata.insert("traceparent", traceparent.parse().expect("ascii"));
        metadata.insert("tracestate", "congo=t61rcWkgMzE".parse().expect("ascii"));
        let trace = trace_context(&metadata).expect("valid");
        let written = trace_headers(&trace);
        assert_eq!(
            written,
            [
                (TRACEPARENT, HeaderValue::from_static(traceparent)),
                (TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE")),
            ]
        );
        assert_eq!(trace_context(&MetadataMap::new()), None);
    }
}
