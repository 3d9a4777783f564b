//! A tenant's quota of registrations: how many services, how many tools, and how many bytes
//! of tool definitions it may have registered at once.
//!
//! Every tenant shares one process's memory. Each bound alone leaves a gap: the services
//! quota lets each service carry `max_tools_per_service` tools, and a count of tools lets
//! each tool carry `max_schema_bytes` of schema. Together they bound what one tenant's
//! registrations can hold.

use super::answer_bound::AnswerRoom;
use crate::envelope::TenantId;

/// Default most tools one tenant may have registered at once, across its services.
pub const DEFAULT_MAX_TOOLS_PER_TENANT: u64 = 100_000;
/// Default most bytes of tool definitions one tenant may have registered at once.
pub const DEFAULT_MAX_TOOL_BYTES_PER_TENANT: u64 = 256 * 1024 * 1024;

/// What a tenant's registrations hold, or what one registration adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Services.
    pub services: u64,
    /// Tools, across the services.
    pub tools: u64,
    /// Bytes of tool definitions: names, descriptions and schema text
    /// ([`super::RegisteredTool::definition_bytes`]).
    pub tool_bytes: u64,
}

impl Usage {
    /// `self` with `removed` taken out and `added` put in.
    pub fn replace(self, removed: Usage, added: Usage) -> Usage {
        Usage {
            services: self.services - removed.services + added.services,
            tools: self.tools - removed.tools + added.tools,
            tool_bytes: self.tool_bytes - removed.tool_bytes + added.tool_bytes,
        }
    }
}

/// The resource a quota bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaResource {
    /// Services registered at once.
    Services,
    /// Tools registered at once, across the tenant's services.
    Tools,
    /// Bytes of tool definitions registered at once.
    ToolBytes,
    /// Live instances of one service.
    Instances,
}

impl QuotaResource {
    /// The setting that sets this quota.
    pub fn setting(self) -> &'static str {
        match self {
            QuotaResource::Services => "max_services_per_tenant",
            QuotaResource::Tools => "max_tools_per_tenant",
            QuotaResource::ToolBytes => "max_tool_bytes_per_tenant",
            QuotaResource::Instances => "max_instances_per_service",
        }
    }

    /// What follows `tenants/N/` in the google.rpc `QuotaFailure` subject of a breach by a
    /// registration of `service`.
    pub fn subject(self, service: &str) -> String {
        match self {
            QuotaResource::Services => "services".to_owned(),
            QuotaResource::Tools => "tools".to_owned(),
            QuotaResource::ToolBytes => "tool_bytes".to_owned(),
            QuotaResource::Instances => format!("services/{service}/instances"),
        }
    }

    /// What is counted, in the plural.
    pub fn unit(self) -> &'static str {
        match self {
            QuotaResource::Services => "services",
            QuotaResource::Tools => "tools",
            QuotaResource::ToolBytes => "bytes of tool definitions",
            QuotaResource::Instances => "instances",
        }
    }
}

/// One tenant's bounds; `0` in a field sets no limit on that resource.
#[derive(Debug, Clone, Copy)]
pub struct TenantQuota {
    /// Most services registered at once.
    pub services: u64,
    /// Most tools registered at once, across the tenant's services.
    pub tools: u64,
    /// Most bytes of tool definitions registered at once.
    pub tool_bytes: u64,
    /// Most live instances of any one service.
    pub instances_per_service: u64,
    /// How large the service's description may grow, its registration's tools measured
    /// (see [`super::answer_bound`]); `None` sets no bound.
    pub answer: Option<AnswerRoom>,
}

impl TenantQuota {
    /// No limit on anything.
    pub const UNLIMITED: TenantQuota = TenantQuota {
        services: 0,
        tools: 0,
        tool_bytes: 0,
        instances_per_service: 0,
        answer: None,
    };

    /// Checks that a registration leaving its service with `after` live instances (it had
    /// `before`) stays within the limit; replacing an instance never grows the count.
    pub fn check_instances(&self, before: u64, after: u64) -> Result<(), QuotaBreach> {
        let limit = self.instances_per_service;
        if limit != 0 && after > limit && after > before {
            return Err(QuotaBreach {
                resource: QuotaResource::Instances,
                limit,
                would_have: after,
            });
        }
        Ok(())
    }

    /// Checks the usage a registration would leave, `after`, against the quota; `before` is
    /// what the tenant holds now. A resource that does not grow is never refused, so a tenant
    /// over a lowered quota can still re-register what it has, as long as it adds nothing.
    pub fn check(&self, before: Usage, after: Usage) -> Result<(), QuotaBreach> {
        let resources = [
            (
                QuotaResource::Services,
                self.services,
                before.services,
                after.services,
            ),
            (QuotaResource::Tools, self.tools, before.tools, after.tools),
            (
                QuotaResource::ToolBytes,
                self.tool_bytes,
                before.tool_bytes,
                after.tool_bytes,
            ),
        ];
        for (resource, limit, before, after) in resources {
            if limit != 0 && after > limit && after > before {
                return Err(QuotaBreach {
                    resource,
                    limit,
                    would_have: after,
                });
            }
        }
        Ok(())
    }
}

