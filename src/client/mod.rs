//! A typed Rust client for toolplane: pre-flight that fails fast with a typed error listing
//! what is missing, paged listings gathered whole, and a client-side discovery cache (seed 000:
//! discovery results are cached for `DISCOVERY_CACHE_TTL_SECS`, default 300 s).

mod bearer;
mod discovery_cache;
mod pages;
mod records;
mod requirement;
mod tls;

use std::fmt;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

pub use bearer::{BearerAuth, BearerToken, ClientChannel, InvalidBearerToken, TokenFile};
pub use records::{DEFAULT_RECORDS, RecordFilter};
pub use requirement::{ParseRequirementError, ToolRequirement};
pub use tls::{ClientTlsError, ClientTlsFiles};

use crate::envelope::{TenantId, request_meta};
use crate::pb;
use crate::pb::agent_service_client::AgentServiceClient;
use crate::pb::discovery_service_client::DiscoveryServiceClient;
use crate::pb::health_service_client::HealthServiceClient;
use crate::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use discovery_cache::DiscoveryCache;
pub(crate) use pages::every_page;

/// The environment variable that sets the discovery cache TTL in seconds (seed 000).
pub const DISCOVERY_CACHE_TTL_ENV: &str = "DISCOVERY_CACHE_TTL_SECS";
/// The discovery cache TTL when the environment sets none (seed 000).
pub const DEFAULT_DISCOVERY_CACHE_TTL: Duration = Duration::from_secs(300);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which tools a listing or a search takes: the filters of `ListTools` and `SearchTools`,
/// combined with AND; the default takes every tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSelection {
    /// Only the tools of this service.
    pub service: Option<String>,
    /// Only tools with this domain or one under it (`github` takes `github.issues`).
    pub domain: Option<String>,
    /// Only tools with this category or one under it (`crud` takes `crud.read`).
    pub category: Option<String>,
}

/// What can go wrong for a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint is not a valid URI.
    #[error("invalid endpoint {endpoint:?}: {source}")]
    InvalidEndpoint {
        /// The endpoint given.
        endpoint: String,
        /// Why it is invalid.
        source: tonic::transport::Error,
    },
    /// The TLS files cannot be used, or do not fit the endpoint.
    #[error(transparent)]
    Tls(#[from] ClientTlsError),
    /// The bearer token given cannot be sent.
    #[error(transparent)]
    BearerToken(#[from] InvalidBearerToken),
    /// The server could not be reached.
    #[error("cannot connect to {endpoint}: {}", error_chain(source))]
    Connect {
        /// The endpoint given.
        endpoint: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The server answered with an error.
    #[error("{}", describe_status(.0))]
    Rpc(#[from] tonic::Status),
    /// Pre-flight found required tools missing.
    #[error("{0}")]
    MissingTools(MissingTools),
    /// A paged listing whose next page's token is one already asked for: the server's pages
    /// go round in a circle, and following them would never end.
    #[error(
        "the server answered a page token it had answered before ({token:?}); a listing whose pages go round in a circle is not followed"
    )]
    PagesInACircle {
        /// The token answered again (its first 64 characters).
        token: String,
    },
}

/// An error and the errors beneath it, as one line: tonic's transport error says only
/// "transport error" by itself. A cause that says what the line already ends with is left out
/// (hyper-util's connect error wraps one that says the same, and tonic's invalid URL error is
/// its own source's words).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// A status in words: code, message, and the google.rpc details a person can act on.
pub fn describe_status(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let details = status.get_error_details();
    if let Some(info) = details.error_info() {
        text.push_str(&format!(" [{}]", info.reason));
    }
    if let Some(bad) = details.bad_request() {
        for violation in &bad.field_violations {
            text.push_str(&format!(
                "\n  - {}: {}",
                violation.field, violation.description
            ));
        }
    }
    if let Some(retry) = details.retry_info().and_then(|retry| retry.retry_delay) {
        text.push_str(&format!("\n  retry after {} ms", retry.as_millis()));
    }
    text
}

/// The answer of a pre-flight check that found required tools missing.
#[derive(Debug, Clone, PartialEq)]
pub struct MissingTools {
    /// The whole answer: `missing_required` lists every missing required tool with the reason.
    pub response: pb::PreflightResponse,
}

impl MissingTools {
    /// Every missing required tool.
    pub fn missing(&self) -> &[pb::MissingTool] {
        &self.response.missing_required
    }
}

impl fmt::Display for MissingTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pre-flight failed: {} required tool(s) missing",
            self.missing().len()
        )?;
        for missing in self.missing() {
            write!(f, "\n  - {}", missing.detail)?;
        }
        Ok(())
    }
}

/// A typed toolplane client for one tenant.
#[derive(Debug, Clone)]
pub struct ToolplaneClient {
    channel: Channel,
    auth: BearerAuth,
    tenant: TenantId,
    correlation_id: String,
    cache: DiscoveryCache,
}

