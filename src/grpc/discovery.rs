//! The thin adapter for `toolplane.v1.DiscoveryService`: parse, call the registry, convert back.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use prost::Message;
use tonic::{Request, Response, Status};
use tracing::{Span, instrument};

use super::accept::accept;
use super::convert;
use super::discovery_wire::{
    DiscoveryWire, GetToolResponseWire, ListToolsResponseWire, RegisterServiceResponseWire,
    SearchToolsResponseWire, SharedMessage, ToolMatchWire, WireWatchStream, decoded,
};
use super::page_bytes::fitting;
use super::registration_size;
use super::serving::ServingState;
use super::watch::Watch;
use crate::invoke::health::ProviderHealthBook;
use crate::invoke::heavy::HeavyWork;
use crate::pb;
use crate::pb::discovery_service_server::DiscoveryService;
use crate::registry::store::ToolFilter;
use crate::registry::{PreparedRegistration, Registry, RegistryError, ViolationKind, taxonomy};

/// Serves `toolplane.v1.DiscoveryService` over a [`Registry`].
#[derive(Debug, Clone)]
pub struct DiscoveryApi {
    registry: Registry,
    serving: ServingState,
    health: Arc<ProviderHealthBook>,
    heavy_work: HeavyWork,
}

impl DiscoveryApi {
    /// An adapter over `registry`, reporting provider health from `health`; watches end when
    /// `serving` turns to shutting down; searches run in `heavy_work`.
    pub fn new(
        registry: Registry,
        serving: ServingState,
        health: Arc<ProviderHealthBook>,
        heavy_work: HeavyWork,
    ) -> Self {
        Self {
            registry,
            serving,
            health,
            heavy_work,
        }
    }
}

