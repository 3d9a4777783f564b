//! Call limits: a token bucket per (tenant, service), and optionally per (tenant, tool) for
//! tools named in the configuration, built on governor's GCRA limiters; and a bound on the
//! calls in flight per (tenant, service) (`invoke::in_flight`).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::in_flight::{InFlightCall, InFlightCalls};
use crate::envelope::TenantId;

/// A token bucket: a steady rate and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    /// Calls per second, sustained; 0 turns the limit off.
    pub per_second: u32,
    /// Calls allowed at once.
    pub burst: u32,
}

impl Bucket {
    fn quota(self) -> Option<Quota> {
        let rate = NonZeroU32::new(self.per_second)?;
        Some(Quota::per_second(rate).allow_burst(NonZeroU32::new(self.burst).unwrap_or(rate)))
    }
}

/// The call limit configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateLimitConfig {
    /// The bucket of every service; `None` means no service limit.
    pub per_service: Option<Bucket>,
    /// Buckets of single tools, keyed `service/tool`.
    pub per_tool: HashMap<String, Bucket>,
    /// The most calls in flight at once per (tenant, service); 0 sets no bound.
    pub max_in_flight_per_service: usize,
}

/// Which bucket ran dry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverLimit {
    /// `service S` or `tool S/T`.
    pub scope: String,
    /// When a call would be let through.
    pub retry_after: Duration,
}

/// The live limiters.
#[derive(Debug)]
pub struct RateLimits {
    per_service: Option<DefaultKeyedRateLimiter<(TenantId, String)>>,
    per_tool: HashMap<String, DefaultKeyedRateLimiter<TenantId>>,
    clock: DefaultClock,
    in_flight: InFlightCalls,
}

impl RateLimits {
    /// Limiters for `config`.
    pub fn new(config: &RateLimitConfig) -> Self {
        Self {
            per_service: config
                .per_service
                .and_then(Bucket::quota)
                .map(RateLimiter::keyed),
            per_tool: config
                .per_tool
                .iter()
                .filter_map(|(key, bucket)| {
                    bucket
                        .quota()
                        .map(|quota| (key.clone(), RateLimiter::keyed(quota)))
                })
                .collect(),
            clock: DefaultClock::default(),
            in_flight: InFlightCalls::new(config.max_in_flight_per_service),
        }
    }

    /// Takes a slot among the calls in flight to `service`, held until the slot is dropped, or
    /// answers the bound when every slot is taken.
    pub(super) fn begin_call(
        &self,
        tenant: TenantId,
        service: &str,
    ) -> Result<InFlightCall<'_>, usize> {
        self.in_flight.begin(tenant, service)
    }

    /// Takes one token from the tool's and the service's bucket, or says when to come back.
    pub fn check(&self, tenant: TenantId, service: &str, tool: &str) -> Result<(), OverLimit> {
        // Most deployments set no per-tool limits: skip building the key for them.
        if !self.per_tool.is_empty() {
            let tool_key = format!("{service}/{tool}");
            if let Some(limiter) = self.per_tool.get(&tool_key) {
                limiter.check_key(&tenant).map_err(|not_until| OverLimit {
                    scope: format!("tool {tool_key}"),
                    retry_after: not_until.wait_time_from(self.clock.now()),
                })?;
            }
        }
        if let Some(limiter) = &self.per_service {
            limiter
                .check_key(&(tenant, service.to_owned()))
                .map_err(|not_until| OverLimit {
                    scope: format!("service {service}"),
                    retry_after: not_until.wait_time_from(self.clock.now()),
                })?;
        }
        Ok(())
    }

    /// Forgets buckets that are full again, so idle keys take no memory.
    pub fn shrink(&self) {
        if let Some(limiter) = &self.per_service {
            limiter.retain_recent();
        }
        for limiter in self.per_tool.values() {
            limiter.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refusal_with_a_wait() {
        let limits = RateLimits::new(&RateLimitConfig {
            per_service: Some(Bucket {
                per_second: 1,
                burst: 2,
            }),
            per_tool: HashMap::new(),
            max_in_flight_per_service: 0,
        });
        assert!(limits.check(TenantId(1), "svc", "t").is_ok());
        assert!(limits.check(TenantId(1), "svc", "t").is_ok());
        let over = limits
            .check(TenantId(1), "svc", "t")
            .expect_err("bucket empty");
        assert_eq!(over.scope, "service svc");
        assert!(over.retry_after > Duration::ZERO && over.retry_after <= Duration::from_secs(1));
        assert!(
            limits.check(TenantId(2), "svc", "t").is_ok(),
            "tenants have their own buckets"
        );
    }

    #[test]
    fn tool_buckets_apply_to_their_tool_only() {
        let per_tool = HashMap::from([(
            "svc/slow".to_owned(),
            Bucket {
                per_second: 1,
                burst: 1,
            },
        )]);
        let limits = RateLimits::new(&RateLimitConfig {
            per_service: None,
            per_tool,
            max_in_flight_per_service: 0,
        });
        assert!(limits.check(TenantId(0), "svc", "slow").is_ok());
        assert_eq!(
            limits
                .check(TenantId(0), "svc", "slow")
                .expect_err("tool bucket")
                .scope,
            "tool svc/slow"
        );
        assert!(limits.check(TenantId(0), "svc", "fast").is_ok());
    }
}
