//! Which instance of a service each attempt of a call goes to.
//!
//! A service's live instances with an endpoint that pass their health checks take calls in
//! turn (round robin, from the service's `turn`); replicas registered with one address (a
//! Kubernetes Service in front of them) count once. An attempt the provider never received (no
//! connection could be made: a replica gone without deregistering) goes on to the next
//! instance at once, each instance tried at most once so; a retry under the caller's policy
//! goes to the next instance too, as gRPC's and Envoy's retries prefer another host. An
//! instance a call could not reach while others could take it is marked failing at once (until
//! its next health check passes), so the calls after it do not try it first.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::error::InvokeError;
use super::health::ProviderHealthBook;
use crate::registry::lease::monotonic_now;
use crate::registry::{RegisteredTool, ServiceEntry};

/// Above this many instances, endpoints already taken are looked up in a set rather than
/// compared one by one.
const LINEAR_DEDUP: usize = 8;

/// The instances one call may go to, in the order it tries them.
#[derive(Debug)]
pub(crate) struct Route {
    service: Arc<ServiceEntry>,
    /// Indices into `service.instances`.
    order: Vec<usize>,
    at: usize,
    moved_on: usize,
}

impl Route {
    /// The instances of `service` that may take a call of `tool` now, starting at the
    /// service's turn: live, with an endpoint, and registered with `tool` exactly as the
    /// service lists it. Fails when no live instance has an endpoint, when none registered
    /// the tool so, or when every one fails its health checks.
    pub(crate) fn of(
        service: &Arc<ServiceEntry>,
        tool: &RegisteredTool,
        health: &ProviderHealthBook,
    ) -> Result<Self, InvokeError> {
        let now = monotonic_now();
        let instances = &service.instances;
        let mut candidates: Vec<usize> = Vec::with_capacity(instances.len());
        // Allocates only when the first endpoint goes in, past `LINEAR_DEDUP` instances.
        let mut taken: HashSet<&str> = HashSet::new();
        let mut with_endpoint = false;
        for (index, instance) in instances.iter().enumerate() {
            let endpoint = instance.endpoint.as_str();
            if endpoint.is_empty() || !instance.lease.is_live_at(now) {
                continue;
            }
            with_endpoint = true;
            let offers = Arc::ptr_eq(&instance.contract, &service.contract)
                || instance.contract.offers(tool);
            let new = if instances.len() <= LINEAR_DEDUP {
                candidates
                    .iter()
                    .all(|&seen| instances[seen].endpoint != endpoint)
            } else {
                !taken.contains(endpoint)
            };
            if offers && new {
                candidates.push(index);
                taken.extend((instances.len() > LINEAR_DEDUP).then_some(endpoint));
            }
        }
        if with_endpoint && candidates.is_empty() {
            return Err(InvokeError::NoInstanceOffers {
                service: service.name.to_string(),
                tool: tool.name.to_string(),
            });
        }
        let mut failing = None;
        let mut order: Vec<usize> = Vec::with_capacity(candidates.len());
        for &index in &candidates {
            let endpoint = &instances[index].endpoint;
            match health.failure(endpoint) {
                None => order.push(index),
                Some(why) => {
                    failing.get_or_insert((endpoint.clone(), why));
                }
            }
        }
        if order.is_empty() {
            return Err(match failing {
                None => InvokeError::NoEndpoint {
                    service: service.name.to_string(),
                },
                Some((endpoint, why)) => InvokeError::ProviderUnhealthy {
                    service: service.name.to_string(),
                    endpoint,
                    why: match candidates.len() - 1 {
                        0 => why,
                        1 => format!("{why} (its other instance fails too)"),
                        others => format!("{why} (its {others} other instances fail too)"),
                    },
                },
            });
        }
        let start = service.turn.fetch_add(1, Ordering::Relaxed) % order.len();
        order.rotate_left(start);
        Ok(Self {
            service: Arc::clone(service),
            order,
            at: 0,
            moved_on: 0,
        })
    }

    /// Where the next attempt goes.
    pub(crate) fn endpoint(&self) -> &str {
        &self.service.instances[self.order[self.at]].endpoint
    }

    /// Whether, after an attempt the provider never received, an instance not yet tried so
    /// is left to move on to.
    pub(crate) fn can_move_on(&self) -> bool {
        self.moved_on + 1 < self.order.len()
    }

    /// After an attempt the provider never received: moves on to the next instance (call
    /// when [`Self::can_move_on`]).
    pub(crate) fn move_on_unsent(&mut self) {
        self.moved_on += 1;
        self.advance();
    }

