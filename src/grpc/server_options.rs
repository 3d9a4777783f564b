//! What the server is built from ([`ServerOptions`]) and the defaults of its connections.

use std::path::PathBuf;
use std::time::Duration;

use super::call_scheduling::CallScheduling;
use super::connections::ConnectionSettings;
use super::outgoing_tls::OutgoingTlsFiles;
use super::response_compression::ResponseCompression;
use super::server_tls::ServerTlsFiles;
use super::tls_reload::DEFAULT_TLS_RELOAD_INTERVAL;
use crate::access::{TenantAccess, TenantAccessSource};
use crate::agent::openai::OpenAiConfig;
use crate::agent::store::{
    DEFAULT_MAX_AGENTS_PER_TENANT, DEFAULT_MAX_CONVERSATION_BYTES, DEFAULT_MAX_MESSAGES,
};
use crate::config::ConfigSource;
use crate::invoke::DEFAULT_MAX_TIMEOUT;
use crate::invoke::limits::RateLimitConfig;
use crate::invoke::records::{DEFAULT_RING_CAPACITY, DEFAULT_ROTATE_BYTES};
use crate::mcp::McpEndpoint;
use crate::mcp::import::{McpImport, McpImportsSource};
use crate::otlp::OtlpExport;
use crate::registry::RegistrationLimits;
use crate::registry::gone::DEFAULT_GONE_SERVICES_REMEMBERED;
use crate::registry::memory::{DEFAULT_EVENT_BUFFER, DEFAULT_EVENT_BUFFER_BYTES};

/// The default time in-flight calls get to finish after shutdown begins.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(10);
/// The default interval of provider health checks.
pub const DEFAULT_PROVIDER_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
/// Default most streams one caller connection may have open at once: above what gRPC clients
/// open on one connection in practice (the benchmark opens 100 watches per connection), while
/// one connection can no longer open streams without end.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 1000;
/// The default time a caller's connection may be silent before it is pinged.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// The default time a ping may go unanswered before the connection is closed.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// What the server is built from.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The limits registrations are held to.
    pub limits: RegistrationLimits,
    /// How many events a watcher may fall behind before it is ended.
    pub event_buffer: usize,
    /// How many bytes of changed services a tenant's watchers may fall behind by before the
    /// oldest changes are let go (a watcher still to read one is ended); 0 sets no bound.
    pub event_buffer_bytes: u64,
    /// How many gone services' names are remembered, across tenants, so that grpc.health.v1
    /// answers SERVICE_UNKNOWN for them rather than NOT_FOUND (see `registry::gone`).
    pub gone_services_remembered: usize,
    /// How many compiled validators the registry keeps (see `registry::validators`).
    pub validator_cache_size: u64,
    /// How long in-flight calls may take to finish after shutdown begins.
    pub drain_grace: Duration,
    /// The JSON-lines invocation record log; `None` keeps records in memory only.
    pub records_path: Option<PathBuf>,
    /// How many recent records are kept in memory, where listing and lookups start (older ones
    /// are read from the record files).
    pub records_in_memory: usize,
    /// The size in bytes at which the record log file is rotated; 0 never rotates it.
    pub records_rotate_bytes: u64,
    /// Rate limits of invocations.
    pub rate_limits: RateLimitConfig,
    /// The longest any tool call may take.
    pub max_invoke_timeout: Duration,
    /// How often each provider endpoint's health is checked (above zero: tokio's ticker takes
    /// no zero period).
    pub provider_health_interval: Duration,
    /// How long a caller's connection may be silent before the server sends it an HTTP/2
    /// PING; zero sends none.
    pub keepalive_interval: Duration,
    /// How long that PING may go unanswered before the connection (and every stream on it,
    /// watches included) is closed: a peer that vanished without closing its connection.
    pub keepalive_timeout: Duration,
    /// The most streams (calls and watches) one caller connection may have open at once; a
    /// gRPC client queues its further calls until one ends; 0 sets no limit.
    pub max_concurrent_streams: u32,
    /// The most caller connections each of the gRPC and MCP ports serves at once; at it, new
    /// ones wait to be accepted until one closes (keeping file descriptors for providers,
    /// records and agents); 0 sets no limit.
    pub max_connections: usize,
    /// Where a connection's calls run (see `grpc::call_scheduling`).
    pub call_scheduling: CallScheduling,
    /// The chat model agents use; `None` uses the deterministic built-in model.
    pub model: Option<OpenAiConfig>,
    /// The most messages one agent's conversation keeps.
    pub max_conversation_messages: usize,
    /// Most bytes of messages (content and metadata) an agent's conversation keeps; the oldest
    /// turns go first; 0 sets no bound.
    pub max_conversation_bytes: usize,
    /// The most agents one tenant may have at once; 0 sets no limit.
    pub max_agents_per_tenant: usize,
    /// The most tool calls of one model answer an agent runs at once.
    pub max_concurrent_tool_calls: usize,
    /// The directory agents are kept in, one file each; `None` keeps them in memory only (see
    /// [`crate::agent::store::AgentFiles`]).
    pub agents_path: Option<PathBuf>,
    /// The OTLP collector spans are exported to, and how; `None` exports none (see
    /// [`crate::spans`], [`crate::otlp`]).
    pub otlp: Option<OtlpExport>,
    /// How `https://` providers are connected to: the CA certificates their certificates
    /// are checked against and the client certificate toolplane presents (see
    /// [`super::provider_tls`]).
    pub provider_tls: OutgoingTlsFiles,
    /// Serve TLS with these files; `None` serves plain text (see [`super::server_tls`]).
    pub tls: Option<ServerTlsFiles>,
    /// How often the TLS files (served, towards providers and the collector) are read again,
    /// to take renewed certificates (see [`super::tls_reload`]); zero reads them only at the
    /// start.
    pub tls_reload_interval: Duration,
    /// Which responses are compressed (see [`super::response_compression`]).
    pub response_compression: ResponseCompression,
    /// Who may reach the MCP endpoint, when one is served (see [`crate::mcp::http`]).
    pub mcp: McpEndpoint,
    /// The MCP servers whose tools are imported as services (see [`crate::mcp::import`]).
    pub mcp_imports: Vec<McpImport>,
    /// Which tenants callers may act for, by their client certificates or bearer tokens (see
    /// [`crate::access`]); no rules lets every caller name any tenant. Rules naming certificate
    /// identities need client certificates asked for (`tls` with a `client_ca_file`).
    pub tenant_access: TenantAccess,
    /// Where `tenant_access` is read again from when it changes (the configuration file), to
    /// be put in force without a restart (see [`crate::access::LiveTenantAccess`]); `None`
    /// keeps the rules given (their token files are still read again).
    pub tenant_access_source: Option<TenantAccessSource>,
    /// Where `mcp_imports` are read again from when they change (the configuration file), to
    /// be put in force without a restart: imports added, removed or changed, and their
    /// `approved_tools` (see [`crate::mcp::live_imports`]); `None` keeps those given.
    pub mcp_imports_source: Option<McpImportsSource>,
    /// Where `rate_limits` are read again from when they change (the configuration file), to
    /// be put in force without a restart (see
    /// [`crate::invoke::limits::RateLimits::reconfigure`]); `None` keeps those given.
    pub rate_limits_source: Option<ConfigSource<RateLimitConfig>>,
}

