//! `ProviderServer`: serves ToolProviderService (and grpc.health.v1) for a set of tools, and
//! keeps the service registered with the control plane: it registers, heartbeats its lease,
//! registers again by itself when the control plane says the lease is unknown (for example
//! after a restart), and deregisters on shutdown. With [`ProviderConfig::tls`] it serves over
//! TLS and registers an `https://` endpoint.

use crate::grpc::trace_headers::trace_context;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tonic_types::{ErrorDetails, StatusExt};

use super::tools::{RegisteredTools, ToolContext, ToolError, ToolInvocation};
use crate::envelope::{RequestMeta, TenantId, request_meta};
use crate::grpc::deadline::caller_timeout;
use crate::grpc::panics::panic_message;
use crate::json::{json_to_struct, json_to_value, struct_to_json};
use crate::pb;
use crate::pb::discovery_service_client::DiscoveryServiceClient;
use crate::pb::tool_provider_service_server::{ToolProviderService, ToolProviderServiceServer};

/// The ErrorInfo domain of errors raised by provider tools.
pub const PROVIDER_ERROR_DOMAIN: &str = "toolplane.provider";
/// The default lease TTL a provider asks for.
pub const DEFAULT_PROVIDER_TTL: Duration = Duration::from_secs(30);
/// How long a registration or heartbeat may wait on the control plane before it fails.
const CONTROL_PLANE_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// While a call waits, how long the connection to the control plane may be silent before it
/// is sent an HTTP/2 PING, and how long that PING may go unanswered before the connection is
/// closed.
const CONTROL_PLANE_PING_INTERVAL: Duration = Duration::from_secs(2);
const CONTROL_PLANE_PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait before registering again after a failed attempt, at most.
const MAX_REGISTER_BACKOFF: Duration = Duration::from_secs(5);

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
    /// Serve over TLS with this certificate (and, when it names a client CA, accept only
    /// callers with a certificate that CA signed); `None` serves plain text.
    pub tls: Option<ServerTlsConfig>,
    /// The control plane, e.g. `http://127.0.0.1:50051` (`https://` for one that serves TLS).
    pub control_plane: String,
    /// How an `https://` control plane is connected to; `None` checks its certificate against
    /// the public CAs and presents no client certificate.
    pub control_plane_tls: Option<ClientTlsConfig>,
    /// The tenant to register in.
    pub tenant: TenantId,
    /// The lease TTL to ask for.
    pub ttl: Duration,
    /// How often to heartbeat; defaults to a third of the TTL.
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
            control_plane: control_plane.to_owned(),
            control_plane_tls: None,
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
                    ..Default::default()
                })
                .collect(),
            ttl: self.config.ttl.try_into().ok(),
        }
    }

    /// Serves on `listener` and keeps the registration alive until `shutdown` completes; then
    /// deregisters and stops.
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
        let mut control_plane = Endpoint::from_shared(self.config.control_plane.clone())
            .map_err(|_| ProviderError::ControlPlane(self.config.control_plane.clone()))?
            .connect_timeout(Duration::from_secs(2))
            // A connection to a control plane whose host vanished without closing it is found
            // by an unanswered PING while a call waits on it, and closed (the channel dials
            // again); each call is bounded too, so the lease is renewed or registered again.
            .http2_keep_alive_interval(CONTROL_PLANE_PING_INTERVAL)
            .keep_alive_timeout(CONTROL_PLANE_PING_TIMEOUT)
            .timeout(CONTROL_PLANE_CALL_TIMEOUT);
        if control_plane.uri().scheme_str() == Some("https") {
            let tls = self
                .config
                .control_plane_tls
                .clone()
                .unwrap_or_else(|| ClientTlsConfig::new().with_webpki_roots());
            control_plane = control_plane.tls_config(tls)?;
        }
        let control_plane = control_plane.connect_lazy();
        self.health.set_serving(true).await;
        let registration = self.registration(&endpoint);
        let (stop_lease, lease_stopped) = watch::channel(false);
        let lease = tokio::spawn(keep_registered(
            DiscoveryServiceClient::new(control_plane),
            registration,
            self.config.tenant,
            self.config
                .heartbeat_interval
                .unwrap_or(self.config.ttl / 3),
            lease_stopped,
        ));
        tracing::info!(service = %self.config.service_name, %endpoint, tools = self.tools.iter().count(), "provider serving");
        let mut server = Server::builder();
        if let Some(tls) = self.config.tls.clone() {
            server = server.tls_config(tls)?;
        }
        let router = server
            .add_service(ToolProviderServiceServer::new(ProviderApi {
                tools: self.tools,
            }))
            .add_service(tonic_health::pb::health_server::HealthServer::new(
                tonic_health::server::HealthService::from_health_reporter(
                    self.health.reporter.clone(),
                ),
            ));
        let shutdown = async {
            shutdown.await;
            let _ = stop_lease.send(true);
        };
        let result = if self.config.tls.is_some() {
            // Not through `coalesce::incoming`: its writes are put together for HTTP/2 frames
            // written straight to it, and under TLS it would be written TLS records instead.
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        } else {
            router
                .serve_with_incoming_shutdown(crate::grpc::coalesce::incoming(listener), shutdown)
                .await
        };
        let _ = lease.await;
        result.map_err(ProviderError::from)
    }
}

