//! The thin adapter for `toolplane.v1.HealthService`.

use std::sync::Arc;
use std::time::SystemTime;

use tonic::{Request, Response, Status};
use tracing::instrument;

use super::accept::accept;
use super::convert;
use super::serving::ServingState;
use crate::invoke::health::ProviderHealthBook;
use crate::pb;
use crate::pb::health_service_server::HealthService;
use crate::registry::{HealthState, Registry};

/// Serves `toolplane.v1.HealthService`.
#[derive(Debug, Clone)]
pub struct HealthApi {
    registry: Registry,
    serving: ServingState,
    health: Arc<ProviderHealthBook>,
}

impl HealthApi {
    /// An adapter reporting on `registry`, provider checks in `health`, and the server's
    /// `serving` state.
    pub fn new(registry: Registry, serving: ServingState, health: Arc<ProviderHealthBook>) -> Self {
        Self {
            registry,
            serving,
            health,
        }
    }
}

#[tonic::async_trait]
impl HealthService for HealthApi {
    #[instrument(
        level = "debug",
        skip_all,
        fields(rpc = "GetServiceHealth", tenant, correlation_id)
    )]
    async fn get_service_health(
        &self,
        request: Request<pb::GetServiceHealthRequest>,
    ) -> Result<Response<pb::GetServiceHealthResponse>, Status> {
        let (meta, request) = accept(request)?;
        let response = if request.service_name.is_empty() {
            let status = if self.serving.is_serving() {
                HealthState::Healthy
            } else {
                HealthState::Unhealthy
            };
            pb::GetServiceHealthResponse {
                meta: Some(meta.response()),
                status: convert::health_to_pb(status) as i32,
                timestamp: Some(SystemTime::now().into()),
                uptime_seconds: self.serving.uptime().as_secs(),
                tools_count: u32::try_from(self.registry.tool_count(meta.tenant))
                    .unwrap_or(u32::MAX),
                tools: Vec::new(),
            }
        } else {
            let name = convert::service_name("service_name", &request.service_name)?;
            let service = self.registry.get_service(meta.tenant, &name)?;
            pb::GetServiceHealthResponse {
                meta: Some(meta.response()),
                status: convert::health_to_pb(convert::service_health(&service, &self.health))
                    as i32,
                timestamp: Some(SystemTime::now().into()),
                uptime_seconds: service.uptime_seconds(),
                tools_count: u32::try_from(service.tools().len()).unwrap_or(u32::MAX),
                tools: service
                    .tools()
                    .iter()
                    .map(|tool| tool.name.to_string())
                    .collect(),
            }
        };
        Ok(Response::new(response))
    }
}
