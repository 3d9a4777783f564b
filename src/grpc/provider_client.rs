//! Calling providers over gRPC: one lazily connected HTTP/2 connection per endpoint
//! (`unary_client`; TLS for `https://` endpoints, see `provider_tls`), pooled and reused
//! (never dialled per call), and the periodic grpc.health.v1 checks of every endpoint.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_types::StatusExt;

use super::invoke_wire::{CallToolRequestWire, CallToolResponseWire};
use super::provider_tls::ProviderTls;
use super::raw_message::{RawMessage, value_bytes_to_json};
use super::stream_errors::was_not_sent;
use super::trace_headers::trace_headers;
use super::unary_client::UnaryChannel;
use crate::envelope::RequestMeta;
use crate::invoke::caller::{
    FailureKind, ProviderCall, ProviderCaller, ProviderFailure, ProviderReply, WireForm,
};
use crate::invoke::health::ProviderHealthBook;
use crate::invoke::heavy::{HeavyWork, is_large};
use crate::json::json_to_struct;
use crate::registry::RegistryStore;

/// How long connecting to a provider may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Channels unused this long are dropped from the pool.
const CHANNEL_IDLE: Duration = Duration::from_secs(600);
/// The longest a single health check may take.
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// The most health checks under way at once. A round used to start every endpoint's check at
/// once: with thousands of endpoints (and right after a restart, a connection, perhaps a TLS
/// handshake, to make for each) the burst competes with the calls being served for the cores,
/// and a check is timed from its start, so one waiting for a core could run into its timeout
/// and mark a healthy provider unhealthy (reasoned, not reproduced here). An endpoint that does
/// not answer holds its place up to twice [`HEALTH_CHECK_TIMEOUT`].
const MAX_HEALTH_CHECKS_AT_ONCE: usize = 128;

/// The provider method toolplane calls.
pub const CALL_TOOL: &str = "/toolplane.v1.ToolProviderService/CallTool";
/// The standard health check.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// Calls providers through pooled channels.
#[derive(Debug, Clone)]
pub struct GrpcProviderCaller {
    channels: moka::sync::Cache<String, Arc<UnaryChannel>>,
    /// Where a large output is read into JSON; `None` reads every output in place.
    heavy: Option<HeavyWork>,
    /// How `https://` endpoints are connected to.
    tls: ProviderTls,
}

impl Default for GrpcProviderCaller {
    fn default() -> Self {
        Self {
            channels: moka::sync::Cache::builder()
                .time_to_idle(CHANNEL_IDLE)
                .max_capacity(10_000)
                .build(),
            heavy: None,
            tls: ProviderTls::default(),
        }
    }
}

impl GrpcProviderCaller {
    /// A caller that reads large outputs into JSON in `heavy`, off the serving threads.
    pub fn with_heavy_work(heavy: HeavyWork) -> Self {
        Self {
            heavy: Some(heavy),
            ..Self::default()
        }
    }

    /// This caller, connecting to `https://` endpoints as `tls` says.
    pub fn with_tls(self, tls: ProviderTls) -> Self {
        Self { tls, ..self }
    }
}

/// Whether a provider's ErrorInfo `reason` is one toolplane passes on (to the caller's
/// ErrorInfo, the call's record and the log): as google.rpc's ErrorInfo defines it, at most 63
/// characters of UPPER_SNAKE_CASE (`[A-Z][A-Z0-9_]+[A-Z0-9]`). Another reason is replaced by
/// the one for its status code: a provider's reason is written into every record of a failed
/// call, and one of 200 KB made each record that large, and the caller's trailers too large to
/// read (RESOURCE_EXHAUSTED "h2 protocol error" instead of the failure).
fn is_error_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes[0].is_ascii_uppercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
        && bytes[bytes.len() - 1] != b'_'
}

