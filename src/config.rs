//! Server configuration, layered as seed 000 does: built-in defaults, then the file
//! `toolplane.toml` (or the one `--config`/`TOOLPLANE_CONFIG` names), then `TOOLPLANE_*`
//! environment variables, then command-line flags.
//!
//! Every field of [`ServerConfig`] can be set in the file under its own name and in the
//! environment as `TOOLPLANE_` + the name in upper case, e.g. `default_ttl = "30s"` or
//! `TOOLPLANE_DEFAULT_TTL=30s`. Durations are written as `500ms`, `30s`, `5m`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{ForwardedIdentityHeader, TenantAccess, TenantAccessRule};
use crate::agent::openai::MaxTokensField;
use crate::agent::store::{
    DEFAULT_MAX_AGENTS_PER_TENANT, DEFAULT_MAX_CONVERSATION_BYTES, DEFAULT_MAX_MESSAGES,
};
use crate::grpc::call_scheduling::CallScheduling;
use crate::grpc::response_compression::ResponseCompression;
use crate::grpc::server::{
    DEFAULT_DRAIN_GRACE, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_PROVIDER_HEALTH_INTERVAL,
};
use crate::grpc::tls_reload::{DEFAULT_TLS_RELOAD_INTERVAL, content_digest};
use crate::invoke::DEFAULT_MAX_TIMEOUT;
use crate::invoke::limits::Bucket;
use crate::invoke::records::{DEFAULT_RING_CAPACITY, DEFAULT_ROTATE_BYTES};
use crate::mcp::import::{McpImport, McpImportConfig};
use crate::otlp::OtlpProtocol;
use crate::registry::gone::DEFAULT_GONE_SERVICES_REMEMBERED;
use crate::registry::memory::{DEFAULT_EVENT_BUFFER, DEFAULT_EVENT_BUFFER_BYTES};
use crate::registry::quota::{DEFAULT_MAX_TOOL_BYTES_PER_TENANT, DEFAULT_MAX_TOOLS_PER_TENANT};
use crate::registry::validate;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// The config file read from the working directory when no other is named.
pub const DEFAULT_CONFIG_FILE: &str = "toolplane.toml";
/// The default invocations per second per (tenant, service).
pub const DEFAULT_RATE_LIMIT_PER_SECOND: u32 = 1000;
/// The default burst per (tenant, service).
pub const DEFAULT_RATE_LIMIT_BURST: u32 = 2000;
/// The default bound on calls in flight at once per (tenant, service).
pub const DEFAULT_MAX_IN_FLIGHT_PER_SERVICE: usize = 1000;
/// The default model name asked of an OpenAI-compatible server.
pub const DEFAULT_MODEL_NAME: &str = "gpt-4o-mini";
/// The default time one model call may take.
pub const DEFAULT_MODEL_TIMEOUT: Duration = Duration::from_secs(120);
/// The prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "TOOLPLANE_";