/// The filters of a listing or search, as requested: an empty service name, name prefix,
/// domain or category, and capability `0` (UNSPECIFIED), filter nothing.
fn tool_filter(
    service_name: &str,
    capability: i32,
    name_prefix: String,
    domain: String,
    category: String,
) -> Result<ToolFilter, RegistryError> {
    let capability = match capability {
        0 => None,
        value => Some(convert::capability(value).map_err(|problem| {
            RegistryError::invalid("capability", ViolationKind::Field, problem)
        })?),
    };
    let label = |field: &str, value: String| match value.as_str() {
        "" => Ok(None),
        given => taxonomy::check_label(given)
            .map(|()| Some(value))
            .map_err(|problem| {
                RegistryError::invalid(field, ViolationKind::Field, format!("{field}: {problem}"))
            }),
    };
    Ok(ToolFilter {
        service: convert::optional_service_name("service_name", service_name)?,
        capability,
        name_prefix: Some(name_prefix).filter(|prefix| !prefix.is_empty()),
        domain: label("domain", domain)?,
        category: label("category", category)?,
    })
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchServicesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DiscoveryService for DiscoveryApi {
    /// Served through [`DiscoveryWire`] (see [`super::discovery_wire`]); here the answer is
    /// decoded into its generated form.
    async fn register_service(
        &self,
        request: Request<pb::RegisterServiceRequest>,
    ) -> Result<Response<pb::RegisterServiceResponse>, Status> {
        let wire = self.register_service_wire(request).await?;
        decoded(&wire).map(Response::new)
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "Heartbeat", tenant, correlation_id)
    )]
    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let (meta, request) = accept(request)?;
        let service = convert::service_name("service_name", &request.service_name)?;
        let lease = convert::lease_id("lease_id", &request.lease_id)?;
        let expires_at = self.registry.heartbeat(meta.tenant, &service, lease)?;
        Ok(Response::new(pb::HeartbeatResponse {
            meta: Some(meta.response()),
            expires_at: Some(expires_at.into()),
        }))
    }

    #[instrument(skip_all, fields(rpc = "DeregisterService", tenant, correlation_id))]
    async fn deregister_service(
        &self,
        request: Request<pb::DeregisterServiceRequest>,
    ) -> Result<Response<pb::DeregisterServiceResponse>, Status> {
        let (meta, request) = accept(request)?;
        let service = convert::service_name("service_name", &request.service_name)?;
        let lease = convert::lease_id("lease_id", &request.lease_id)?;
        self.registry.deregister(meta.tenant, &service, lease)?;
        tracing::info!(%service, "service deregistered");
        Ok(Response::new(pb::DeregisterServiceResponse {
            meta: Some(meta.response()),
        }))
    }

    /// Served through [`DiscoveryWire`] (see [`super::discovery_wire`]); here the answer is
    /// decoded into its generated form.
    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let wire = self.list_tools_wire(request).await?;
        decoded(&wire).map(Response::new)
    }

    /// Served through [`DiscoveryWire`] (see [`super::discovery_wire`]); here the answer is
    /// decoded into its generated form.
    async fn search_tools(
        &self,
        request: Request<pb::SearchToolsRequest>,
    ) -> Result<Response<pb::SearchToolsResponse>, Status> {
        let wire = self.search_tools_wire(request).await?;
        decoded(&wire).map(Response::new)
    }

    /// Served through [`DiscoveryWire`] (see [`super::discovery_wire`]); here the answer is
    /// decoded into its generated form.
    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        let wire = self.get_tool_wire(request).await?;
        decoded(&wire).map(Response::new)
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "ListServices", tenant, correlation_id)
    )]
    async fn list_services(
        &self,
        request: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        let (meta, request) = accept(request)?;
        let mut page =
            self.registry
                .list_services(meta.tenant, request.page_size, &request.page_token)?;
        let infos =
            (page.items.iter()).map(|service| convert::discovery_info(service, &self.health));
        let services = fitting(infos, Message::encoded_len);
        page.keep_first(services.len(), |last| Registry::services_token_after(last));
        Ok(Response::new(pb::ListServicesResponse {
            meta: Some(meta.response()),
            services,
            next_page_token: page.next_page_token.unwrap_or_default(),
        }))
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "GetService", tenant, correlation_id)
    )]
    async fn get_service(
        &self,
        request: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::GetServiceResponse>, Status> {
        let (meta, request) = accept(request)?;
        let name = convert::service_name("service_name", &request.service_name)?;
        let service = self.registry.get_service(meta.tenant, &name)?;
        Ok(Response::new(pb::GetServiceResponse {
            meta: Some(meta.response()),
            service: Some(convert::discovery_info(&service, &self.health)),
        }))
    }

    type WatchServicesStream = WatchStream;

    /// Served through [`DiscoveryWire`] (see [`super::discovery_wire`]); here each message is
    /// decoded into its generated form.
    async fn watch_services(
        &self,
        request: Request<pb::WatchServicesRequest>,
    ) -> Result<Response<Self::WatchServicesStream>, Status> {
        let stream = self.watch_wire(request).await?;
        Ok(Response::new(Box::pin(
            stream.map(|item| item.and_then(|wire| decoded(&wire))),
        )))
    }

    #[instrument(skip_all, fields(rpc = "Preflight", tenant, correlation_id))]
    async fn preflight(
        &self,
        request: Request<pb::PreflightRequest>,
    ) -> Result<Response<pb::PreflightResponse>, Status> {
        let (meta, request) = accept(request)?;
        let requirements = convert::requirements(request.requirements)?;
        let report = self.registry.preflight(meta.tenant, &requirements);
        tracing::info!(
            ok = report.ok(),
            missing_required = report.missing_required.len(),
            missing_optional = report.missing_optional.len(),
            "preflight"
        );
        Ok(Response::new(pb::PreflightResponse {
            meta: Some(meta.response()),
            ok: report.ok(),
            missing_required: report
                .missing_required
                .iter()
                .map(convert::missing_to_pb)
                .collect(),
            missing_optional: report
                .missing_optional
                .iter()
                .map(convert::missing_to_pb)
                .collect(),
            // The services found, as many as fit in an answer clients read by default.
            services: fitting(
                (report.services.iter())
                    .map(|service| convert::discovery_info(service, &self.health)),
                Message::encoded_len,
            ),
        }))
    }
}

