//! `ProviderServer`: serves ToolProviderService (and grpc.health.v1) for a set of tools, and
//! keeps the service registered with the control plane: it registers, heartbeats its lease,
//! registers again by itself when the control plane says the lease is unknown (for example
//! after a restart), and deregisters on shutdown. A heartbeat that fails is tried again soon
//! (after 100 ms, doubling up to the heartbeat interval) rather than a whole interval later, so
//! a control plane that is briefly unreachable does not cost the lease. With [`ProviderConfig::tls`] it serves over
//! TLS and registers an `https://` endpoint; TLS files renewed on disk are used without a
//! restart (see `control_plane`). A connection that does not open within 10 s is closed
//! (`grpc::opening_deadline`).

use crate::grpc::trace_headers::trace_context;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tonic_types::{ErrorDetails, StatusExt};

use super::control_plane::{ControlPlane, reload_tls_files};
use super::lease::keep_registered;
use super::tools::{RegisteredTools, ToolContext, ToolError, ToolInvocation};
use crate::client::{BearerToken, ClientTlsError, ClientTlsFiles};
use crate::envelope::{RequestMeta, TenantId};
use crate::grpc::deadline::caller_timeout;
use crate::grpc::opening_deadline::opened_in_time;
use crate::grpc::panics::panic_message;
use crate::grpc::server_tls::{ServedTls, ServerTlsError, ServerTlsFiles, TlsSettingNames};
use crate::grpc::tls_reload::DEFAULT_TLS_RELOAD_INTERVAL;
use crate::json::{json_to_struct, json_to_value, struct_to_json};
use crate::pb;
use crate::pb::tool_provider_service_server::{ToolProviderService, ToolProviderServiceServer};

/// The ErrorInfo domain of errors raised by provider tools.
pub const PROVIDER_ERROR_DOMAIN: &str = "toolplane.provider";
/// The default lease TTL a provider asks for.
pub const DEFAULT_PROVIDER_TTL: Duration = Duration::from_secs(30);
/// What errors call the files of [`ProviderConfig::tls`] unless
/// [`ProviderConfig::tls_setting_names`] says otherwise.
pub const PROVIDER_TLS_SETTINGS: TlsSettingNames = TlsSettingNames {
    cert: "tls.cert_file",
    key: "tls.key_file",
    client_ca: "tls.client_ca_file",
};

/// How a provider registers with the control plane.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// The service name (a DNS label).
    pub service_name: String,
    /// The service version (semver).
    pub service_version: String,
    /// The endpoint to register; empty means `http://` (`https://` with `tls`) + the bound
    /// listener address.
    pub advertised_endpoint: String,
    /// Serve over TLS with these files (and, when they name a client CA, accept only callers
    /// with a certificate that CA signed); `None` serves plain text.
    pub tls: Option<ServerTlsFiles>,
    /// What errors about the files of `tls` call them (a binary names its own flags).
    pub tls_setting_names: TlsSettingNames,
    /// The control plane, e.g. `http://127.0.0.1:50051` (`https://` for one that serves TLS).
    pub control_plane: String,
    /// How an `https://` control plane is connected to; empty checks its certificate against
    /// the public CAs and presents no client certificate. Files with an `http://` control
    /// plane are an error.
    pub control_plane_tls: ClientTlsFiles,
    /// A bearer token sent on registrations, heartbeats and deregistrations, for a control
    /// plane whose `[[tenant_access]]` grants tenants to tokens.
    pub control_plane_token: Option<BearerToken>,
    /// A file holding that token instead (its first line that is not blank: a mounted
    /// Secret), read again every `tls_reload_interval` and when the process is asked to
    /// (SIGHUP, where it listens for it), by the next call, so a rotated token is sent without
    /// a restart. Not with `control_plane_token`.
    pub control_plane_token_file: Option<PathBuf>,
    /// How often the TLS files (`tls`, `control_plane_tls`) are read again, so renewed
    /// certificates are used without a restart; zero reads them only at the start (and when
    /// the process asks: [`crate::grpc::hangups::read_again_on_sighup`]).
    pub tls_reload_interval: Duration,
    /// Which replica of the service this is (for example its pod name), so replicas hold
    /// leases side by side; empty registers the service's unnamed instance.
    pub instance_id: String,
    /// The tenant to register in.
    pub tenant: TenantId,
    /// The lease TTL to ask for.
    pub ttl: Duration,
    /// How often to heartbeat; defaults to a third of the TTL. Above zero and shorter than
    /// the TTL (else [`ProviderServer::serve`] answers [`ProviderError::Lease`]).
    pub heartbeat_interval: Option<Duration>,
}