/// Everything `toolplane serve` can be configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The address to listen on.
    #[serde(deserialize_with = "endpoints::deserialize_listen_address")]
    pub listen: SocketAddr,
    /// The certificate chain (PEM) to serve TLS with; empty serves plain text. Set with
    /// `tls_key_file`.
    pub tls_cert_file: String,
    /// The private key (PEM) of `tls_cert_file`.
    pub tls_key_file: String,
    /// CA certificates (PEM): with TLS served, only callers presenting a certificate one of
    /// them signed get a connection (mutual TLS); empty asks callers for none.
    pub tls_client_ca_file: String,
    /// How often the TLS files (served, towards providers and towards the OTLP collector) are
    /// read again, so renewed certificates are used for new connections without a restart;
    /// `0s` reads them only at the start (and on SIGHUP, as any interval does).
    #[serde(with = "crate::config_duration")]
    pub tls_reload_interval: Duration,
    /// Which responses are compressed: `mirror` (as the request was), `gzip` (whenever the
    /// caller accepts gzip) or `off`.
    pub response_compression: ResponseCompression,
    /// The address Prometheus metrics are served on (`GET /metrics`, HTTP/1.1); empty serves
    /// none.
    pub metrics_listen: String,
    /// The address the MCP endpoint is served on (Streamable HTTP at `/mcp`); empty serves
    /// none.
    pub mcp_listen: String,
    /// The `Host` header values (hosts, or `host:port`) MCP requests may carry, comma-separated;
    /// `*` accepts any. Others are refused, against DNS rebinding from a browser.
    pub mcp_allowed_hosts: String,
    /// The most MCP sessions held at once (a client of the 2025-era protocols opens one and
    /// keeps it until it ends it or leaves it idle for 5 minutes); one more is refused 503.
    /// 0 sets no limit.
    pub mcp_max_sessions: usize,
    /// The most MCP sessions held at once that one tenant opened (the `toolplane-tenant-id` of
    /// their `initialize`); one more is refused 429. 0 sets no limit.
    pub mcp_max_sessions_per_tenant: usize,
    /// MCP servers whose tools are imported as services (file only), as `[[mcp_imports]]`
    /// tables with `service`, `url` or `command` (with `env` and `pass_env`), `tenant` (0),
    /// `refresh_interval` (60s), `bearer_token_env`, `bearer_token_file` or
    /// `oauth_client_credentials`, and `approved_tools`; read again from the
    /// file when it changes (every `tls_reload_interval`), and put in force without a restart.
    pub mcp_imports: Vec<McpImportConfig>,
    /// [`Self::mcp_imports`], checked when the configuration was loaded (their tokens and
    /// `pass_env` variables read then, once).
    #[serde(skip)]
    checked_mcp_imports: Vec<McpImport>,
    /// Which tenants callers may act for, by the URI or DNS names of their client certificates
    /// or the bearer tokens they send (file only), as `[[tenant_access]]` tables with
    /// `identity` (needs `tls_client_ca_file` or `forwarded_client_cert_proxies`), `token_env`
    /// or `token_file`, and `tenants` (or `all_tenants =
    /// true`); none lets every caller name any tenant. Read again when the file changes.
    pub tenant_access: Vec<TenantAccessRule>,
    /// The proxies (IP addresses or networks, comma-separated) that terminate TLS in front of
    /// toolplane and name their callers in a header (`forwarded_client_cert_header`), as a
    /// mesh sidecar does: on connections from them, `tenant_access` identities are read from
    /// that header. Empty believes the header from no one. Read again when the file changes.
    pub forwarded_client_cert_proxies: String,
    /// The header those proxies name their callers in: `x-forwarded-client-cert` (Envoy's, so
    /// Istio's: the caller certificate's URI and DNS names) or `l5d-client-id` (Linkerd's: the
    /// caller's mesh identity). Read again when the file changes.
    pub forwarded_client_cert_header: ForwardedIdentityHeader,
    /// [`Self::tenant_access`], checked when the configuration was loaded.
    #[serde(skip)]
    checked_tenant_access: TenantAccess,
    /// The file the configuration was read from, if any, and the sha256 of its content then:
    /// `tenant_access` and the `forwarded_client_cert_*` settings are read from it again when
    /// it changes.
    #[serde(skip)]
    file: Option<(PathBuf, [u8; 32])>,
    /// What was set that no setting reads: `TOOLPLANE_*` variables of no setting (a
    /// misspelling, most likely), as warnings naming them.
    #[serde(skip)]
    unread_variables: Vec<String>,
    /// The OTLP collector spans are exported to (`http://host:4317` over gRPC,
    /// `http://host:4318` over HTTP, or `https://` for TLS); empty exports none.
    pub otlp_endpoint: String,
    /// The OTLP protocol: `grpc` or `http/protobuf`.
    pub otlp_protocol: OtlpProtocol,
    /// CA certificates (PEM) an `https://` collector's certificate is checked against; empty
    /// checks it against the public CAs.
    pub otlp_ca_file: String,
    /// The certificate chain (PEM) toolplane presents to an `https://` collector that asks
    /// for a client certificate (mutual TLS); empty presents none. Set with
    /// `otlp_client_key_file`.
    pub otlp_client_cert_file: String,
    /// The private key (PEM) of `otlp_client_cert_file`.
    pub otlp_client_key_file: String,
    /// CA certificates (PEM) the certificates of providers at `https://` endpoints are
    /// checked against; empty checks them against the public CAs.
    pub provider_ca_file: String,
    /// The certificate chain (PEM) toolplane presents to `https://` providers that ask for a
    /// client certificate (mutual TLS); empty presents none. Set with
    /// `provider_client_key_file`.
    pub provider_client_cert_file: String,
    /// The private key (PEM) of `provider_client_cert_file`.
    pub provider_client_key_file: String,
    /// Lease TTL granted when a registration asks for none.
    #[serde(with = "crate::config_duration")]
    pub default_ttl: Duration,
    /// Shortest lease TTL a registration may ask for.
    #[serde(with = "crate::config_duration")]
    pub min_ttl: Duration,
    /// Longest lease TTL a registration may ask for.
    #[serde(with = "crate::config_duration")]
    pub max_ttl: Duration,
    /// Most tools in one registration.
    pub max_tools_per_service: usize,
    /// Longest tool description in bytes.
    pub max_description_bytes: usize,
    /// Largest JSON Schema in bytes.
    pub max_schema_bytes: usize,
    /// Deepest nesting of objects and arrays in a JSON Schema.
    pub max_schema_depth: usize,
    /// Most services one tenant may have registered at once; 0 sets no limit.
    pub max_services_per_tenant: usize,
    /// Most tools one tenant may have registered at once, across its services; 0 sets no
    /// limit.
    pub max_tools_per_tenant: u64,
    /// Most bytes of tool definitions (names, descriptions and schema text) one tenant may
    /// have registered at once; 0 sets no limit.
    pub max_tool_bytes_per_tenant: u64,
    /// Most live instances (replicas registered with instance ids) of one service; 0 sets
    /// no limit.
    pub max_instances_per_service: u64,
    /// Threads serving requests; 0 starts one per available CPU (tokio's default, which
    /// honours cgroup CPU limits).
    pub worker_threads: usize,
    /// How many compiled input (and as many output) schema validators are kept for the tools
    /// being called; a tool called after its validator was evicted compiles it again.
    pub validator_cache_size: u64,
    /// How many change events a watcher may fall behind before it is ended.
    pub watch_event_buffer: usize,
    /// How many bytes of changed services a tenant's watchers may fall behind by; 0: no bound.
    pub watch_event_buffer_bytes: u64,
    /// How many names of deregistered or expired services are remembered, across tenants, so
    /// that grpc.health.v1 `Check` answers SERVICE_UNKNOWN for them rather than NOT_FOUND; the
    /// name that went longest ago is forgotten first; 0 remembers none.
    pub gone_services_remembered: usize,
    /// How long in-flight calls may take to finish after SIGTERM/SIGINT.
    #[serde(with = "crate::config_duration")]
    pub drain_grace: Duration,
    /// Log format: `text` or `json`.
    pub log_format: LogFormat,
    /// The JSON-lines invocation record log; empty keeps records in memory only.
    pub records_path: String,
    /// How many recent invocation records are kept in memory, where listing and lookups start
    /// (older ones are read from the record files).
    pub records_in_memory: usize,
    /// The size in bytes at which the record log file is moved to `PATH.<first sequence>` and
    /// the chain goes on in a new file; 0 never rotates it.
    pub records_rotate_bytes: u64,
    /// Invocations per second allowed per (tenant, service); 0 turns the limit off. This and
    /// the other call limits below are read again from the file when it changes (every
    /// `tls_reload_interval`).
    pub rate_limit_per_second: u32,
    /// Invocations per (tenant, service) allowed at once.
    pub rate_limit_burst: u32,
    /// Limits of single tools, keyed `service/tool` (file only), e.g.
    /// `[tool_rate_limits."structs/structs_calculate_proof_of_work"]` with `per_second` and `burst`.
    pub tool_rate_limits: std::collections::BTreeMap<String, Bucket>,
    /// The most invocations in flight at once per (tenant, service); past it a call is refused
    /// at once. 0 sets no bound.
    pub max_in_flight_per_service: usize,
    /// The longest any tool call may take.
    #[serde(with = "crate::config_duration")]
    pub max_invoke_timeout: Duration,
    /// How often each provider endpoint's grpc.health.v1 is checked.
    #[serde(with = "crate::config_duration")]
    pub provider_health_interval: Duration,
    /// How long a caller's connection may be silent before it is sent an HTTP/2 PING; `0s`
    /// sends none.
    #[serde(with = "crate::config_duration")]
    pub keepalive_interval: Duration,
    /// How long that PING may go unanswered before the connection is closed.
    #[serde(with = "crate::config_duration")]
    pub keepalive_timeout: Duration,
    /// The most streams (calls and watches) one caller connection may have open at once; 0
    /// sets no limit.
    pub max_concurrent_streams: u32,
    /// The most caller connections each of the gRPC and MCP ports serves at once; 0 sets no
    /// limit.
    pub max_connections: usize,
    /// Where a connection's calls run: `per-connection` (on the task serving the connection:
    /// less CPU per call, and a connection's calls share one thread) or `per-call` (each on a
    /// task of its own, which any thread may run).
    pub call_scheduling: CallScheduling,
    /// Base URL of an OpenAI-compatible chat-completions API (e.g. `http://127.0.0.1:11434/v1`);
    /// empty uses the deterministic built-in model.
    pub model_base_url: String,
    /// The model agents ask when neither the agent nor the request names one.
    pub model_name: String,
    /// The API key sent as a bearer token; empty sends none. Prefer the environment
    /// (`TOOLPLANE_MODEL_API_KEY`) to the file for this one.
    pub model_api_key: String,
    /// How long one model call may take.
    #[serde(with = "crate::config_duration")]
    pub model_timeout: Duration,
    /// How many times a model call that failed for want of a connection, or with 408, 409,
    /// 429 or 5xx, is tried again (0 to 10; see [`crate::agent::model_retries`]).
    pub model_max_retries: u32,
    /// The field a turn's token limit (`max_tokens` of its request) is sent to the model in:
    /// `max_tokens`, or `max_completion_tokens` (which OpenAI's reasoning models need).
    pub model_max_tokens_field: MaxTokensField,
    /// The most messages one agent's conversation keeps (the oldest turns are dropped).
    pub max_conversation_messages: usize,
    /// Most bytes of messages (content and metadata) an agent's conversation keeps; 0 sets no
    /// bound.
    pub max_conversation_bytes: usize,
    /// The most agents one tenant may have at once; 0 sets no limit.
    pub max_agents_per_tenant: usize,
    /// The most tool calls of one model answer an agent runs at once (1 to 128); the others
    /// start as earlier ones finish.
    pub max_concurrent_tool_calls: usize,
    /// The directory agents and their conversations are kept in, one file per agent, so they
    /// outlive a restart; empty keeps them in memory only.
    pub agents_path: String,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("the default listen address is valid"),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_client_ca_file: String::new(),
            tls_reload_interval: DEFAULT_TLS_RELOAD_INTERVAL,
            response_compression: ResponseCompression::default(),
            metrics_listen: String::new(),
            mcp_listen: String::new(),
            mcp_allowed_hosts: crate::mcp::http::LOOPBACK_HOSTS.join(","),
            mcp_max_sessions: crate::mcp::http::DEFAULT_MAX_SESSIONS,
            mcp_max_sessions_per_tenant: crate::mcp::http::DEFAULT_MAX_SESSIONS_PER_TENANT,
            mcp_imports: Vec::new(),
            checked_mcp_imports: Vec::new(),
            tenant_access: Vec::new(),
            forwarded_client_cert_proxies: String::new(),
            forwarded_client_cert_header: ForwardedIdentityHeader::default(),
            checked_tenant_access: TenantAccess::default(),
            unread_variables: Vec::new(),
            file: None,
            otlp_endpoint: String::new(),
            otlp_protocol: OtlpProtocol::default(),
            otlp_ca_file: String::new(),
            otlp_client_cert_file: String::new(),
            otlp_client_key_file: String::new(),
            provider_ca_file: String::new(),
            provider_client_cert_file: String::new(),
            provider_client_key_file: String::new(),
            default_ttl: validate::DEFAULT_TTL,
            min_ttl: validate::DEFAULT_MIN_TTL,
            max_ttl: validate::DEFAULT_MAX_TTL,
            max_tools_per_service: validate::DEFAULT_MAX_TOOLS,
            max_description_bytes: validate::DEFAULT_MAX_DESCRIPTION_BYTES,
            max_schema_bytes: validate::DEFAULT_MAX_SCHEMA_BYTES,
            max_schema_depth: validate::DEFAULT_MAX_SCHEMA_DEPTH,
            max_services_per_tenant: validate::DEFAULT_MAX_SERVICES_PER_TENANT,
            max_tools_per_tenant: DEFAULT_MAX_TOOLS_PER_TENANT,
            max_tool_bytes_per_tenant: DEFAULT_MAX_TOOL_BYTES_PER_TENANT,
            max_instances_per_service: validate::DEFAULT_MAX_INSTANCES_PER_SERVICE,
            worker_threads: 0,
            validator_cache_size: crate::registry::validators::DEFAULT_VALIDATOR_CACHE_SIZE,
            watch_event_buffer: DEFAULT_EVENT_BUFFER,
            watch_event_buffer_bytes: DEFAULT_EVENT_BUFFER_BYTES,
            gone_services_remembered: DEFAULT_GONE_SERVICES_REMEMBERED,
            drain_grace: DEFAULT_DRAIN_GRACE,
            log_format: LogFormat::Text,
            records_path: String::new(),
            records_in_memory: DEFAULT_RING_CAPACITY,
            records_rotate_bytes: DEFAULT_ROTATE_BYTES,
            rate_limit_per_second: DEFAULT_RATE_LIMIT_PER_SECOND,
            rate_limit_burst: DEFAULT_RATE_LIMIT_BURST,
            tool_rate_limits: std::collections::BTreeMap::new(),
            max_in_flight_per_service: DEFAULT_MAX_IN_FLIGHT_PER_SERVICE,
            max_invoke_timeout: DEFAULT_MAX_TIMEOUT,
            provider_health_interval: DEFAULT_PROVIDER_HEALTH_INTERVAL,
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_connections: 0,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            call_scheduling: CallScheduling::default(),
            model_base_url: String::new(),
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            model_api_key: String::new(),
            model_timeout: DEFAULT_MODEL_TIMEOUT,
            model_max_retries: crate::agent::model_retries::DEFAULT_MODEL_RETRIES,
            model_max_tokens_field: MaxTokensField::default(),
            max_conversation_messages: DEFAULT_MAX_MESSAGES,
            max_conversation_bytes: DEFAULT_MAX_CONVERSATION_BYTES,
            max_agents_per_tenant: DEFAULT_MAX_AGENTS_PER_TENANT,
            max_concurrent_tool_calls: crate::agent::runner::DEFAULT_CONCURRENT_TOOL_CALLS,
            agents_path: String::new(),
        }
    }
}

