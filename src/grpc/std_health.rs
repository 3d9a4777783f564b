//! The standard `grpc.health.v1.Health` service, with the spec's exact semantics over the
//! registry (tonic-health's stock server answers NOT_FOUND on Watch and ends the stream).
//!
//! - `""` and each `toolplane.v1` service name report the server itself: SERVING, or
//!   NOT_SERVING once shutdown has begun.
//! - A registered service's name reports SERVING while its lease lives (NOT_SERVING while its
//!   provider fails the control plane's health checks), and SERVICE_UNKNOWN once it is gone.
//! - Check on a name never registered is NOT_FOUND. Watch on it sends SERVICE_UNKNOWN and
//!   keeps the stream open, sending again whenever the status changes.
//!
//! grpc.health.v1 requests carry no envelope, so the tenant comes from the
//! `toolplane-tenant-id` request header (default 0).

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use super::serving::ServingState;
use crate::envelope::TenantId;
use crate::invoke::health::ProviderHealthBook;
use crate::registry::{Registry, ServiceName};

/// The request header naming the tenant of a grpc.health.v1 call.
pub const TENANT_HEADER: &str = "toolplane-tenant-id";

/// The gRPC services whose health is the server's own.
pub const SERVER_SERVICES: &[&str] = &[
    "toolplane.v1.DiscoveryService",
    "toolplane.v1.HealthService",
    "toolplane.v1.ToolInvokeService",
    "toolplane.v1.AgentService",
];

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

    /// The status of `service`; `None` for a name never seen in the tenant.
    fn status(&self, tenant: TenantId, service: &str) -> Option<ServingStatus> {
        if service.is_empty() || SERVER_SERVICES.contains(&service) {
            return Some(if self.serving.is_serving() {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            });
        }
        let live = ServiceName::parse(service)
            .ok()
            .and_then(|name| self.registry.store().service(tenant, &name));
        if let Some(entry) = live {
            Some(if self.health.failure(&entry.endpoint).is_some() {
                ServingStatus::NotServing
            } else {
                ServingStatus::Serving
            })
        } else if self.registry.store().was_seen(tenant, service) {
            Some(ServingStatus::ServiceUnknown)
        } else {
            None
        }
    }
}

fn tenant_of<T>(request: &Request<T>) -> Result<TenantId, Status> {
    match request.metadata().get(TENANT_HEADER) {
        None => Ok(TenantId::default()),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map(TenantId)
            .ok_or_else(|| {
                Status::invalid_argument(format!(
                    "header {TENANT_HEADER} must be an unsigned integer"
                ))
            }),
    }
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
        let tenant = tenant_of(&request)?;
        let service = request.into_inner().service;
        match self.status(tenant, &service) {
            Some(status) => Ok(Response::new(answer(status))),
            None => Err(Status::not_found(format!(
                "service {service:?} is not known to this server"
            ))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let tenant = tenant_of(&request)?;
        let service = request.into_inner().service;
        let (sender, receiver) = mpsc::channel(4);
        let this = self.clone();
        tokio::spawn(async move {
            let mut events = this.registry.store().subscribe();
            let mut serving = this.serving.subscribe();
            let mut provider_health = this.health.subscribe();
            let mut last = None;
            loop {
                let status = this
                    .status(tenant, &service)
                    .unwrap_or(ServingStatus::ServiceUnknown);
                if last != Some(status) {
                    if sender.send(Ok(answer(status))).await.is_err() {
                        return;
                    }
                    last = Some(status);
                }
                tokio::select! {
                    // Any change may be ours (a lagged receiver just re-reads the status).
                    received = events.recv() => {
                        if matches!(received, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                            return;
                        }
                    }
                    flipped = provider_health.recv() => {
                        if matches!(flipped, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                            return;
                        }
                    }
                    changed = serving.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = sender.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}
