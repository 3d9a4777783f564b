//! What the control plane's health checks last found about each provider endpoint.
//!
//! The checker (`grpc::provider_client::run_health_checks`) asks every registered endpoint's
//! grpc.health.v1 on an interval and writes the answer here; Discovery, HealthService,
//! grpc.health.v1 and the invocation engine read it. An endpoint never checked counts as healthy.

use std::collections::HashMap;
use std::sync::RwLock;

use tokio::sync::broadcast;

use crate::registry::ServiceEntry;
use crate::registry::lease::monotonic_now;

/// The health-check results per provider endpoint.
#[derive(Debug)]
pub struct ProviderHealthBook {
    unhealthy: RwLock<HashMap<String, String>>,
    changes: broadcast::Sender<String>,
}

impl Default for ProviderHealthBook {
    fn default() -> Self {
        Self {
            unhealthy: RwLock::new(HashMap::new()),
            changes: broadcast::channel(1024).0,
        }
    }
}

impl ProviderHealthBook {
    /// Records a passing check.
    pub fn mark_healthy(&self, endpoint: &str) {
        let removed = self
            .unhealthy
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(endpoint)
            .is_some();
        if removed {
            tracing::info!(endpoint, "provider healthy again");
            let _ = self.changes.send(endpoint.to_owned());
        }
    }

    /// Records a failing check and why.
    pub fn mark_unhealthy(&self, endpoint: &str, why: String) {
        let previous = self
            .unhealthy
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(endpoint.to_owned(), why.clone());
        if previous.is_none() {
            tracing::warn!(endpoint, reason = %why, "provider failing its health check");
            let _ = self.changes.send(endpoint.to_owned());
        }
    }

    /// Why the endpoint's last check failed, or `None` when it passed (or never ran).
    pub fn failure(&self, endpoint: &str) -> Option<String> {
        if endpoint.is_empty() {
            return None;
        }
        self.unhealthy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(endpoint)
            .cloned()
    }

    /// Whether a service is failing: it has live instances with endpoints and every one of
    /// them failed its last check.
    pub fn is_service_failing(&self, service: &ServiceEntry) -> bool {
        let unhealthy = self.unhealthy.read().unwrap_or_else(|p| p.into_inner());
        let mut endpoints = service
            .live_instances_at(monotonic_now())
            .map(|instance| instance.endpoint.as_str())
            .filter(|endpoint| !endpoint.is_empty())
            .peekable();
        endpoints.peek().is_some() && endpoints.all(|endpoint| unhealthy.contains_key(endpoint))
    }

    /// How many endpoints failed their last check.
    pub fn unhealthy_count(&self) -> usize {
        self.unhealthy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Forgets endpoints no longer registered.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        self.unhealthy
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|endpoint, _| live.contains(endpoint));
    }

    /// Follows changes: each message names an endpoint whose health flipped.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }
}