/// A configuration that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The named config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file, with the environment laid over it, is not a valid configuration.
    #[error("invalid configuration ({origin}): {message}")]
    Invalid {
        /// Where the configuration came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
}

impl ServerConfig {
    /// Loads defaults < file < environment. `file` is the file named on the command line or
    /// in `TOOLPLANE_CONFIG`; without one, `toolplane.toml` is read if it exists.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        Self::load_read_by(file, env, |path| std::fs::read_to_string(path))
    }

    /// As [`ServerConfig::load`], the file's text read by `read`.
    pub(crate) fn load_read_by(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
        read: impl Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Self, ConfigError> {
        let file = file.or_else(|| {
            let default = Path::new(DEFAULT_CONFIG_FILE);
            default.exists().then_some(default)
        });
        let (mut table, file_read, origin) = match file {
            Some(path) => {
                let (table, digest) = read_table(path, &read)?;
                (
                    table,
                    Some((path.to_path_buf(), digest)),
                    path.display().to_string(),
                )
            }
            None => (toml::Table::new(), None, "defaults".to_owned()),
        };
        let fields =
            toml::Table::try_from(Self::default()).expect("the default configuration serializes");
        // The settings the environment set, and the variable that set each.
        let mut from_env = HashMap::new();
        let mut unread = Vec::new();
        for (key, value) in env {
            let Some(field) = key.strip_prefix(ENV_PREFIX).map(str::to_ascii_lowercase) else {
                continue;
            };
            if let Some(default) = fields.get(&field) {
                table.insert(field.clone(), env_value(&value, default));
                from_env.insert(field, key);
            } else {
                unread.push(key);
            }
        }
        let unread_variables = unread_variable_warnings(unread, &fields, &table);
        let mut config: Self = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|error| ConfigError::Invalid {
                origin: format!("{origin} + environment"),
                message: located(&error, &from_env),
            })?;
        let checked = config
            .check(&read)
            .map_err(|message| ConfigError::Invalid { origin, message })?;
        config.checked_mcp_imports = checked.imports;
        config.checked_tenant_access = checked.tenant_access;
        config.file = file_read;
        config.unread_variables = unread_variables;
        Ok(config)
    }
}

/// The file's table, and the sha256 of its content (to see later whether it changed).
fn read_table(
    path: &Path,
    read: impl Fn(&Path) -> std::io::Result<String>,
) -> Result<(toml::Table, [u8; 32]), ConfigError> {
    let text = read(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let table = text
        .parse()
        .map_err(|error: toml::de::Error| ConfigError::Invalid {
            origin: path.display().to_string(),
            message: match error.span() {
                Some(span) => format!(
                    "{}: {}",
                    line_and_column(&text, span.start),
                    error.message()
                ),
                None => error.message().to_owned(),
            },
        })?;
    Ok((table, content_digest(text.as_bytes())))
}

#[path = "config_check.rs"]
mod check;
#[path = "config_endpoints.rs"]
mod endpoints;
#[path = "config_env.rs"]
mod env;
#[path = "config_messages.rs"]
mod messages;
#[path = "config_options.rs"]
mod options;
#[path = "config_reload.rs"]
mod reload;

pub use endpoints::{colliding_endpoints, parse_listen_address};
use env::env_value;
pub use env::process_environment;
use messages::{line_and_column, located, unread_variable_warnings};
pub use reload::{ConfigSource, ReadConfigPart, ReloadedParts};

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
