//! The standard `grpc.health.v1.Health` service, with the spec's exact semantics over the
//! registry (tonic-health's stock server answers NOT_FOUND on Watch and ends the stream).
//!
//! - `""` and each `toolplane.v1` service name report the server itself: SERVING, or
//!   NOT_SERVING once shutdown has begun.
//! - A registered service's name reports SERVING while its lease lives (NOT_SERVING while its
//!   provider fails the control plane's health checks), and SERVICE_UNKNOWN once it is gone
//!   (while the store remembers it: `gone_services_remembered`, see `registry::gone`).
//! - Check on a name never registered, or gone and forgotten, is NOT_FOUND. Watch on it sends SERVICE_UNKNOWN and
//!   keeps the stream open, sending again whenever the status changes.
//!
//! grpc.health.v1 requests carry no envelope, so the tenant comes from the
//! `toolplane-tenant-id` request header (default 0); with `tenant_access` rules, asking about
//! any name but the server's own needs the caller to be granted that tenant.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::serving::ServingState;
use crate::envelope::TenantId;
use crate::invoke::health::ProviderHealthBook;
use crate::registry::store::BufferedEvent;
use crate::registry::{Registry, ServiceName};

use super::accept::check_tenant;
use crate::envelope::TENANT_HEADER;

/// The gRPC services whose health is the server's own.
pub const SERVER_SERVICES: &[&str] = &[
    "toolplane.v1.DiscoveryService",
    "toolplane.v1.HealthService",
    "toolplane.v1.ToolInvokeService",
    "toolplane.v1.AgentService",
];

/// Whether `service` names the server itself rather than a registered service.
fn is_the_server(service: &str) -> bool {
    service.is_empty() || SERVER_SERVICES.contains(&service)
}

/// Serves `grpc.health.v1.Health` over the registry.
#[derive(Debug, Clone)]
pub struct StandardHealth {
    registry: Registry,
    serving: ServingState,
    health: Arc<ProviderHealthBook>,
}

impl StandardHealth {
    /// A health service reporting on `registry`, provider checks in `health`, and the
    /// server's `serving` state.
    pub fn new(registry: Registry, serving: ServingState, health: Arc<ProviderHealthBook>) -> Self {
        Self {
            registry,
            serving,
            health,
        }
    }

    /// The status of `service`; `None` for a name never seen in the tenant (or forgotten).
    fn status(&self, tenant: TenantId, service: &str) -> Option<ServingStatus> {
        if is_the_server(service) {
            return Some(if self.serving.is_serving() {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            });
        }
        // A name that is not a valid service name was never registered.
        let name = ServiceName::parse(service).ok()?;
        let store = self.registry.store();
        if let Some(entry) = store.service(tenant, &name) {
            Some(if self.health.is_service_failing(&entry) {
                ServingStatus::NotServing
            } else {
                ServingStatus::Serving
            })
        } else if store.was_seen(tenant, &name) {
            Some(ServingStatus::ServiceUnknown)
        } else {
            None
        }
    }
}

/// The tenant (from the header) and service a request asks about. A tenant's service needs the
/// caller to be granted the tenant (`tenant_access`); the server's own health (`""` and
/// [`SERVER_SERVICES`]) does not, so a monitor's certificate needs no tenant.
fn accept(request: Request<HealthCheckRequest>) -> Result<(TenantId, String), Status> {
    let value = request.metadata().get(TENANT_HEADER);
    let tenant = TenantId::from_header(value.map(|value| value.as_bytes())).ok_or_else(|| {
        Status::invalid_argument(format!(
            "header {TENANT_HEADER} must be an unsigned integer"
        ))
    })?;
    let (_, extensions, message) = request.into_parts();
    if !is_the_server(&message.service) {
        check_tenant(&extensions, tenant)?;
    }
    Ok((tenant, message.service))
}

fn answer(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse {
        status: status as i32,
    }
}

#[tonic::async_trait]
impl Health for StandardHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let (tenant, service) = accept(request)?;
        match self.status(tenant, &service) {
            Some(status) => Ok(Response::new(answer(status))),
            None => Err(Status::not_found(format!(
                "service {} is not known to this server",
                crate::shown::shown(&service)
            ))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (tenant, service) = accept(request)?;
        // The response stream itself waits for changes: no task or channel per watcher, and
        // nothing is left running once the caller goes away.
        let watch = Watch {
            events: self.registry.store().subscribe(tenant),
            serving: self.serving.subscribe(),
            provider_health: self.health.subscribe(),
            this: self.clone(),
            tenant,
            service,
            last: None,
        };
        Ok(Response::new(Box::pin(futures_util::stream::unfold(
            watch,
            |mut watch| async move {
                let status = watch.next_change().await?;
                Some((Ok(answer(status)), watch))
            },
        ))))
    }
}

/// One Watch call's state.
struct Watch {
    this: StandardHealth,
    tenant: TenantId,
    service: String,
    events: broadcast::Receiver<Arc<BufferedEvent>>,
    serving: tokio::sync::watch::Receiver<bool>,
    /// Endpoints whose provider health flipped.
    provider_health: broadcast::Receiver<String>,
    /// The status sent last.
    last: Option<ServingStatus>,
}

impl Watch {
    /// The next status that differs from the last one sent; `None` once the server stops.
    async fn next_change(&mut self) -> Option<ServingStatus> {
        loop {
            let status = self
                .this
                .status(self.tenant, &self.service)
                .unwrap_or(ServingStatus::ServiceUnknown);
            if self.last != Some(status) {
                self.last = Some(status);
                return Some(status);
            }
            // Any change may be ours (a lagged receiver just re-reads the status).
            let closed = tokio::select! {
                received = self.events.recv() => {
                    matches!(received, Err(broadcast::error::RecvError::Closed))
                }
                flipped = self.provider_health.recv() => {
                    matches!(flipped, Err(broadcast::error::RecvError::Closed))
                }
                changed = self.serving.changed() => changed.is_err(),
            };
            if closed {
                return None;
            }
        }
    }
}
