//! Server assembly: every service, reflection (v1 and v1alpha) and grpc.health.v1 on one
//! listener, the provider health checks, and a graceful shutdown.
//!
//! [`serve`] takes a bound listener and a shutdown future, so tests bind `127.0.0.1:0`. When
//! the shutdown future completes, health turns NOT_SERVING, streams are told to end, in-flight
//! calls get the grace period to finish, and then the server returns.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic::service::Routes;
use tower::Layer;

use tonic::codec::CompressionEncoding;

pub use super::server_options::{
    DEFAULT_DRAIN_GRACE, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_PROVIDER_HEALTH_INTERVAL, ServerOptions,
};

use super::agent::AgentApi;
use super::config_watch::Reloadable;
use super::connections::{RuledAccess, serve_connections};
use super::discovery::DiscoveryApi;
use super::discovery_wire::DiscoveryServer;
use super::health::HealthApi;
use super::invoke::InvokeApi;
use super::invoke_wire::InvokeServer;
use super::outgoing_tls::OutgoingTlsError;
use super::provider_client::{GrpcProviderCaller, run_health_checks};
use super::provider_tls::ProviderTls;
use super::reload_stats::ReloadStats;
use super::response_compression::ResponseCompressionService;
use super::restated::Restated;
use super::rpc_metering::RpcMeteringLayer;
use super::rpc_stats::{DescriptorError, RpcStats};
use super::server_tls::{ServedTls, ServerTlsError};
use super::serving::ServingState;
use super::std_health::StandardHealth;
use crate::access::LiveTenantAccess;
use crate::agent::builtin::BuiltinModel;
use crate::agent::model::{LlmProvider, ModelError};
use crate::agent::model_calls::ModelCalls;
use crate::agent::openai::{OpenAiClient, OpenAiConfig};
use crate::agent::runner::AgentRunner;
use crate::agent::store::{AgentFilesError, AgentStore};
use crate::invoke::caller::ByEndpointScheme;
use crate::invoke::health::ProviderHealthBook;
use crate::invoke::heavy::{self, HeavyWork};
use crate::invoke::limits::RateLimits;
use crate::invoke::records::{RecordError, RecordLog};
use crate::invoke::{Invoker, InvokerOptions};
use crate::mcp::client::McpCaller;
use crate::mcp::import::LiveImports;
use crate::mcp::{McpRefusals, McpSessions, McpTools};
use crate::metrics::MetricsSources;
use crate::otlp::OtlpError;
use crate::pb;
use crate::pb::agent_service_server::AgentServiceServer;
use crate::pb::health_service_server::HealthServiceServer;
use crate::registry::memory::MemoryStore;
use crate::registry::{Registry, RegistryStore};
use crate::spans::Spans;