    /// Before a retry: moves on to the next instance (back to the first after the last).
    pub(crate) fn advance(&mut self) {
        self.at = (self.at + 1) % self.order.len();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::envelope::TenantId;
    use crate::registry::instance::Contract;
    use crate::registry::lease::Lease;
    use crate::registry::validate::validate_service;
    use crate::registry::{Instance, InstanceId, ServiceName, ServiceSpec, ToolSpec};

    /// A contract of `version` with one tool, `work`, described as `description`.
    fn contract(version: &str, description: &str) -> Arc<Contract> {
        let spec = ServiceSpec {
            name: "svc".into(),
            version: version.into(),
            endpoint: String::new(),
            tools: vec![ToolSpec {
                name: "work".into(),
                description: description.into(),
                input_schema: Some(serde_json::json!({"type": "object"})),
                output_schema: None,
                capabilities: Vec::new(),
                timeout_ms: None,
                domains: Vec::new(),
                categories: Vec::new(),
                annotations: Default::default(),
            }],
            ttl: None,
            instance_id: String::new(),
        };
        let valid = validate_service(&spec, &Default::default()).expect("valid");
        Arc::new(Contract::new(valid.version, valid.tools))
    }

    fn instance(id: &str, endpoint: &str, contract: &Arc<Contract>) -> Arc<Instance> {
        Arc::new(Instance {
            id: InstanceId::parse(id).expect("valid"),
            endpoint: endpoint.to_owned(),
            registered_at: SystemTime::now(),
            lease: Lease::new(Duration::from_secs(60)),
            contract: Arc::clone(contract),
        })
    }

    fn service(instances: Vec<Arc<Instance>>) -> Arc<ServiceEntry> {
        let name = ServiceName::parse("svc").expect("valid");
        Arc::new(ServiceEntry::new(TenantId(0), name, instances))
    }

    fn same(endpoints: &[(&str, &str)]) -> Arc<ServiceEntry> {
        let contract = contract("1.0.0", "works");
        let instances = endpoints
            .iter()
            .map(|(id, endpoint)| instance(id, endpoint, &contract))
            .collect();
        service(instances)
    }

    fn tried(route: &mut Route) -> Vec<String> {
        let mut seen = vec![route.endpoint().to_owned()];
        while route.can_move_on() {
            route.move_on_unsent();
            seen.push(route.endpoint().to_owned());
        }
        seen
    }

    fn route(entry: &Arc<ServiceEntry>, health: &ProviderHealthBook) -> Result<Route, InvokeError> {
        Route::of(entry, &entry.tools()[0], health)
    }

    #[test]
    fn calls_take_turns_and_an_unsent_call_tries_each_other_instance_once() {
        let entry = same(&[
            ("a", "http://a:1"),
            ("b", "http://b:1"),
            ("c", "http://c:1"),
        ]);
        let health = ProviderHealthBook::default();
        let firsts: Vec<String> = (0..3)
            .map(|_| {
                route(&entry, &health)
                    .expect("routes")
                    .endpoint()
                    .to_owned()
            })
            .collect();
        assert_eq!(firsts, ["http://a:1", "http://b:1", "http://c:1"]);
        let mut next = route(&entry, &health).expect("routes");
        assert_eq!(tried(&mut next), ["http://a:1", "http://b:1", "http://c:1"]);
        next.advance();
        assert_eq!(next.endpoint(), "http://a:1", "retries wrap around");
    }

    #[test]
    fn failing_instances_are_skipped_and_replicas_behind_one_address_count_once() {
        let entry = same(&[
            ("a", "http://lb:1"),
            ("b", "http://lb:1"),
            ("c", "http://c:1"),
        ]);
        let health = ProviderHealthBook::default();
        health.mark_unhealthy("http://c:1", "NOT_SERVING".to_owned());
        for _ in 0..3 {
            let mut next = route(&entry, &health).expect("routes");
            assert_eq!(tried(&mut next), ["http://lb:1"]);
        }
    }

    #[test]
    fn many_replicas_sharing_addresses_count_once_each() {
        let ids: Vec<(String, String)> = (0..12)
            .map(|n| (format!("r{n}"), format!("http://host{}:1", n % 4)))
            .collect();
        let pairs: Vec<(&str, &str)> = ids.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let entry = same(&pairs);
        let mut seen = tried(&mut route(&entry, &ProviderHealthBook::default()).expect("routes"));
        seen.sort();
        assert_eq!(
            seen,
            [
                "http://host0:1",
                "http://host1:1",
                "http://host2:1",
                "http://host3:1"
            ]
        );
    }

    #[test]
    fn no_endpoint_and_all_failing_are_told_apart() {
        let health = ProviderHealthBook::default();
        let entry = same(&[("a", ""), ("b", "")]);
        assert!(matches!(
            route(&entry, &health),
            Err(InvokeError::NoEndpoint { .. })
        ));
        let entry = same(&[("a", "http://a:1"), ("b", "http://b:1")]);
        health.mark_unhealthy("http://a:1", "down".to_owned());
        health.mark_unhealthy("http://b:1", "down".to_owned());
        match route(&entry, &health) {
            Err(InvokeError::ProviderUnhealthy { why, .. }) => {
                assert_eq!(why, "down (its other instance fails too)");
            }
            other => panic!("expected ProviderUnhealthy, got {other:?}"),
        }
    }

    /// During a rolling update the highest version leads, whatever registered last, and a
    /// call goes only to instances that registered the tool as the service lists it.
    #[test]
    fn the_highest_version_leads_and_calls_go_to_instances_that_registered_the_tool_so() {
        let (old, new) = (
            contract("1.0.0", "works"),
            contract("1.1.0", "works harder"),
        );
        let entry = service(vec![
            instance("new", "http://new:1", &new),
            instance("old", "http://old:1", &old),
        ]);
        assert_eq!(entry.version(), "1.1.0");
        let health = ProviderHealthBook::default();
        for _ in 0..3 {
            let mut next = route(&entry, &health).expect("routes");
            assert_eq!(tried(&mut next), ["http://new:1"]);
        }
        // A tool registered identically by both versions is served by both.
        let same_tool = contract("1.0.0", "works harder");
        let entry = service(vec![
            instance("new", "http://new:1", &new),
            instance("old", "http://old:1", &same_tool),
        ]);
        let mut next = route(&entry, &health).expect("routes");
        assert_eq!(tried(&mut next).len(), 2);
        // Only replicas of another version left: the leader's lease lapsed, not yet swept.
        let mut leader = instance("new", "http://new:1", &new);
        Arc::get_mut(&mut leader).expect("unshared").lease = Lease::new(Duration::from_millis(200));
        let entry = service(vec![instance("old", "http://old:1", &old), leader]);
        assert_eq!(entry.version(), "1.1.0");
        std::thread::sleep(Duration::from_millis(300));
        assert!(matches!(
            route(&entry, &health),
            Err(InvokeError::NoInstanceOffers { .. })
        ));
    }
}
