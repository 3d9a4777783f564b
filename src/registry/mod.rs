//! The domain core: services register tools under leases; readers list, get, watch and
//! pre-flight them, always within one tenant.
//!
//! [`Registry`] validates requests and pages results; it stores through the narrow
//! [`store::RegistryStore`] trait, whose embedded implementation is [`memory::MemoryStore`].

pub mod annotations;
pub mod answer_bound;
pub mod compile;
pub mod error;
mod expiry;
pub mod gone;
pub mod instance;
pub mod lateness;
pub mod lease;
pub mod memory;
pub mod model;
pub mod paging;
pub mod pattern_memory;
pub mod preflight;
pub mod quota;
pub mod regex_cost;
pub mod schema_cost;
mod schema_graph;
pub mod search;
pub mod search_index;
pub mod search_terms;
mod snapshot;
pub mod stop_check;
pub mod store;
pub mod taxonomy;
mod tenant_events;
pub mod unique_items;
pub mod validate;
pub mod validators;
mod violations;

use std::sync::Arc;
use std::time::SystemTime;

pub use error::{FieldViolation, RegistryError, ViolationKind};
pub use instance::{Instance, InstanceId};
pub use lease::LeaseId;
pub use model::{
    Capability, HealthState, RegisteredTool, ServiceEntry, ServiceName, ServiceSpec, ToolName,
    ToolRef, ToolSpec,
};
pub use store::{RegistryStore, ToolFilter};
pub use validate::RegistrationLimits;
pub use validators::ValidatorCache;

use answer_bound::AnswerBound;
use quota::TenantQuota;

use crate::envelope::TenantId;

/// One page of a listing.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The token of the next page; `None` on the last page.
    pub next_page_token: Option<String>,
}

impl<T> Page<T> {
    /// Keeps the first `kept` items (at least one); when that leaves some out, the next page
    /// starts after the last one kept, whose token `token_after` gives. A page may hold fewer
    /// items than asked for (an answer too large to send whole is cut short).
    pub fn keep_first(&mut self, kept: usize, token_after: impl FnOnce(&T) -> String) {
        let kept = kept.max(1);
        if kept < self.items.len() {
            self.items.truncate(kept);
            self.next_page_token = Some(token_after(&self.items[kept - 1]));
        }
    }
}

/// A registration validated, its tools measured against the answer bound: ready to store
/// ([`Registry::prepare`], [`Registry::register_prepared`]).
#[derive(Debug)]
pub struct PreparedRegistration {
    validated: model::ValidatedService,
    answer: Option<answer_bound::AnswerRoom>,
}

/// The registry: validation and paging over a store.
#[derive(Debug, Clone)]
pub struct Registry {
    store: Arc<dyn RegistryStore>,
    limits: RegistrationLimits,
    validators: ValidatorCache,
    answer_bound: Option<AnswerBound>,
}

impl Registry {
    /// A registry over `store` enforcing `limits`, keeping at most `validator_cache_size`
    /// compiled validators (see [`validators`]).
    pub fn new(
        store: Arc<dyn RegistryStore>,
        limits: RegistrationLimits,
        validator_cache_size: u64,
    ) -> Self {
        Self {
            validators: ValidatorCache::new(validator_cache_size, limits.clone()),
            store,
            limits,
            answer_bound: None,
        }
    }

    /// The same registry refusing registrations whose service would be described in more
    /// than `bound` allows (see [`answer_bound`]).
    pub fn with_answer_bound(mut self, bound: AnswerBound) -> Self {
        self.answer_bound = Some(bound);
        self
    }

    /// The compiled validators of the tools being called.
    pub fn validators(&self) -> &ValidatorCache {
        &self.validators
    }

    /// The store, for watchers of raw events (grpc.health.v1).
    pub fn store(&self) -> &Arc<dyn RegistryStore> {
        &self.store
    }

    /// The limits registrations are held to.
    pub fn limits(&self) -> &RegistrationLimits {
        &self.limits
    }

    /// Validates and stores a registration under a new lease, within the tenant's quota of
    /// services, tools and tool bytes, and the answer bound if one is set; nothing is stored
    /// when it fails. [`Self::prepare`], then [`Self::register_prepared`].
    pub fn register(
        &self,
        tenant: TenantId,
        spec: &ServiceSpec,
    ) -> Result<Arc<ServiceEntry>, RegistryError> {
        self.register_prepared(tenant, self.prepare(spec)?)
    }

    /// Validates a registration (its schemas compiled and their costs checked) and measures
    /// its tools against the answer bound if one is set: the part of registering that takes
    /// time in proportion to the schemas, and changes nothing stored.
    pub fn prepare(&self, spec: &ServiceSpec) -> Result<PreparedRegistration, RegistryError> {
        let validated = validate::validate_service(spec, &self.limits)?;
        let answer = (self.answer_bound)
            .map(|bound| bound.room(&validated))
            .transpose()?;
        Ok(PreparedRegistration { validated, answer })
    }

    /// Stores a prepared registration under a new lease, within the tenant's quota of
    /// services, tools and tool bytes, and the answer bound; nothing is stored when it fails.
    pub fn register_prepared(
        &self,
        tenant: TenantId,
        prepared: PreparedRegistration,
    ) -> Result<Arc<ServiceEntry>, RegistryError> {
        let quota = TenantQuota {
            answer: prepared.answer,
            ..self.limits.quota()
        };
        self.store.register(tenant, prepared.validated, &quota)
    }