/// The failure a provider's error status reports; its ErrorInfo reason if it has a valid one
/// (see [`is_error_reason`]), else the reason for its code.
fn failure(status: &tonic::Status) -> ProviderFailure {
    let kind = match status.code() {
        tonic::Code::Unavailable => FailureKind::Unavailable,
        tonic::Code::ResourceExhausted => FailureKind::ResourceExhausted,
        tonic::Code::DeadlineExceeded => FailureKind::DeadlineExceeded,
        // CANCELLED is tonic's answer when the grpc-timeout we sent runs out, and a provider's
        // when it cuts the call's stream off; the engine tells the two apart by its deadline
        // (see `FailureKind::may_be_the_deadline`).
        other => FailureKind::Other(other as i32),
    };
    let reason = status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .filter(|reason| is_error_reason(reason))
        .unwrap_or_else(|| {
            match kind {
                FailureKind::Unavailable => "TOOL_UNAVAILABLE",
                FailureKind::ResourceExhausted => "RATE_LIMIT_PROVIDER",
                FailureKind::DeadlineExceeded => "TOOL_TIMEOUT",
                FailureKind::Other(_) => "TOOL_FAILED",
            }
            .to_owned()
        });
    ProviderFailure {
        kind,
        reason,
        message: status.message().to_owned(),
        unsent: was_not_sent(status),
        detail: None,
    }
}

impl GrpcProviderCaller {
    /// The pooled channel of an endpoint, created (unconnected) on first use.
    pub fn channel(&self, endpoint: &str) -> Result<Arc<UnaryChannel>, ProviderFailure> {
        if let Some(channel) = self.channels.get(endpoint) {
            return Ok(channel);
        }
        self.channels
            .try_get_with(endpoint.to_owned(), || {
                UnaryChannel::with_tls(endpoint, CONNECT_TIMEOUT, &self.tls).map(Arc::new)
            })
            .map_err(|error| ProviderFailure {
                kind: FailureKind::Unavailable,
                reason: "TOOL_UNAVAILABLE".to_owned(),
                message: format!("bad provider endpoint {endpoint}: {error}"),
                unsent: true,
                detail: None,
            })
    }

    /// Checks one endpoint's grpc.health.v1 (service ""): `Err(why)` when it is not serving.
    /// A provider without a health service (UNIMPLEMENTED) counts as healthy.
    pub async fn check_health(&self, endpoint: &str) -> Result<(), String> {
        let channel = self.channel(endpoint).map_err(|failure| failure.message)?;
        let request = HealthCheckRequest {
            service: String::new(),
        };
        let check = channel.call::<_, HealthCheckResponse>(
            HEALTH_CHECK,
            &request,
            Some(HEALTH_CHECK_TIMEOUT),
        );
        match tokio::time::timeout(HEALTH_CHECK_TIMEOUT, check).await {
            // A dead connection (its peer gone without closing it) is closed, so the next
            // check and call dial again rather than wait on it.
            Err(_) if !channel.check_connection(HEALTH_CHECK_TIMEOUT).await => Err(
                "health check timed out and the connection did not answer a PING (closed; the \
                 next check dials again)"
                    .to_owned(),
            ),
            Err(_) => Err("health check timed out".to_owned()),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => Ok(()),
            Ok(Err(status)) => Err(format!(
                "health check failed: {}: {}",
                status.code(),
                status.message()
            )),
            Ok(Ok(answer)) if answer.status == ServingStatus::Serving as i32 => Ok(()),
            Ok(Ok(answer)) => Err(format!(
                "provider reports {:?}",
                ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown)
            )),
        }
    }
}

