//! Spans toolplane exports over OTLP (gRPC or HTTP, plain text to an `http://` endpoint, TLS
//! to an `https://` one; see [`crate::otlp`]) when `otlp_endpoint` is set: one server span for
//! every gRPC call it serves, a child of the caller's `traceparent` when one came (else a new
//! trace), and one client span for every attempt at a provider's `CallTool`, a child of the
//! call's span. The provider is sent the attempt's span as its parent, so a trace shows the
//! caller, toolplane, each attempt and the provider's own spans in order. Attributes follow
//! OpenTelemetry's RPC conventions (`rpc.system`, `rpc.service`, `rpc.method`,
//! `rpc.grpc.status_code`). An agent's calls to its chat model are client spans too, described
//! by the generative-AI conventions (`gen_ai.*`).
//!
//! Without an endpoint nothing is built and nothing is recorded: the caller's trace context is
//! passed on to the provider unchanged ([`crate::trace_context`]).
//!
//! Sampling is OpenTelemetry's default (parent-based, always on): a caller's decision is
//! followed, calls without one are sampled. The `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`
//! and `OTEL_TRACES_SAMPLER` variables of the OpenTelemetry SDK apply; the service name is
//! `toolplane` unless they name another.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::otlp::{CollectorTls, OtlpError, OtlpExport};
use crate::trace_context::TraceContext;

/// The providers' gRPC service, as its client spans name it.
const PROVIDER_SERVICE: &str = "toolplane.v1.ToolProviderService";
/// The name of a provider attempt's span.
const PROVIDER_CALL: &str = "toolplane.v1.ToolProviderService/CallTool";
/// How long shutting down may wait for the last spans to be sent.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spans go: nowhere, or an OTLP collector. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Spans {
    exporting: Option<Arc<Exporting>>,
}

#[derive(Debug)]
struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Spans {
    /// No spans.
    pub fn off() -> Self {
        Self::default()
    }

    /// Spans exported in batches as `export` says (see [`crate::otlp`]), and for an
    /// `https://` collector the TLS the exporter uses, to install renewed files in. Must be
    /// called inside a tokio runtime, which then runs the exporting.
    pub fn to_otlp(export: &OtlpExport) -> Result<(Self, Option<CollectorTls>), OtlpError> {
        let (exporter, tls) = crate::otlp::span_exporter(export)?;
        let processor = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource())
            .build();
        let tracer = provider.tracer("toolplane");
        let spans = Self {
            exporting: Some(Arc::new(Exporting { provider, tracer })),
        };
        Ok((spans, tls))
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.exporting.is_some()
    }

    /// Starts a span named `name`, a child of `parent` when given; `None` when spans are off.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&TraceContext>,
        attributes: Vec<KeyValue>,
    ) -> Option<ExportedSpan> {
        let exporting = self.exporting.as_ref()?;
        let parent = parent
            .and_then(remote_span_context)
            .map_or_else(Context::new, |remote| {
                Context::new().with_remote_span_context(remote)
            });
        let span = exporting
            .tracer
            .span_builder(name)
            .with_kind(kind.clone())
            .with_attributes(attributes)
            .start_with_context(&exporting.tracer, &parent);
        Some(ExportedSpan { span, kind })
    }

    /// The client span of attempt `attempt` (1, 2, ...) at calling `tool` of `service` on the
    /// provider at `endpoint`, a child of the invocation's `parent`.
    pub fn provider_attempt(
        &self,
        parent: Option<&TraceContext>,
        service: &str,
        tool: &str,
        endpoint: &str,
        attempt: u32,
    ) -> Option<ExportedSpan> {
        if !self.is_on() {
            return None;
        }
        let mut attributes = rpc_attributes(PROVIDER_SERVICE, "CallTool");
        attributes.extend([
            KeyValue::new("toolplane.service_name", service.to_owned()),
            KeyValue::new("toolplane.tool_name", tool.to_owned()),
            KeyValue::new("toolplane.attempt", i64::from(attempt)),
            KeyValue::new("toolplane.provider_endpoint", endpoint.to_owned()),
        ]);
        self.start(PROVIDER_CALL, SpanKind::Client, parent, attributes)
    }

    /// The client span of one call to an agent's chat model (`model`: the one asked for, `None`
    /// for the provider's default), named and described as OpenTelemetry's generative-AI
    /// conventions say: `chat MODEL`, `gen_ai.operation.name`, `gen_ai.request.model`.
    pub fn model_call(
        &self,
        parent: Option<&TraceContext>,
        model: Option<&str>,
    ) -> Option<ExportedSpan> {
        if !self.is_on() {
            return None;
        }
        let mut attributes = vec![KeyValue::new("gen_ai.operation.name", "chat")];
        let name = match model {
            Some(model) => {
                attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
                format!("chat {model}")
            }
            None => "chat".to_owned(),
        };
        self.start(name, SpanKind::Client, parent, attributes)
    }

    /// Sends the spans not yet sent and stops exporting; waits at most a few seconds.
    pub async fn shut_down(&self) {
        let Some(exporting) = self.exporting.clone() else {
            return;
        };
        // The provider's shutdown blocks until the exporting task, which runs on this
        // runtime, has sent what is queued: off the runtime's threads. That processor does not
        // bound the wait (a collector that takes connections and never answers would hold it
        // for an export timeout per batch), so the wait is bounded here; the exporting task
        // goes with the runtime.
        let shutdown = tokio::task::spawn_blocking(move || exporting.provider.shutdown());
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, shutdown).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "the last spans may not have been exported");
            }
            Ok(Err(error)) => tracing::warn!(%error, "span exporter shutdown did not finish"),
            Err(_) => tracing::warn!(
                after = ?SHUTDOWN_TIMEOUT,
                "the collector did not take the last spans in time; they are dropped"
            ),
        }
    }
}