    /// Renews a lease.
    pub fn heartbeat(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<SystemTime, RegistryError> {
        self.store.heartbeat(tenant, service, lease)
    }

    /// Removes a service.
    pub fn deregister(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        self.store.deregister(tenant, service, lease)
    }

    /// One page of tools passing `filter`, sorted by (tool name, service name).
    pub fn list_tools(
        &self,
        tenant: TenantId,
        filter: &ToolFilter,
        page_size: i32,
        page_token: &str,
    ) -> Result<Page<ToolRef>, RegistryError> {
        let size = paging::page_size(page_size)?;
        let query = tools_query(filter);
        let after = paging::decode_token(page_token, &query, 2)?
            .map(|key| (key[0].clone(), key[1].clone()));
        let mut items = self
            .store
            .tools_after(tenant, filter, after.as_ref(), size + 1);
        let next_page_token = (items.len() > size).then(|| {
            items.truncate(size);
            Self::tools_token_after(filter, &items[size - 1])
        });
        Ok(Page {
            items,
            next_page_token,
        })
    }

    /// The token of the page of tools passing `filter` that follows `last`.
    pub fn tools_token_after(filter: &ToolFilter, last: &ToolRef) -> String {
        paging::encode_token(
            vec![last.tool.name.to_string(), last.service.name.to_string()],
            &tools_query(filter),
        )
    }

    /// The live tools passing `filter` that best match `query`, best first, at most
    /// `max_results` of them (0 means [`search::DEFAULT_MAX_RESULTS`]); see [`search`].
    pub fn search_tools(
        &self,
        tenant: TenantId,
        filter: &ToolFilter,
        query: &str,
        max_results: i32,
    ) -> Result<search::SearchResults, RegistryError> {
        let query = search::SearchQuery::parse(query)?;
        let limit = search::max_results(max_results)?;
        Ok(self.search(tenant, filter, &query, limit))
    }

    /// The best `limit` live tools passing `filter` for a query already read.
    pub fn search(
        &self,
        tenant: TenantId,
        filter: &ToolFilter,
        query: &search::SearchQuery,
        limit: usize,
    ) -> search::SearchResults {
        let services = match &filter.service {
            Some(name) => self.store.service(tenant, name).into_iter().collect(),
            None => self.store.services_after(tenant, None, usize::MAX),
        };
        search::rank(&services, filter, query, limit)
    }

    /// One tool. Without a service, a name several services offer is ambiguous.
    pub fn get_tool(
        &self,
        tenant: TenantId,
        tool: &ToolName,
        service: Option<&ServiceName>,
    ) -> Result<ToolRef, RegistryError> {
        let not_found = || RegistryError::ToolNotFound {
            tool: tool.clone(),
            service: service.cloned(),
        };
        if let Some(service) = service {
            let entry = self.store.service(tenant, service).ok_or_else(not_found)?;
            let registered = entry.tool(tool.as_str()).cloned().ok_or_else(not_found)?;
            return Ok(ToolRef {
                service: entry,
                tool: registered,
            });
        }
        let mut candidates = self.store.tools_named(tenant, tool);
        match candidates.len() {
            0 => Err(not_found()),
            1 => Ok(candidates.remove(0)),
            _ => Err(RegistryError::AmbiguousTool {
                tool: tool.clone(),
                candidates: candidates
                    .into_iter()
                    .map(|candidate| candidate.service.name.clone())
                    .collect(),
            }),
        }
    }

    /// One page of live services, sorted by name.
    pub fn list_services(
        &self,
        tenant: TenantId,
        page_size: i32,
        page_token: &str,
    ) -> Result<Page<Arc<ServiceEntry>>, RegistryError> {
        let size = paging::page_size(page_size)?;
        let after = paging::decode_token(page_token, "services", 1)?;
        let mut items =
            self.store
                .services_after(tenant, after.as_ref().map(|key| key[0].as_str()), size + 1);
        let next_page_token = (items.len() > size).then(|| {
            items.truncate(size);
            Self::services_token_after(&items[size - 1])
        });
        Ok(Page {
            items,
            next_page_token,
        })
    }

    /// The token of the page of services that follows `last`.
    pub fn services_token_after(last: &ServiceEntry) -> String {
        paging::encode_token(vec![last.name.to_string()], "services")
    }

    /// One live service.
    pub fn get_service(
        &self,
        tenant: TenantId,
        name: &ServiceName,
    ) -> Result<Arc<ServiceEntry>, RegistryError> {
        self.store
            .service(tenant, name)
            .ok_or_else(|| RegistryError::ServiceNotFound {
                service: name.clone(),
            })
    }

    /// Starts a watch of the tenant's services.
    pub fn watch(&self, tenant: TenantId) -> store::WatchStart {
        self.store.watch(tenant)
    }

    /// The revision of the registry now: it grows with every change of any tenant's services.
    pub fn revision(&self) -> u64 {
        self.store.revision()
    }

    /// Checks that the required tools are registered.
    pub fn preflight(
        &self,
        tenant: TenantId,
        requirements: &[preflight::Requirement],
    ) -> preflight::PreflightReport {
        preflight::check(requirements, |service| self.store.service(tenant, service))
    }

    /// Every live tool of the tenant, sorted by (tool name, service name).
    pub fn all_tools(&self, tenant: TenantId) -> Vec<ToolRef> {
        self.store
            .tools_after(tenant, &ToolFilter::default(), None, usize::MAX)
    }

    /// How many live tools the tenant has.
    pub fn tool_count(&self, tenant: TenantId) -> usize {
        self.store.tool_count(tenant)
    }
}

/// What a tools page token is bound to: the listing of tools passing `filter`.
fn tools_query(filter: &ToolFilter) -> String {
    format!("tools|{}", filter.fingerprint())
}