impl ProviderCaller for GrpcProviderCaller {
    fn call(
        &self,
        call: ProviderCall,
    ) -> BoxFuture<'static, Result<ProviderReply, ProviderFailure>> {
        let channel = self.channel(&call.endpoint);
        let heavy = self.heavy.clone();
        Box::pin(async move {
            let channel = channel?;
            let meta = RequestMeta::new(call.tenant, Some(&call.correlation_id)).response();
            let input = call
                .input_wire
                .and_then(RawMessage::from_wire)
                .or_else(|| json_to_struct(&call.input).map(|input| RawMessage::encode(&input)));
            let request = CallToolRequestWire {
                meta: Some(meta),
                tool_name: call.tool,
                input,
                idempotency_key: call.idempotency_key.unwrap_or_default(),
                attempt: call.attempt,
            };
            // The provider is told its deadline; enforcing it is the engine's own timer.
            let headers = call.trace.as_ref().map(trace_headers).unwrap_or_default();
            let response: CallToolResponseWire = channel
                .call_with_headers(CALL_TOOL, &request, Some(call.timeout), headers)
                .await
                .map_err(|status| failure(&status))?;
            // The output is read as JSON (to check and hash it) and passed on as it came.
            let raw = response.output.map(Arc::new);
            let output_bytes = raw.as_ref().map_or(0, |raw| raw.as_bytes().len());
            let to_read = raw.clone();
            let read = move || match to_read {
                Some(raw) => value_bytes_to_json(raw.as_bytes()).map_err(|error| ProviderFailure {
                    kind: FailureKind::Other(tonic::Code::Internal as i32),
                    reason: "TOOL_BAD_OUTPUT".to_owned(),
                    message: format!("provider output has no JSON form: {error}"),
                    unsent: false,
                    detail: None,
                }),
                None => Ok(serde_json::Value::Null),
            };
            let output = match heavy.filter(|_| is_large(output_bytes)) {
                // Bounded by the engine's timer around the whole call.
                Some(heavy) => heavy
                    .run(call.tenant, None, read)
                    .await
                    .expect("no deadline"),
                None => read(),
            }?;
            Ok(ProviderReply {
                output,
                output_wire: raw.map(|raw| WireForm(raw)),
                output_bytes,
                warnings: response.warnings,
            })
        })
    }

    fn check_health(&self, endpoint: &str) -> BoxFuture<'static, Result<(), String>> {
        let (caller, endpoint) = (self.clone(), endpoint.to_owned());
        Box::pin(async move { GrpcProviderCaller::check_health(&caller, &endpoint).await })
    }
}

/// Checks every registered endpoint each `interval`, the first time one `interval` after the
/// start, until `serving` turns false. A round checks at most `MAX_HEALTH_CHECKS_AT_ONCE` (128)
/// endpoints at once and writes each answer as it comes, so a slow endpoint delays no other's;
/// the next round starts an `interval` after the last began, or when it ends if it took longer.
///
/// The first round waits a whole interval rather than running at once. A round at once
/// would check nothing (the store starts empty) unless this task were scheduled late on a busy
/// machine, when it would check a service registered in the meantime within moments of its
/// registration: when a new service is first checked would depend on the machine's load.
pub async fn run_health_checks(
    store: Arc<dyn RegistryStore>,
    caller: Arc<dyn ProviderCaller>,
    book: Arc<ProviderHealthBook>,
    interval: Duration,
    mut serving: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = super::serving::shutting_down(&mut serving) => return,
        }
        let endpoints = store.endpoints();
        book.retain(&endpoints);
        // Each check is a task of its own, so that one that panics fails its endpoint's
        // check instead of ending the loop, and with it every endpoint's checks.
        let mut checks = futures_util::stream::iter(endpoints)
            .map(|endpoint| {
                let check = caller.check_health(&endpoint);
                async move { (tokio::spawn(check).await, endpoint) }
            })
            .buffer_unordered(MAX_HEALTH_CHECKS_AT_ONCE);
        while let Some((result, endpoint)) = checks.next().await {
            match result {
                Ok(Ok(())) => book.mark_healthy(&endpoint),
                Ok(Err(why)) => book.mark_unhealthy(&endpoint, why),
                Err(failed) => {
                    book.mark_unhealthy(&endpoint, format!("health check failed: {failed}"))
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "provider_client_tests.rs"]
mod tests;