/// How often idle rate-limit buckets are dropped.
const RATE_LIMIT_SHRINK_INTERVAL: Duration = Duration::from_secs(60);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection descriptors could not be loaded.
    #[error("reflection descriptors: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The invocation record log could not be opened.
    #[error(transparent)]
    Records(#[from] RecordError),
    /// The agents kept in `agents_path` could not be read.
    #[error(transparent)]
    Agents(#[from] AgentFilesError),
    /// The model client could not be built.
    #[error("model client: {0}")]
    Model(#[from] ModelError),
    /// The served methods could not be read from their descriptors.
    #[error("served methods: {0}")]
    Methods(#[from] DescriptorError),
    /// Spans cannot be exported as configured.
    #[error(transparent)]
    Spans(#[from] OtlpError),
    /// TLS to providers cannot be set up as configured.
    #[error(transparent)]
    ProviderTls(#[from] OutgoingTlsError),
    /// TLS cannot be served as configured.
    #[error(transparent)]
    ServerTls(#[from] ServerTlsError),
    /// Tenant access rules name certificate identities, but callers are not asked for client
    /// certificates.
    #[error("{}", crate::access::IDENTITIES_NEED_CERTIFICATES)]
    TenantAccessWithoutClientCertificates,
}

/// Reads and checks the TLS files `options` name (served and towards providers), as
/// [`serve`] does when it starts: a caller can report a bad file before it announces that it
/// serves.
pub fn check_tls_files(options: &ServerOptions) -> Result<(), ServeError> {
    ProviderTls::from_files(&options.provider_tls)?;
    if let Some(files) = &options.tls {
        ServedTls::from_files(files)?;
    }
    Ok(())
}

/// The tenant access rules `options` give (open ones, checking no call, where there are none,
/// so that rules added to the configuration file later are put in force); rules naming certificate
/// identities need client certificates asked for, or proxies that forward them, as without
/// one a caller has no identity.
fn ruled_access(options: &ServerOptions) -> Result<Arc<LiveTenantAccess>, ServeError> {
    let asks_for_certificates = options
        .tls
        .as_ref()
        .is_some_and(|files| files.client_ca_file.is_some());
    LiveTenantAccess::start(&options.tenant_access, asks_for_certificates)
        .map_err(|_| ServeError::TenantAccessWithoutClientCertificates)
}

/// The chat model agents use: the OpenAI-compatible client when configured (counting the
/// attempts it makes again in `calls`), else the built-in.
pub fn model_provider(
    config: Option<&OpenAiConfig>,
    calls: &Arc<ModelCalls>,
) -> Result<Arc<dyn LlmProvider>, ModelError> {
    Ok(match config {
        Some(config) => {
            Arc::new(OpenAiClient::new(config.clone())?.counting_retries_in(Arc::clone(calls)))
        }
        None => Arc::new(BuiltinModel),
    })
}

/// Serves every toolplane API on `listener` until `shutdown` completes, then drains.
pub async fn serve(
    listener: TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_with(listener, SideListeners::default(), options, shutdown).await
}

/// The listeners a server may have beside its gRPC port's, each served until it has drained.
#[derive(Debug, Default)]
pub struct SideListeners {
    /// Prometheus scrapes (`GET /metrics`, see [`crate::metrics`]).
    pub metrics: Option<TcpListener>,
    /// The MCP endpoint (`/mcp`, see [`crate::mcp`]).
    pub mcp: Option<TcpListener>,
}

/// As [`serve`], with the endpoints of `side` beside the gRPC port.
pub async fn serve_with(
    listener: TcpListener,
    side: SideListeners,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let metrics_listener = side.metrics;
    let served_tls = options
        .tls
        .as_ref()
        .map(ServedTls::from_files)
        .transpose()?;
    let provider_tls = ProviderTls::from_files(&options.provider_tls)?;
    let access = ruled_access(&options)?;
    let (spans, collector_tls) = match &options.otlp {
        Some(export) => {
            let exporting = Spans::to_otlp(export)?;
            tracing::info!(endpoint = %export.endpoint, protocol = %export.protocol, "spans exported");
            exporting
        }
        None => (Spans::off(), None),
    };
    let records = Arc::new(match &options.records_path {
        Some(path) => RecordLog::open(
            path,
            options.records_in_memory,
            options.records_rotate_bytes,
        )?,
        None => RecordLog::in_memory(options.records_in_memory),
    });
    let store: Arc<dyn RegistryStore> = MemoryStore::start_bounded(
        options.event_buffer,
        options.event_buffer_bytes,
        options.gone_services_remembered,
    );
    let registry = Registry::new(
        Arc::clone(&store),
        options.limits.clone(),
        options.validator_cache_size,
    )
    .with_answer_bound(super::page_bytes::ANSWER_BOUND);
    let serving = ServingState::new();
    let health = Arc::new(ProviderHealthBook::default());
    let heavy_work = HeavyWork::new(heavy::default_permits());
    let mcp_caller = McpCaller::for_imports(&options.mcp_imports, provider_tls.clone());
    let caller = Arc::new(ByEndpointScheme {
        grpc: Arc::new(
            GrpcProviderCaller::with_heavy_work(heavy_work.clone()).with_tls(provider_tls.clone()),
        ),
        mcp: Arc::new(mcp_caller.clone()),
    });
    let imports = LiveImports::start(&options.mcp_imports, &registry, &mcp_caller, &heavy_work);
    // Stopped when this function returns.
    let _imports = StopOnDrop(imports.clone());
    let reload_stats = Arc::new(ReloadStats::default());
    let limits = Arc::new(RateLimits::new(&options.rate_limits));
    super::config_watch::watch_configuration(
        &options,
        Reloadable {
            imports: imports.clone(),
            served_tls: served_tls.clone(),
            provider_tls,
            collector_tls,
            access: access.clone(),
            limits: Arc::clone(&limits),
        },
        &reload_stats,
        &serving,
    );
    let model_calls = Arc::<ModelCalls>::default();
    let model = model_provider(options.model.as_ref(), &model_calls)?;
    let invoker = Invoker::new(
        registry.clone(),
        caller.clone(),
        Arc::clone(&limits),
        Arc::clone(&health),
        records,
        InvokerOptions {
            max_timeout: options.max_invoke_timeout,
            heavy_work,
            spans: spans.clone(),
        },
    );
    let mut agents = AgentStore::new(
        options.max_conversation_messages,
        options.max_conversation_bytes,
        options.max_agents_per_tenant,
    );
    if let Some(directory) = &options.agents_path {
        agents = agents.kept_in(directory)?;
    }
    let agents = Arc::new(agents);
    let runner = AgentRunner::new(
        Arc::clone(&agents),
        registry.clone(),
        invoker.clone(),
        model,
    )
    .with_spans(spans.clone())
    .counting_model_calls_in(Arc::clone(&model_calls))
    .with_concurrent_tool_calls(options.max_concurrent_tool_calls)
    .with_message_bound(super::page_bytes::MESSAGE_BOUND);
    let mcp_sessions = side.mcp.is_some().then(McpSessions::default);
    let mcp_refusals = side.mcp.is_some().then(Arc::<McpRefusals>::default);
    // Calls are counted per RPC only when there is an endpoint to report them, or spans to
    // name after their methods.
    let rpc_stats = if metrics_listener.is_some() || spans.is_on() {
        Some(Arc::new(served_rpc_stats()?))
    } else {
        None
    };
    // Aborted, with its connections, when this function returns.
    let _metrics = metrics_listener
        .zip(rpc_stats.clone())
        .map(|(listener, rpcs)| {
            let sources = MetricsSources {
                records: Arc::clone(invoker.records()),
                store: Arc::clone(&store),
                health: Arc::clone(&health),
                serving: serving.clone(),
                rpcs,
                agents,
                model_calls,
                mcp_imports: imports.clone(),
                mcp_token_requests: mcp_caller.token_requests(),
                mcp_sessions: mcp_sessions.clone(),
                mcp_refusals: mcp_refusals.clone(),
                reloads: Arc::clone(&reload_stats),
            };
            AbortOnDrop(tokio::spawn(crate::metrics::http::serve(listener, sources)))
        });
    // Aborted, with its connections, when this function returns.
    let mcp_counts = mcp_sessions.zip(mcp_refusals);
    let _mcp = side
        .mcp
        .zip(mcp_counts)
        .map(|(listener, (sessions, refusals))| {
            let tools = McpTools::new(registry.clone(), invoker.clone());
            let settings = options.connection_settings();
            let transport = crate::mcp::McpTransport {
                tls: served_tls.clone(),
                keepalive_interval: settings.keepalive_interval,
                keepalive_timeout: settings.keepalive_timeout,
                max_connections: settings.max_connections,
            };
            let served = crate::mcp::http::serve(
                listener,
                tools,
                options.mcp.clone(),
                transport,
                Arc::clone(&access),
                sessions,
                refusals,
            );
            AbortOnDrop(tokio::spawn(served))
        });
    tokio::spawn(run_health_checks(
        store,
        caller,
        Arc::clone(&health),
        options.provider_health_interval,
        serving.subscribe(),
    ));
    tokio::spawn(shrink_rate_limits(limits, serving.clone()));

    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    // Requests compressed with gzip or deflate are accepted; responses are compressed as
    // `options.response_compression` decides per request (`super::response_compression`).
    macro_rules! compressing {
        ($server:expr) => {
            $server
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Deflate)
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Deflate)
        };
    }
    let discovery = DiscoveryServer::new(DiscoveryApi::new(
        registry.clone(),
        serving.clone(),
        Arc::clone(&health),
        invoker.heavy_work().clone(),
    ));
    let health_api = HealthServiceServer::new(HealthApi::new(
        registry.clone(),
        serving.clone(),
        Arc::clone(&health),
    ));
    let invoke = InvokeServer::new(InvokeApi::new(invoker));
    let agent = AgentServiceServer::new(AgentApi::new(runner));
    let standard_health = tonic_health::pb::health_server::HealthServer::new(StandardHealth::new(
        registry,
        serving.clone(),
        health,
    ));
    let routes = Routes::new(compressing!(discovery))
        .add_service(compressing!(health_api))
        .add_service(compressing!(invoke))
        .add_service(compressing!(agent))
        .add_service(compressing!(standard_health))
        .add_service(compressing!(reflection_v1))
        .add_service(compressing!(reflection_v1alpha))
        .prepare();
    let settings = options.connection_settings();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let routes = ResponseCompressionService::new(
        Restated::new(routes, &SERVED_SERVICES),
        options.response_compression,
    );
    let access = Some(RuledAccess {
        rules: access,
        counted_in: rpc_stats.clone(),
    });
    let service = RpcMeteringLayer::new(rpc_stats, spans.clone())
        .layer(super::panics::catch_panics().layer(routes));
    let stopped = async {
        let _ = stopped.await;
    };
    // One server per kind of connection, each compiled for its own (so plain text pays
    // nothing for TLS being possible).
    let mut server: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = match served_tls {
        Some(tls) => Box::pin(serve_connections(
            super::server_tls::incoming(listener, tls),
            service,
            settings,
            access,
            stopped,
        )),
        None => Box::pin(serve_connections(
            super::coalesce::incoming(listener),
            service,
            settings,
            access,
            stopped,
        )),
    };

    let ended_by_itself = tokio::select! {
        () = &mut server => true,
        () = shutdown => false,
    };
    if !ended_by_itself {
        tracing::info!(grace = ?options.drain_grace, "shutting down: health is NOT_SERVING, draining in-flight calls");
        serving.shut_down();
        let _ = stop.send(());
        if tokio::time::timeout(options.drain_grace, server)
            .await
            .is_err()
        {
            tracing::warn!("grace period over; closing the connections still open");
        }
    }
    imports.end().await;
    mcp_caller.close_all().await;
    spans.shut_down().await;
    Ok(())
}

/// The methods of every service [`serve`] serves, to count calls to (see
/// [`super::rpc_stats`]).
pub fn served_rpc_stats() -> Result<RpcStats, DescriptorError> {
    RpcStats::for_services(
        &[
            pb::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ],
        &SERVED_SERVICES,
    )
}

/// The reflection service's settings, for both of its versions. It lists the services
/// [`serve`] serves ([`SERVED_SERVICES`]), and no others: the descriptors also hold
/// `ToolProviderService`, which providers serve and toolplane does not, and which reflection
/// would otherwise list too. Every descriptor stays resolvable by name, so `grpcurl describe
/// toolplane.v1.ToolProviderService` still shows a provider's author the contract. Reflection
/// also describes google.rpc's error details (ErrorInfo, BadRequest, ...), which no toolplane
/// service names: grpcurl resolves an error's details through it, and prints them as JSON
/// instead of "google.rpc.ErrorInfo is not recognized" and base64.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    let builder = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        .include_reflection_service(false);
    SERVED_SERVICES
        .iter()
        .fold(builder, |builder, name| builder.with_service_name(*name))
}

/// The names of the services [`serve`] serves.
const SERVED_SERVICES: [&str; 7] = [
    <DiscoveryServer<DiscoveryApi> as NamedService>::NAME,
    <HealthServiceServer<HealthApi> as NamedService>::NAME,
    <InvokeServer<InvokeApi> as NamedService>::NAME,
    <AgentServiceServer<AgentApi> as NamedService>::NAME,
    <tonic_health::pb::health_server::HealthServer<StandardHealth> as NamedService>::NAME,
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stops the MCP imports when dropped.
struct StopOnDrop(LiveImports);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop_all();
    }
}

async fn shrink_rate_limits(limits: Arc<RateLimits>, serving: ServingState) {
    let mut stopping = serving.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(RATE_LIMIT_SHRINK_INTERVAL) => limits.shrink(),
            () = super::serving::shutting_down(&mut stopping) => return,
        }
    }
}