impl ServerOptions {
    /// How the server's connections are served, by these options.
    pub fn connection_settings(&self) -> ConnectionSettings {
        ConnectionSettings {
            scheduling: self.call_scheduling,
            keepalive_interval: Some(self.keepalive_interval).filter(|i| !i.is_zero()),
            keepalive_timeout: self.keepalive_timeout,
            max_concurrent_streams: Some(self.max_concurrent_streams).filter(|max| *max != 0),
            max_connections: Some(self.max_connections).filter(|max| *max != 0),
        }
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            limits: RegistrationLimits::default(),
            event_buffer: DEFAULT_EVENT_BUFFER,
            event_buffer_bytes: DEFAULT_EVENT_BUFFER_BYTES,
            gone_services_remembered: DEFAULT_GONE_SERVICES_REMEMBERED,
            validator_cache_size: crate::registry::validators::DEFAULT_VALIDATOR_CACHE_SIZE,
            drain_grace: DEFAULT_DRAIN_GRACE,
            records_path: None,
            records_in_memory: DEFAULT_RING_CAPACITY,
            records_rotate_bytes: DEFAULT_ROTATE_BYTES,
            rate_limits: RateLimitConfig::default(),
            max_invoke_timeout: DEFAULT_MAX_TIMEOUT,
            provider_health_interval: DEFAULT_PROVIDER_HEALTH_INTERVAL,
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_connections: 0,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            call_scheduling: CallScheduling::default(),
            model: None,
            max_conversation_messages: DEFAULT_MAX_MESSAGES,
            max_conversation_bytes: DEFAULT_MAX_CONVERSATION_BYTES,
            max_agents_per_tenant: DEFAULT_MAX_AGENTS_PER_TENANT,
            max_concurrent_tool_calls: crate::agent::runner::DEFAULT_CONCURRENT_TOOL_CALLS,
            agents_path: None,
            otlp: None,
            provider_tls: OutgoingTlsFiles::default(),
            tls: None,
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            response_compression: ResponseCompression::default(),
            mcp: McpEndpoint::loopback(),
            mcp_imports: Vec::new(),
            tenant_access: TenantAccess::default(),
            tenant_access_source: None,
            mcp_imports_source: None,
            rate_limits_source: None,
        }
    }
}
