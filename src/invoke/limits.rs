//! Call limits: a token bucket per (tenant, service), built on governor's GCRA limiters, and
//! optionally per (tenant, tool) for tools named in the configuration (`invoke::tool_bucket`:
//! a call takes a token of both buckets or of neither); and a bound on the calls in flight per
//! (tenant, service) (`invoke::in_flight`).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::in_flight::{InFlightCall, InFlightCalls};
use super::tool_bucket::{Refused, ToolBucket};
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

/// The limiters in force, replaced whole when the limits change ([`RateLimits::reconfigure`]).
#[derive(Debug, Default)]
struct Limiters {
    per_service: Option<Arc<KeyedBucket<(TenantId, String)>>>,
    per_tool: HashMap<String, Arc<ToolBucket>>,
}

/// One bucket's limiter (a token bucket per key), and the bucket it was made for.
#[derive(Debug)]
struct KeyedBucket<K: std::hash::Hash + Eq + Clone> {
    bucket: Bucket,
    limiter: DefaultKeyedRateLimiter<K>,
}

impl<K: std::hash::Hash + Eq + Clone> KeyedBucket<K> {
    /// The limiter of `bucket`, kept from `before` when that was made for the same bucket (its
    /// keys keep the tokens they have); `None` when the bucket limits nothing.
    fn of(bucket: Bucket, before: Option<&Arc<Self>>) -> Option<Arc<Self>> {
        if let Some(kept) = before.filter(|before| before.bucket == bucket) {
            return Some(Arc::clone(kept));
        }
        let quota = bucket.quota()?;
        Some(Arc::new(Self {
            bucket,
            limiter: RateLimiter::keyed(quota),
        }))
    }
}

impl Limiters {
    /// The limiters of `config`, keeping those of `before` whose buckets are unchanged.
    fn of(config: &RateLimitConfig, before: &Limiters) -> Self {
        Self {
            per_service: config
                .per_service
                .and_then(|bucket| KeyedBucket::of(bucket, before.per_service.as_ref())),
            per_tool: (config.per_tool.iter())
                .filter_map(|(key, bucket)| {
                    let kept = before.per_tool.get(key);
                    let limiter = match kept.filter(|kept| kept.bucket == *bucket) {
                        Some(kept) => Arc::clone(kept),
                        None => Arc::new(ToolBucket::new(*bucket)?),
                    };
                    Some((key.clone(), limiter))
                })
                .collect(),
        }
    }
}

/// The live limiters.
#[derive(Debug)]
pub struct RateLimits {
    limiters: ArcSwap<Limiters>,
    /// The configuration the limiters were made for.
    config: ArcSwap<RateLimitConfig>,
    clock: DefaultClock,
    in_flight: InFlightCalls,
}

impl RateLimits {
    /// Limiters for `config`.
    pub fn new(config: &RateLimitConfig) -> Self {
        Self {
            limiters: ArcSwap::from_pointee(Limiters::of(config, &Limiters::default())),
            config: ArcSwap::from_pointee(config.clone()),
            clock: DefaultClock::default(),
            in_flight: InFlightCalls::new(config.max_in_flight_per_service),
        }
    }

    /// Puts `config` in force for the calls from now on: a bucket that changed starts full
    /// (for every key), an unchanged one keeps its keys' tokens, and the calls in flight are
    /// counted on against the new bound. Answers whether anything changed.
    pub fn reconfigure(&self, config: &RateLimitConfig) -> bool {
        if **self.config.load() == *config {
            return false;
        }
        let limiters = Limiters::of(config, &self.limiters.load());
        self.limiters.store(Arc::new(limiters));
        self.in_flight.set_max(config.max_in_flight_per_service);
        self.config.store(Arc::new(config.clone()));
        true
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

    /// Takes one token from the tool's and the service's bucket, or from neither and says
    /// when to come back.
    pub fn check(&self, tenant: TenantId, service: &str, tool: &str) -> Result<(), OverLimit> {
        let limiters = self.limiters.load();
        let service_check = || {
            let Some(service_bucket) = &limiters.per_service else {
                return Ok(());
            };
            (service_bucket.limiter)
                .check_key(&(tenant, service.to_owned()))
                .map_err(|not_until| OverLimit {
                    scope: format!("service {service}"),
                    retry_after: not_until.wait_time_from(self.clock.now()),
                })
        };
        // Most deployments set no per-tool limits: skip building the key for them.
        if !limiters.per_tool.is_empty() {
            let tool_key = format!("{service}/{tool}");
            if let Some(tool_bucket) = limiters.per_tool.get(&tool_key) {
                return (tool_bucket.take_with(tenant, tool_bucket.now(), service_check)).map_err(
                    |refused| match refused {
                        Refused::Empty(wait) => OverLimit {
                            scope: format!("tool {tool_key}"),
                            retry_after: wait,
                        },
                        Refused::Elsewhere(over) => over,
                    },
                );
            }
        }
        service_check()
    }

    /// Forgets buckets that are full again, so idle keys take no memory.
    pub fn shrink(&self) {
        let limiters = self.limiters.load();
        if let Some(service_bucket) = &limiters.per_service {
            service_bucket.limiter.retain_recent();
        }
        for tool_bucket in limiters.per_tool.values() {
            tool_bucket.shrink();
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

    /// A changed bucket starts full, an unchanged one keeps its tokens, and a bucket taken
    /// away limits nothing more.
    #[test]
    fn reconfigured_limits_apply_to_the_calls_after() {
        let one = Bucket {
            per_second: 1,
            burst: 1,
        };
        let config = |service: Option<Bucket>, tool: Option<Bucket>| RateLimitConfig {
            per_service: service,
            per_tool: tool
                .map(|bucket| HashMap::from([("svc/t".to_owned(), bucket)]))
                .unwrap_or_default(),
            max_in_flight_per_service: 0,
        };
        let limits = RateLimits::new(&config(Some(one), None));
        assert!(limits.check(TenantId(0), "svc", "t").is_ok());
        assert!(limits.check(TenantId(0), "svc", "t").is_err());
        assert!(
            !limits.reconfigure(&config(Some(one), None)),
            "nothing changed"
        );
        // A tool bucket added: the service bucket, unchanged, is still empty.
        assert!(limits.reconfigure(&config(Some(one), Some(one))));
        assert_eq!(
            limits
                .check(TenantId(0), "svc", "t")
                .expect_err("empty")
                .scope,
            "service svc"
        );
        // The service bucket changed: it starts full; the tool bucket, not spent by the call
        // the service refused, has its token for one call.
        let ten = Bucket {
            per_second: 10,
            burst: 10,
        };
        assert!(limits.reconfigure(&config(Some(ten), Some(one))));
        assert!(limits.check(TenantId(0), "svc", "t").is_ok());
        assert_eq!(
            limits
                .check(TenantId(0), "svc", "t")
                .expect_err("tool spent")
                .scope,
            "tool svc/t"
        );
        assert!(limits.check(TenantId(0), "svc", "other").is_ok());
        // Every bucket taken away.
        assert!(limits.reconfigure(&config(None, None)));
        for _ in 0..100 {
            assert!(limits.check(TenantId(0), "svc", "t").is_ok());
        }
    }
}