impl ProviderConfig {
    /// A configuration with the default TTL and heartbeat.
    pub fn new(service_name: &str, service_version: &str, control_plane: &str) -> Self {
        Self {
            service_name: service_name.to_owned(),
            service_version: service_version.to_owned(),
            advertised_endpoint: String::new(),
            tls: None,
            tls_setting_names: PROVIDER_TLS_SETTINGS,
            control_plane: control_plane.to_owned(),
            control_plane_tls: ClientTlsFiles::default(),
            control_plane_token: None,
            control_plane_token_file: None,
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            instance_id: String::new(),
            tenant: TenantId::default(),
            ttl: DEFAULT_PROVIDER_TTL,
            heartbeat_interval: None,
        }
    }
}

/// Why a provider stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The gRPC server failed.
    #[error("provider transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The control plane endpoint is not a valid URI.
    #[error("invalid control plane endpoint {0:?}")]
    ControlPlane(String),
    /// The listener has no address.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// The files of [`ProviderConfig::tls`] cannot be served.
    #[error(transparent)]
    Tls(#[from] ServerTlsError),
    /// The files of [`ProviderConfig::control_plane_tls`] cannot be used, or do not fit the
    /// control plane's address.
    #[error("control plane TLS: {0}")]
    ControlPlaneTls(#[from] ClientTlsError),
    /// The bearer token for the control plane cannot be read, or is given twice.
    #[error("control plane token: {0}")]
    ControlPlaneToken(String),
    /// The TTL and heartbeat interval cannot keep a lease: a heartbeat of zero (a TTL under 3
    /// ns, or one set so) would be sent without pause, and one not shorter than the TTL would
    /// let the lease lapse before it.
    #[error("lease: {0}")]
    Lease(String),
    /// The control plane refused the registration as not valid (INVALID_ARGUMENT; a limit of
    /// the control plane's the registration is past, for instance): it would be refused again
    /// however often it were sent, so the provider stopped.
    #[error("the control plane refused the registration: {0}")]
    RegistrationRefused(String),
}

/// Switches what the provider's grpc.health.v1 reports.
#[derive(Clone)]
pub struct ProviderHealth {
    reporter: HealthReporter,
}

impl std::fmt::Debug for ProviderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderHealth")
    }
}

impl ProviderHealth {
    /// Reports SERVING (true) or NOT_SERVING (false) for the provider as a whole ("").
    pub async fn set_serving(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status("", status).await;
        self.reporter
            .set_service_status("toolplane.v1.ToolProviderService", status)
            .await;
    }
}

/// A provider: its tools, served and kept registered.
#[derive(Debug)]
pub struct ProviderServer {
    tools: RegisteredTools,
    config: ProviderConfig,
    health: ProviderHealth,
}

impl ProviderServer {
    /// A provider of `tools` registering as `config` says.
    pub fn new(tools: RegisteredTools, config: ProviderConfig) -> Self {
        Self {
            tools,
            config,
            health: ProviderHealth {
                reporter: HealthReporter::new(),
            },
        }
    }

    /// The switch of the provider's own health.
    pub fn health(&self) -> ProviderHealth {
        self.health.clone()
    }

    /// The registration this provider sends.
    pub fn registration(&self, endpoint: &str) -> pb::ServiceRegistration {
        pb::ServiceRegistration {
            service_name: self.config.service_name.clone(),
            service_version: self.config.service_version.clone(),
            endpoint: endpoint.to_owned(),
            tools: self
                .tools
                .iter()
                .map(|tool| pb::ToolRegistration {
                    tool_name: tool.descriptor.name.clone(),
                    description: tool.descriptor.description.clone(),
                    tool_schema: json_to_struct(&tool.descriptor.input_schema),
                    output_schema: tool.descriptor.returns.as_ref().and_then(json_to_struct),
                    capabilities: tool
                        .descriptor
                        .capabilities
                        .iter()
                        .map(|c| crate::grpc::convert::capability_to_pb(*c) as i32)
                        .collect(),
                    timeout_ms: tool.descriptor.timeout_ms,
                    domains: tool.descriptor.domains.clone(),
                    categories: tool.descriptor.categories.clone(),
                    annotations: crate::grpc::convert::annotations_to_pb(
                        &tool.descriptor.annotations,
                    ),
                    ..Default::default()
                })
                .collect(),
            ttl: self.config.ttl.try_into().ok(),
            instance_id: self.config.instance_id.clone(),
        }
    }