/// A registration that would take its tenant over one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaBreach {
    /// The resource over its quota.
    pub resource: QuotaResource,
    /// The quota.
    pub limit: u64,
    /// What the tenant would have held.
    pub would_have: u64,
}

/// The message of a registration refused for a quota, naming what to do about it.
pub fn breach_message(tenant: &TenantId, service: &str, breach: &QuotaBreach) -> String {
    let QuotaBreach {
        resource,
        limit,
        would_have,
    } = breach;
    let (unit, setting) = (resource.unit(), resource.setting());
    match resource {
        QuotaResource::Services => format!(
            "tenant {tenant} already has {} services registered, and may have at most {limit} \
             ({setting}); deregister a service it no longer needs before registering {service}, \
             or ask the operator to raise the limit",
            would_have - 1
        ),
        QuotaResource::Tools | QuotaResource::ToolBytes => format!(
            "registering {service} would give tenant {tenant} {would_have} {unit}, more than \
             the {limit} it may have ({setting}); register {service} with fewer or smaller \
             tools, deregister a service it no longer needs, or ask the operator to raise the \
             limit"
        ),
        QuotaResource::Instances => format!(
            "service {service} of tenant {tenant} already has {} live instances, and may have \
             at most {limit} ({setting}); a replica that replaces another (a restarted pod) \
             should register with its instance id, or the operator can raise the limit",
            would_have - 1
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(services: u64, tools: u64, tool_bytes: u64) -> Usage {
        Usage {
            services,
            tools,
            tool_bytes,
        }
    }

    const QUOTA: TenantQuota = TenantQuota {
        services: 2,
        tools: 10,
        tool_bytes: 1000,
        instances_per_service: 3,
        answer: None,
    };

    #[test]
    fn usage_up_to_each_limit_is_allowed() {
        assert_eq!(QUOTA.check(usage(1, 5, 500), usage(2, 10, 1000)), Ok(()));
        assert_eq!(
            TenantQuota::UNLIMITED.check(usage(0, 0, 0), usage(u64::MAX, u64::MAX, u64::MAX)),
            Ok(())
        );
    }

    #[test]
    fn the_first_resource_over_its_limit_is_named() {
        let breach = |resource, limit, would_have| {
            Err(QuotaBreach {
                resource,
                limit,
                would_have,
            })
        };
        assert_eq!(
            QUOTA.check(usage(2, 5, 500), usage(3, 11, 1001)),
            breach(QuotaResource::Services, 2, 3)
        );
        assert_eq!(
            QUOTA.check(usage(1, 5, 500), usage(2, 11, 1001)),
            breach(QuotaResource::Tools, 10, 11)
        );
        assert_eq!(
            QUOTA.check(usage(1, 5, 500), usage(2, 6, 1001)),
            breach(QuotaResource::ToolBytes, 1000, 1001)
        );
    }

    /// After the operator lowers a quota, a tenant above it may re-register what it has, or
    /// shrink, but not grow.
    #[test]
    fn a_tenant_above_a_lowered_quota_may_shrink_but_not_grow() {
        assert_eq!(QUOTA.check(usage(3, 20, 2000), usage(3, 20, 2000)), Ok(()));
        assert_eq!(QUOTA.check(usage(3, 20, 2000), usage(3, 15, 1500)), Ok(()));
        assert!(QUOTA.check(usage(3, 20, 2000), usage(3, 21, 1500)).is_err());
    }

    #[test]
    fn instances_may_be_replaced_at_the_limit_but_not_added() {
        assert_eq!(QUOTA.check_instances(2, 3), Ok(()));
        assert_eq!(QUOTA.check_instances(3, 3), Ok(()));
        assert_eq!(QUOTA.check_instances(5, 4), Ok(()));
        assert_eq!(
            QUOTA.check_instances(3, 4),
            Err(QuotaBreach {
                resource: QuotaResource::Instances,
                limit: 3,
                would_have: 4
            })
        );
        assert_eq!(TenantQuota::UNLIMITED.check_instances(1000, 1001), Ok(()));
    }

    #[test]
    fn replacing_takes_out_the_old_and_puts_in_the_new() {
        assert_eq!(
            usage(3, 20, 2000).replace(usage(1, 5, 500), usage(1, 2, 100)),
            usage(3, 17, 1600)
        );
    }

    #[test]
    fn messages_name_the_setting_and_the_service() {
        let message = breach_message(
            &TenantId(4),
            "search",
            &QuotaBreach {
                resource: QuotaResource::ToolBytes,
                limit: 1000,
                would_have: 1200,
            },
        );
        assert!(message.contains("max_tool_bytes_per_tenant"), "{message}");
        assert!(message.contains("search"), "{message}");
        assert!(
            message.contains("1200 bytes of tool definitions"),
            "{message}"
        );
    }
}