fn meta(tenant: TenantId) -> Option<pb::Meta> {
    Some(request_meta(tenant, &uuid::Uuid::new_v4().to_string()))
}

/// Registers, heartbeats, registers again on NOT_FOUND, deregisters when told to stop.
async fn keep_registered(
    mut client: DiscoveryServiceClient<Channel>,
    registration: pb::ServiceRegistration,
    tenant: TenantId,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let service = registration.service_name.clone();
    let mut backoff = Duration::from_millis(100);
    let mut lease: Option<String> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        let Some(lease_id) = lease.clone() else {
            let request = pb::RegisterServiceRequest {
                meta: meta(tenant),
                registration: Some(registration.clone()),
            };
            match client.register_service(request).await {
                Ok(answer) => {
                    tracing::info!(%service, "registered with the control plane");
                    lease = Some(answer.into_inner().lease_id);
                    backoff = Duration::from_millis(100);
                }
                Err(status) => {
                    tracing::warn!(%service, code = ?status.code(), message = status.message(), "registration failed; trying again");
                    if wait_or_stop(&mut stop, backoff).await {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_REGISTER_BACKOFF);
                }
            }
            continue;
        };
        if wait_or_stop(&mut stop, interval).await {
            break;
        }
        let request = pb::HeartbeatRequest {
            meta: meta(tenant),
            service_name: service.clone(),
            lease_id,
        };
        match client.heartbeat(request).await {
            Ok(_) => {}
            Err(status) if status.code() == tonic::Code::NotFound => {
                tracing::warn!(%service, "the control plane no longer knows our lease; registering again");
                lease = None;
            }
            Err(status) => {
                tracing::warn!(%service, code = ?status.code(), message = status.message(), "heartbeat failed; will try again")
            }
        }
    }
    if let Some(lease_id) = lease {
        let request = pb::DeregisterServiceRequest {
            meta: meta(tenant),
            service_name: service.clone(),
            lease_id,
        };
        match tokio::time::timeout(Duration::from_secs(2), client.deregister_service(request)).await
        {
            Ok(Ok(_)) => tracing::info!(%service, "deregistered"),
            _ => tracing::warn!(%service, "could not deregister; the lease will expire"),
        }
    }
}

/// Waits `duration`; true when told to stop meanwhile.
async fn wait_or_stop(stop: &mut watch::Receiver<bool>, duration: Duration) -> bool {
    let stopped = tokio::select! {
        () = tokio::time::sleep(duration) => None,
        changed = stop.wait_for(|stopping| *stopping) => Some(changed.is_ok()),
    };
    stopped.unwrap_or_else(|| *stop.borrow())
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
        if let Some(error) = tool.validator.iter_errors(&input).next() {
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