    /// Serves on `listener` and keeps the registration alive until `shutdown` completes.
    /// Then it drains: it deregisters while still answering, so the control plane stops
    /// sending it calls before it stops taking them, and then stops once the calls under way
    /// have been answered. (It goes on reporting SERVING meanwhile: a control plane that saw
    /// NOT_SERVING would fail the calls it still sends instead of letting them be answered.)
    /// A registration the control plane refuses as not valid stops it at once, answering
    /// [`ProviderError::RegistrationRefused`]; other failures to register are tried again.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ProviderError> {
        let address = listener.local_addr()?;
        let scheme = if self.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoint = if self.config.advertised_endpoint.is_empty() {
            format!("{scheme}://{address}")
        } else {
            self.config.advertised_endpoint.clone()
        };
        let served_tls = match &self.config.tls {
            Some(files) => Some(ServedTls::from_files_named(
                files,
                self.config.tls_setting_names,
            )?),
            None => None,
        };
        let control_plane = ControlPlane::new(&self.config)?;
        let (serving, serving_changes) = watch::channel(true);
        reload_tls_files(
            &self.config,
            served_tls.clone(),
            &control_plane,
            &serving_changes,
        );
        self.health.set_serving(true).await;
        let registration = self.registration(&endpoint);
        let heartbeat_interval = heartbeat_interval(&self.config)?;
        let (deregistered, mut deregistration) = tokio::sync::oneshot::channel::<()>();
        let tenant = self.config.tenant;
        let lease = tokio::spawn(async move {
            let kept = keep_registered(
                control_plane,
                registration,
                tenant,
                heartbeat_interval,
                serving_changes,
            )
            .await;
            let _ = deregistered.send(());
            kept
        });
        tracing::info!(service = %self.config.service_name, %endpoint, tools = self.tools.iter().count(), "provider serving");
        let router = Server::builder()
            .add_service(ToolProviderServiceServer::new(ProviderApi {
                tools: self.tools,
            }))
            .add_service(tonic_health::pb::health_server::HealthServer::new(
                tonic_health::server::HealthService::from_health_reporter(
                    self.health.reporter.clone(),
                ),
            ));
        let shutdown = async move {
            tokio::select! {
                () = shutdown => {
                    let _ = serving.send(false);
                    // Answering stops only once the control plane no longer lists this
                    // provider (or deregistering failed): until then it may still be sent
                    // calls.
                    let _ = deregistration.await;
                }
                // The lease ended before any shutdown: the registration was refused, and the
                // control plane never lists this provider.
                _ = &mut deregistration => {}
            }
        };
        let result = if let Some(tls) = served_tls {
            let incoming = opened_in_time(crate::grpc::server_tls::incoming(listener, tls));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        } else {
            router
                .serve_with_incoming_shutdown(
                    opened_in_time(crate::grpc::coalesce::incoming(listener)),
                    shutdown,
                )
                .await
        };
        if let Ok(Err(refused)) = lease.await {
            return Err(ProviderError::RegistrationRefused(refused.message));
        }
        result.map_err(ProviderError::from)
    }
}

/// How often `config`'s lease is heartbeated: its `heartbeat_interval`, or a third of its TTL;
/// above zero and shorter than the TTL, a TTL a registration can carry.
fn heartbeat_interval(config: &ProviderConfig) -> Result<Duration, ProviderError> {
    let interval = config.heartbeat_interval.unwrap_or(config.ttl / 3);
    let shown = humantime::format_duration;
    if prost_types::Duration::try_from(config.ttl).is_err() {
        // Sent as no TTL at all, it was granted the control plane's default (30 s) while the
        // heartbeats waited a third of it: the lease lapsed, never renewed.
        return Err(ProviderError::Lease(format!(
            "the ttl ({}) is longer than a registration can carry",
            shown(config.ttl)
        )));
    }
    if interval.is_zero() {
        return Err(ProviderError::Lease(format!(
            "the heartbeat interval must be above 0 (ttl {})",
            shown(config.ttl)
        )));
    }
    if interval >= config.ttl {
        return Err(ProviderError::Lease(format!(
            "the heartbeat interval ({}) must be shorter than the ttl ({}), or the lease lapses \
             between heartbeats",
            shown(interval),
            shown(config.ttl)
        )));
    }
    Ok(interval)
}

/// A tool error as a gRPC status with ErrorInfo.
pub fn tool_error_status(tool: &str, error: &ToolError) -> Status {
    status_with_info(error.grpc_code(), tool, error)
}

fn status_with_info(code: tonic::Code, tool: &str, error: &ToolError) -> Status {
    let metadata: std::collections::HashMap<String, String> =
        [("tool_name".to_owned(), tool.to_owned())]
            .into_iter()
            .collect();
    let details = ErrorDetails::with_error_info(&error.code, PROVIDER_ERROR_DOMAIN, metadata);
    Status::with_error_details(code, &error.message, details)
}