/// The discovery cache TTL: `DISCOVERY_CACHE_TTL_SECS` when set to a number, else 300 s.
pub fn discovery_cache_ttl() -> Duration {
    std::env::var(DISCOVERY_CACHE_TTL_ENV)
        .ok()
        .and_then(|secs| secs.trim().parse().ok())
        .map_or(DEFAULT_DISCOVERY_CACHE_TTL, Duration::from_secs)
}

impl ToolplaneClient {
    /// Connects to `endpoint` (e.g. `http://127.0.0.1:50051`, or `https://` for a server
    /// that serves TLS, checked against the public CAs) acting for `tenant`.
    pub async fn connect(endpoint: &str, tenant: TenantId) -> Result<Self, ClientError> {
        Self::connect_with_tls(endpoint, tenant, &ClientTlsFiles::default()).await
    }

    /// As [`Self::connect`], an `https://` endpoint connected to as `tls` says. TLS files
    /// with an `http://` endpoint are an error: they would not be used.
    pub async fn connect_with_tls(
        endpoint: &str,
        tenant: TenantId,
        tls: &ClientTlsFiles,
    ) -> Result<Self, ClientError> {
        let mut target = Endpoint::from_shared(endpoint.to_owned()).map_err(|source| {
            ClientError::InvalidEndpoint {
                endpoint: endpoint.to_owned(),
                source,
            }
        })?;
        target = tls.apply_to(target)?;
        let channel = target
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|source| ClientError::Connect {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        Ok(Self::from_channel(channel, tenant, discovery_cache_ttl()))
    }

    /// A client over an existing channel, with a discovery cache of the given TTL (at most 100
    /// years: a longer one is taken as that).
    pub fn from_channel(channel: Channel, tenant: TenantId, cache_ttl: Duration) -> Self {
        Self {
            channel,
            auth: BearerAuth::default(),
            tenant,
            correlation_id: uuid::Uuid::new_v4().to_string(),
            cache: DiscoveryCache::new(cache_ttl),
        }
    }

    /// Uses this correlation id on every request from now on.
    pub fn with_correlation_id(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = correlation_id.into();
        self
    }

    /// Sends `token` as `authorization: Bearer TOKEN` on every call from now on (a toolplane
    /// with `[[tenant_access]]` grants tenants to tokens), the generated clients this client
    /// hands out included.
    pub fn with_bearer_token(mut self, token: BearerToken) -> Self {
        self.auth = BearerAuth::new(Some(token));
        self
    }

    /// Sends the token in the file at `path` (its first line that is not blank) as
    /// [`Self::with_bearer_token`] does, reading the file again once what was read is `every`
    /// old (zero: only when asked) and when the process is asked to (SIGHUP, once it listens
    /// for it: [`crate::grpc::hangups::read_again_on_sighup`]), so a token rotated in the file
    /// (a mounted Kubernetes Secret) is sent without building a new client. A file that
    /// cannot be read now is an error.
    pub fn with_bearer_token_file(
        mut self,
        path: &std::path::Path,
        every: Duration,
    ) -> Result<Self, InvalidBearerToken> {
        self.auth = BearerAuth::from_file(path, every)?;
        Ok(self)
    }

    /// This client's channel, sending its bearer token.
    fn channel(&self) -> ClientChannel {
        self.auth.clone().on(self.channel.clone())
    }

    /// The generated Agent client, for agent calls.
    pub fn agents(&self) -> AgentServiceClient<ClientChannel> {
        AgentServiceClient::new(self.channel())
    }

    /// The envelope this client sends.
    pub fn meta(&self) -> Option<pb::Meta> {
        Some(request_meta(self.tenant, &self.correlation_id))
    }

    /// The generated Discovery client, for calls this wrapper does not cover.
    pub fn discovery(&self) -> DiscoveryServiceClient<ClientChannel> {
        DiscoveryServiceClient::new(self.channel())
    }

    /// Runs a pre-flight check. Missing required tools are [`ClientError::MissingTools`]; on
    /// success the full answer is returned (missing optional tools included, for warnings).
    pub async fn preflight(
        &self,
        requirements: &[ToolRequirement],
    ) -> Result<pb::PreflightResponse, ClientError> {
        let request = pb::PreflightRequest {
            meta: self.meta(),
            requirements: requirements.iter().map(ToolRequirement::to_pb).collect(),
        };
        let lookup = self.cache.lookup_sent();
        let response = self.discovery().preflight(request).await?.into_inner();
        for service in &response.services {
            let name = &service.service_name;
            self.cache.keep(lookup, name, service.clone()).await;
        }
        if response.ok {
            Ok(response)
        } else {
            Err(ClientError::MissingTools(MissingTools { response }))
        }
    }

    /// One service, from the discovery cache when a fresh copy is there.
    pub async fn service(&self, name: &str) -> Result<pb::DiscoveryInfo, ClientError> {
        if let Some(cached) = self.cache.get(name).await {
            return Ok(cached);
        }
        let request = pb::GetServiceRequest {
            meta: self.meta(),
            service_name: name.to_owned(),
        };
        let lookup = self.cache.lookup_sent();
        let service = self
            .discovery()
            .get_service(request)
            .await?
            .into_inner()
            .service
            .unwrap_or_default();
        self.cache.keep(lookup, name, service.clone()).await;
        Ok(service)
    }

    /// Drops every cached discovery answer, and every answer to a lookup sent before now (one
    /// answered meanwhile is not cached).
    pub fn invalidate_cache(&self) {
        self.cache.invalidate();
    }

    /// Every live service, all pages gathered.
    pub async fn all_services(&self) -> Result<Vec<pb::DiscoveryInfo>, ClientError> {
        every_page(|page_token| async move {
            let request = pb::ListServicesRequest {
                meta: self.meta(),
                page_size: 0,
                page_token,
            };
            let page = self.discovery().list_services(request).await?.into_inner();
            Ok((page.services, page.next_page_token))
        })
        .await
    }

    /// Every live tool (of one service, when given), all pages gathered.
    pub async fn all_tools(
        &self,
        service: Option<&str>,
    ) -> Result<Vec<pb::ToolRegistration>, ClientError> {
        let selection = ToolSelection {
            service: service.map(str::to_owned),
            ..Default::default()
        };
        self.tools_selected(&selection).await
    }

    /// Every live tool `selection` takes, all pages gathered.
    pub async fn tools_selected(
        &self,
        selection: &ToolSelection,
    ) -> Result<Vec<pb::ToolRegistration>, ClientError> {
        every_page(|page_token| async move {
            let request = pb::ListToolsRequest {
                meta: self.meta(),
                service_name: selection.service.clone().unwrap_or_default(),
                domain: selection.domain.clone().unwrap_or_default(),
                category: selection.category.clone().unwrap_or_default(),
                page_token,
                ..Default::default()
            };
            let page = self.discovery().list_tools(request).await?.into_inner();
            Ok((page.tools, page.next_page_token))
        })
        .await
    }

    /// The live tools `selection` takes that best match `query`, best first, at most
    /// `max_results` (0 means 10); see `DiscoveryService.SearchTools`.
    pub async fn search_tools(
        &self,
        query: &str,
        selection: &ToolSelection,
        max_results: i32,
    ) -> Result<pb::SearchToolsResponse, ClientError> {
        let request = pb::SearchToolsRequest {
            meta: self.meta(),
            query: query.to_owned(),
            service_name: selection.service.clone().unwrap_or_default(),
            domain: selection.domain.clone().unwrap_or_default(),
            category: selection.category.clone().unwrap_or_default(),
            max_results,
            ..Default::default()
        };
        Ok(self.discovery().search_tools(request).await?.into_inner())
    }

    /// Invokes a tool through the control plane. `input` must be a JSON object; `timeout`
    /// becomes the call's gRPC deadline.
    pub async fn invoke(
        &self,
        tool: &str,
        service: Option<&str>,
        input: &serde_json::Value,
        timeout: Option<Duration>,
    ) -> Result<pb::InvokeToolResponse, ClientError> {
        let mut request = tonic::Request::new(pb::InvokeToolRequest {
            meta: self.meta(),
            tool_name: tool.to_owned(),
            service_name: service.unwrap_or_default().to_owned(),
            input: crate::json::json_to_struct(input),
            ..Default::default()
        });
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        let answer = ToolInvokeServiceClient::new(self.channel())
            .invoke_tool(request)
            .await
            .map_err(|status| match timeout {
                // tonic's own timer passing first is CANCELLED "Timeout expired"; gRPC calls a
                // passed deadline DEADLINE_EXCEEDED, as the server does when its timer wins.
                Some(timeout)
                    if status.code() == tonic::Code::Cancelled
                        && status.message() == "Timeout expired" =>
                {
                    tonic::Status::deadline_exceeded(format!(
                        "no answer within the call's deadline ({})",
                        humantime::format_duration(timeout)
                    ))
                }
                _ => status,
            })?;
        Ok(answer.into_inner())
    }

    /// The health of a service, or of the control plane when `service` is empty.
    pub async fn health(&self, service: &str) -> Result<pb::GetServiceHealthResponse, ClientError> {
        let request = pb::GetServiceHealthRequest {
            meta: self.meta(),
            service_name: service.to_owned(),
        };
        Ok(HealthServiceClient::new(self.channel())
            .get_service_health(request)
            .await?
            .into_inner())
    }
}