/// The resource spans are exported with: what the SDK reads from the environment
/// (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), named `toolplane` where neither names the
/// service (the SDK would say `unknown_service`).
fn resource() -> opentelemetry_sdk::Resource {
    let detected = opentelemetry_sdk::Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        opentelemetry_sdk::Resource::builder()
            .with_service_name("toolplane")
            .build()
    }
}

/// The parent a caller's trace context names, as OpenTelemetry holds it.
fn remote_span_context(trace: &TraceContext) -> Option<SpanContext> {
    // `traceparent` is valid (TraceContext checks it): version-traceid-parentid-flags.
    let mut fields = trace.traceparent().split('-').skip(1);
    let trace_id = TraceId::from_hex(fields.next()?).ok()?;
    let span_id = SpanId::from_hex(fields.next()?).ok()?;
    let flags = u8::from_str_radix(fields.next()?, 16).ok()?;
    let state = trace
        .tracestate()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

/// What a model call answered, for its span.
#[derive(Debug, Clone, Copy)]
pub struct ModelAnswer<'a> {
    /// The model that answered.
    pub model: &'a str,
    /// Tokens of the prompt and of the completion, when the provider counted them.
    pub tokens: Option<(u32, u32)>,
    /// How many times the model server was asked (more than 1 when attempts were made again).
    pub attempts: u32,
}

/// A span being recorded; ended when [`ExportedSpan::end`] is called or when dropped.
#[derive(Debug)]
pub struct ExportedSpan {
    span: opentelemetry_sdk::trace::Span,
    kind: SpanKind,
}

impl ExportedSpan {
    /// The context to send on as this span's children's parent.
    pub fn trace_context(&self) -> TraceContext {
        let context = self.span.span_context();
        // Two of these per call: hex-encoded directly rather than through `fmt`, and not
        // parsed back (the SDK's ids are valid by construction).
        let mut traceparent = String::with_capacity(55);
        traceparent.push_str("00-");
        traceparent.push_str(&hex::encode(context.trace_id().to_bytes()));
        traceparent.push('-');
        traceparent.push_str(&hex::encode(context.span_id().to_bytes()));
        traceparent.push('-');
        traceparent.push_str(&hex::encode([context.trace_flags().to_u8()]));
        let state = context.trace_state().header();
        TraceContext::of_own_span(traceparent, Some(state).filter(|state| !state.is_empty()))
    }

    /// Ends a [`Spans::model_call`] span with the model that answered, the tokens it counted
    /// (prompt, completion) and the attempts it took (`toolplane.model.attempts`), or with the
    /// error and the attempts made before it.
    pub fn end_model_call(mut self, outcome: Result<ModelAnswer<'_>, (&str, u32)>) {
        match outcome {
            Ok(answer) => {
                self.span.set_attributes([
                    KeyValue::new("gen_ai.response.model", answer.model.to_owned()),
                    KeyValue::new("toolplane.model.attempts", i64::from(answer.attempts)),
                ]);
                if let Some((input, output)) = answer.tokens {
                    self.span.set_attributes([
                        KeyValue::new("gen_ai.usage.input_tokens", i64::from(input)),
                        KeyValue::new("gen_ai.usage.output_tokens", i64::from(output)),
                    ]);
                }
            }
            Err((error, attempts)) => {
                self.span.set_attributes([
                    KeyValue::new("error.type", "model_error"),
                    KeyValue::new("toolplane.model.attempts", i64::from(attempts)),
                ]);
                self.span.set_status(Status::error(error.to_owned()));
            }
        }
        self.span.end();
    }

    /// Ends the span with the gRPC code (by number) its call ended with. A server span is an
    /// error for the codes OpenTelemetry's conventions name (UNKNOWN, DEADLINE_EXCEEDED,
    /// UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS: the server's fault), a client span for
    /// any code but OK.
    pub fn end(mut self, code: i32) {
        self.span
            .set_attribute(KeyValue::new("rpc.grpc.status_code", i64::from(code)));
        let is_error = match self.kind {
            SpanKind::Server => matches!(code, 2 | 4 | 12 | 13 | 14 | 15),
            _ => code != 0,
        };
        if is_error {
            self.span
                .set_status(Status::error(format!("gRPC status code {code}")));
        }
        self.span.end();
    }
}

/// The attributes OpenTelemetry's RPC conventions give a gRPC span.
pub fn rpc_attributes(service: &str, method: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", service.to_owned()),
        KeyValue::new("rpc.method", method.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_context_is_read_as_a_remote_sampled_parent() {
        let trace = TraceContext::from_headers(
            Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some(b"congo=t61rcWkgMzE"),
        )
        .expect("valid");
        let parent = remote_span_context(&trace).expect("parsed");
        assert_eq!(
            parent.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(parent.span_id().to_string(), "00f067aa0ba902b7");
        assert!(parent.is_sampled() && parent.is_remote());
        assert_eq!(parent.trace_state().header(), "congo=t61rcWkgMzE");
    }
}