impl DiscoveryWire for DiscoveryApi {
    #[instrument(
        skip_all,
        fields(rpc = "RegisterService", tenant, correlation_id, service)
    )]
    async fn register_service_wire(
        &self,
        request: Request<pb::RegisterServiceRequest>,
    ) -> Result<RegisterServiceResponseWire, Status> {
        let (meta, request) = accept(request)?;
        let registration = request.registration;
        if let Some(registration) = &registration {
            Span::current().record("service", registration.service_name.as_str());
        }
        // Validating compiles every schema, in time with their size: a large registration is
        // validated in the pool of heavy work, by tenant in turns, as a large input is, so it
        // does not hold up the calls of the thread serving it. The caller's deadline is kept by
        // the connection, which drops this call; nothing is stored before the validation ends.
        let large = registration_size::is_large(registration.as_ref());
        let registry = self.registry.clone();
        let prepare = move || -> Result<PreparedRegistration, RegistryError> {
            registry.prepare(&convert::service_spec(registration)?)
        };
        let prepared = if large {
            self.heavy_work.run_to_end(meta.tenant, prepare).await?
        } else {
            prepare()?
        };
        let entry = self.registry.register_prepared(meta.tenant, prepared)?;
        let instance = entry.last_registered();
        tracing::info!(tools = entry.tools().len(), instance = %instance.id, instances = entry.instances.len(), lease_id = %instance.lease.id, "service registered");
        Ok(RegisterServiceResponseWire {
            meta: Some(meta.response()),
            lease_id: instance.lease.id.to_string(),
            expires_at: Some(instance.lease.expires_at().into()),
            // Encoded as the registration measured them (or now), and kept for the answers.
            tools: (entry.tools().iter())
                .map(|tool| SharedMessage::tool(tool, &entry))
                .collect(),
        })
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "ListTools", tenant, correlation_id)
    )]
    async fn list_tools_wire(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<ListToolsResponseWire, Status> {
        let (meta, request) = accept(request)?;
        let filter = tool_filter(
            &request.service_name,
            request.capability,
            request.name_prefix,
            request.domain,
            request.category,
        )?;
        let mut page = self.registry.list_tools(
            meta.tenant,
            &filter,
            request.page_size,
            &request.page_token,
        )?;
        let encoded =
            (page.items.iter()).map(|found| SharedMessage::tool(&found.tool, &found.service));
        let tools = fitting(encoded, Message::encoded_len);
        page.keep_first(tools.len(), |last| {
            Registry::tools_token_after(&filter, last)
        });
        Ok(ListToolsResponseWire {
            meta: Some(meta.response()),
            tools,
            next_page_token: page.next_page_token.unwrap_or_default(),
        })
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "SearchTools", tenant, correlation_id)
    )]
    async fn search_tools_wire(
        &self,
        request: Request<pb::SearchToolsRequest>,
    ) -> Result<SearchToolsResponseWire, Status> {
        let (meta, request) = accept(request)?;
        let filter = tool_filter(
            &request.service_name,
            request.capability,
            String::new(),
            request.domain,
            request.category,
        )?;
        // A search scores every tool of the tenant that holds a query word (hundreds of µs
        // over 10,000 tools) and builds the index of each service not searched before (about
        // 40 µs per tool): it runs in the pool of heavy work, a few at once, so a burst of
        // searches neither takes every core from the calls being served nor starts a thread
        // per search. The caller's deadline is kept by the connection, which drops this call.
        let registry = self.registry.clone();
        let found = self
            .heavy_work
            .run_to_end(meta.tenant, move || {
                registry.search_tools(meta.tenant, &filter, &request.query, request.max_results)
            })
            .await?;
        Ok(SearchToolsResponseWire {
            meta: Some(meta.response()),
            // The best matches that fit in one answer (fewer than asked for when they are large).
            matches: fitting(
                found.hits.iter().map(|hit| ToolMatchWire {
                    tool: Some(SharedMessage::tool(&hit.tool.tool, &hit.tool.service)),
                    score: hit.score,
                }),
                Message::encoded_len,
            ),
            total_matches: i32::try_from(found.total_matches).unwrap_or(i32::MAX),
        })
    }

    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "GetTool", tenant, correlation_id)
    )]
    async fn get_tool_wire(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<GetToolResponseWire, Status> {
        let (meta, request) = accept(request)?;
        let tool = convert::tool_name("tool_name", &request.tool_name)?;
        let service = convert::optional_service_name("service_name", &request.service_name)?;
        let found = self
            .registry
            .get_tool(meta.tenant, &tool, service.as_ref())?;
        Ok(GetToolResponseWire {
            meta: Some(meta.response()),
            tool: Some(SharedMessage::tool(&found.tool, &found.service)),
        })
    }

    #[instrument(skip_all, fields(rpc = "WatchServices", tenant, correlation_id))]
    async fn watch_wire(
        &self,
        request: Request<pb::WatchServicesRequest>,
    ) -> Result<WireWatchStream, Status> {
        let (meta, request) = accept(request)?;
        let only = convert::optional_service_name("service_name", &request.service_name)?;
        let start = self.registry.watch(meta.tenant);
        let watch = Watch::start(meta, only, start, &self.serving, &self.health);
        Ok(Box::pin(watch))
    }
}