/// The answer to a call whose handler panicked: INTERNAL, reason `TOOL_FAILED`. The panic's
/// message goes to this process's log only; it may name what the caller should not see.
fn handler_panicked(tool: &str, panic: &(dyn std::any::Any + Send)) -> Status {
    tracing::error!(
        tool,
        panic = panic_message(panic),
        "a tool's handler panicked; answered INTERNAL"
    );
    let error = ToolError::failed(format!(
        "the handler of tool {tool} panicked (the provider's log has the details)"
    ));
    status_with_info(tonic::Code::Internal, tool, &error)
}

#[derive(Debug)]
struct ProviderApi {
    tools: RegisteredTools,
}

#[tonic::async_trait]
impl ToolProviderService for ProviderApi {
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let deadline = caller_timeout(&request).map(|timeout| Instant::now() + timeout);
        let trace = trace_context(request.metadata());
        let request = request.into_inner();
        let meta = RequestMeta::from_pb(request.meta.as_ref())?;
        let tool_name = request.tool_name;
        let Some(tool) = self.tools.get(&tool_name) else {
            return Err(tool_error_status(
                &tool_name,
                &ToolError::new(
                    "RESOURCE_NOT_FOUND",
                    format!("this provider has no tool {tool_name}"),
                ),
            ));
        };
        let input = match request.input {
            Some(input) => struct_to_json(&input).map_err(|error| {
                tool_error_status(&tool_name, &ToolError::invalid_input(error.to_string()))
            })?,
            None => serde_json::Value::Object(serde_json::Map::new()),
        };
        // `validate` stops at the first error; `iter_errors` finds every one before yielding
        // any (`registry::validate::first_error`).
        if let Err(error) = tool.validator.validate(&input) {
            let message = format!(
                "input does not match the schema at {}: {}",
                error.instance_path(),
                crate::registry::validate::violation_message(&error)
            );
            return Err(tool_error_status(
                &tool_name,
                &ToolError::invalid_input(message),
            ));
        }
        // Cancelled when this future is dropped: the caller went away or its deadline passed.
        let cancellation = CancellationToken::new();
        let _cancel_on_drop = cancellation.clone().drop_guard();
        let context = ToolContext::new(meta.tenant, &meta.correlation_id, cancellation)
            .with_details(
                Some(request.idempotency_key).filter(|key| !key.is_empty()),
                request.attempt.max(1),
                deadline,
                trace,
            );
        let invocation = ToolInvocation {
            tool_name: tool_name.clone(),
            input,
            context,
        };
        // A handler that panics (a bug in the tool) fails its call with INTERNAL instead of
        // cutting the stream off.
        let output = match AssertUnwindSafe(async { (tool.handler)(invocation).await })
            .catch_unwind()
            .await
        {
            Ok(result) => result.map_err(|error| tool_error_status(&tool_name, &error))?,
            Err(panic) => return Err(handler_panicked(&tool_name, panic.as_ref())),
        };
        Ok(Response::new(pb::CallToolResponse {
            meta: Some(meta.response()),
            output: Some(json_to_value(&output.output)),
            warnings: output.warnings,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heartbeat interval is a third of the TTL unless set; zero, or not shorter than the
    /// TTL, is refused before anything is served.
    #[test]
    fn a_heartbeat_that_cannot_keep_the_lease_is_refused() {
        let config = |ttl: u64, heartbeat: Option<u64>| ProviderConfig {
            ttl: Duration::from_secs(ttl),
            heartbeat_interval: heartbeat.map(Duration::from_secs),
            ..ProviderConfig::new("svc", "1.0.0", "http://127.0.0.1:1")
        };
        let interval = heartbeat_interval(&config(30, None)).expect("a third");
        assert_eq!(interval, Duration::from_secs(10));
        let set = heartbeat_interval(&config(30, Some(29))).expect("shorter");
        assert_eq!(set, Duration::from_secs(29));
        for (ttl, heartbeat, said) in [
            (30, Some(60), "must be shorter than the ttl (30s)"),
            (30, Some(30), "must be shorter than the ttl (30s)"),
            (30, Some(0), "must be above 0"),
            (0, None, "must be above 0"),
            (u64::MAX, Some(1), "longer than a registration can carry"),
        ] {
            let error = heartbeat_interval(&config(ttl, heartbeat)).expect_err("refused");
            assert!(matches!(&error, ProviderError::Lease(_)), "{error}");
            assert!(error.to_string().contains(said), "{error}");
        }
    }
}
