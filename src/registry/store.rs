//! The narrow storage interface the registry stands on, and the change events it publishes.
//! The embedded [`super::memory::MemoryStore`] implements it; a distributed backend can
//! implement it too without touching the gRPC layer.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::broadcast;

use super::error::RegistryError;
use super::lease::LeaseId;
use super::model::{
    Capability, RegisteredTool, ServiceEntry, ServiceName, ToolName, ToolRef, ValidatedService,
};
use super::quota::{TenantQuota, Usage};
use super::taxonomy::labels_match;
use crate::envelope::TenantId;

/// A tool's position in a listing: (tool name, service name).
pub type ToolKey = (String, String);

/// What happened to a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeKind {
    /// The service was registered and was not live before.
    Added,
    /// The service registered again, or an instance joined or left it; these tools changed
    /// definition (the leading contract changed).
    Updated(Vec<ToolChange>),
    /// The service's last instance deregistered.
    Removed,
    /// The lease of the service's last instance ran out.
    Expired,
}

/// A tool whose definition changed in an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChange {
    /// The tool's name.
    pub tool: ToolName,
    /// The definition hash before; `None` when the tool is new.
    pub old_sha256: Option<String>,
    /// The definition hash after; `None` when the tool was removed.
    pub new_sha256: Option<String>,
}

/// One change to the set of live services.
#[derive(Debug, Clone)]
pub struct RegistryEvent {
    /// The revision this change produced; strictly increasing.
    pub revision: u64,
    /// The tenant owning the service.
    pub tenant: TenantId,
    /// The service concerned.
    pub service: ServiceName,
    /// What happened.
    pub kind: ChangeKind,
    /// The service as it is after the change (on Added and Updated).
    pub entry: Option<Arc<ServiceEntry>>,
    /// The transport layer's encoded form, built once by the first watcher that sends it.
    pub wire: super::model::WireSlot,
}

/// A change as its tenant's channel holds it for the receivers that have not read it yet:
/// its revision and service, and the event itself until the channel lets it go to bound the
/// memory held for receivers far behind (`watch_event_buffer_bytes`,
/// `registry::tenant_events`). A receiver finding it gone has fallen too far behind.
#[derive(Debug)]
pub struct BufferedEvent {
    /// The revision the change produced.
    pub revision: u64,
    /// The service concerned.
    pub service: ServiceName,
    event: arc_swap::ArcSwapOption<RegistryEvent>,
}

impl BufferedEvent {
    /// `event`, buffered.
    pub fn new(event: RegistryEvent) -> Self {
        Self {
            revision: event.revision,
            service: event.service.clone(),
            event: arc_swap::ArcSwapOption::from_pointee(event),
        }
    }

    /// The event, or `None` when its channel let it go: the receiver is too far behind (by
    /// the bytes of the changes it has not read) and should be ended as lagged.
    pub fn event(&self) -> Option<Arc<RegistryEvent>> {
        self.event.load_full()
    }

    /// Lets the event go (the receivers still to read it will find it gone).
    pub(super) fn let_go(&self) {
        self.event.store(None);
    }
}

/// Filters of a tool listing; they combine with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Only tools of this service.
    pub service: Option<ServiceName>,
    /// Only tools declaring this capability.
    pub capability: Option<Capability>,
    /// Only tools whose name starts with this.
    pub name_prefix: Option<String>,
    /// Only tools with this domain or one under it ([`super::taxonomy::labels_match`]).
    pub domain: Option<String>,
    /// Only tools with this category or one under it.
    pub category: Option<String>,
}

impl ToolFilter {
    /// Whether a tool passes the filters.
    pub fn matches(&self, tool: &ToolRef) -> bool {
        self.service
            .as_ref()
            .is_none_or(|service| *service == tool.service.name)
            && self.matches_tool(&tool.tool)
    }

    /// Whether any filter reads the tools themselves (every one but the service's).
    pub fn filters_tools(&self) -> bool {
        self.capability.is_some()
            || self.name_prefix.is_some()
            || self.domain.is_some()
            || self.category.is_some()
    }

    /// Whether a tool passes the filters that read the tools themselves.
    pub fn matches_tool(&self, tool: &RegisteredTool) -> bool {
        self.capability
            .is_none_or(|capability| tool.capabilities.contains(&capability))
            && self
                .name_prefix
                .as_deref()
                .is_none_or(|prefix| tool.name.as_str().starts_with(prefix))
            && self
                .domain
                .as_deref()
                .is_none_or(|domain| labels_match(&tool.domains, domain))
            && self
                .category
                .as_deref()
                .is_none_or(|category| labels_match(&tool.categories, category))
    }

    /// The filters as text, for binding a page token to them.
    pub fn fingerprint(&self) -> String {
        let mut text = format!(
            "{}|{:?}|{}",
            self.service.as_ref().map_or("", |s| s.as_str()),
            self.capability,
            self.name_prefix.as_deref().unwrap_or("")
        );
        for (name, value) in [("domain", &self.domain), ("category", &self.category)] {
            if let Some(value) = value {
                text.push_str(&format!("|{name}={value}"));
            }
        }
        text
    }
}

/// The start of a watch: the live services at one revision, and the events after it.
#[derive(Debug)]
pub struct WatchStart {
    /// The revision of the snapshot.
    pub revision: u64,
    /// The tenant's live services at that revision, sorted by name.
    pub services: Vec<Arc<ServiceEntry>>,
    /// Every event from the snapshot on (events at or below `revision` are already in it).
    pub events: broadcast::Receiver<Arc<BufferedEvent>>,
    /// The bytes of changed services the tenant's channel holds for its receivers (0: no
    /// bound): a receiver finding an event let go is that far behind.
    pub max_buffered_bytes: u64,
    /// The services left out of `services` because every lease of theirs had run out, whose
    /// removal (and its event) was still to come: almost always none. See [`AfterSnapshot`].
    pub lapsed: Vec<ServiceName>,
}

impl WatchStart {
    /// Which of `events` the watcher is still to be told of.
    pub fn after_snapshot(&self) -> AfterSnapshot {
        AfterSnapshot {
            revision: self.revision,
            lapsed: self.lapsed.clone(),
        }
    }
}

/// Which events a watch that started from a snapshot is still to be told of: those after the
/// snapshot, but for the going (REMOVED or EXPIRED) of a service the snapshot left out as
/// lapsed, which the watcher never saw (it would otherwise be told a service it was never
/// told of had gone).
#[derive(Debug, Clone)]
pub struct AfterSnapshot {
    revision: u64,
    /// The services left out as lapsed whose first event since has not come yet.
    lapsed: Vec<ServiceName>,
}

impl AfterSnapshot {
    /// The revision of the snapshot.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether `event`, the next of the tenant's events, is news to the watcher.
    pub fn is_news(&mut self, event: &RegistryEvent) -> bool {
        if event.revision <= self.revision {
            return false;
        }
        let Some(at) = (self.lapsed.iter()).position(|service| *service == event.service) else {
            return true;
        };
        // The first event of a lapsed service is its going: by the expiry task, or by the
        // registration that found it lapsed (which then adds it again, in an event of its
        // own).
        self.lapsed.swap_remove(at);
        !matches!(event.kind, ChangeKind::Removed | ChangeKind::Expired)
    }
}

/// Storage for registered services. Reads only ever return live services.
pub trait RegistryStore: Send + Sync + Debug {
    /// Stores a validated registration as an instance of its service under a new lease,
    /// replacing the live instance of the same id; the service's other live instances stay.
    /// The entry returned has the new instance last. A registration that would take the tenant over `quota` is refused
    /// ([`RegistryError::QuotaExceeded`]) and changes nothing; the check and the insert
    /// happen under one lock.
    fn register(
        &self,
        tenant: TenantId,
        service: ValidatedService,
        quota: &TenantQuota,
    ) -> Result<Arc<ServiceEntry>, RegistryError>;
    /// Renews an instance's lease; returns when it now runs out.
    fn heartbeat(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<SystemTime, RegistryError>;
    /// Removes the instance holding `lease`, and the service with its last live instance.
    fn deregister(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<(), RegistryError>;
    /// One live service.
    fn service(&self, tenant: TenantId, name: &ServiceName) -> Option<Arc<ServiceEntry>>;
    /// Up to `limit` live services sorted by name, after `after` when given.
    fn services_after(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<ServiceEntry>>;
    /// Up to `limit` live tools passing `filter`, sorted by [`ToolKey`], after `after` when given.
    fn tools_after(
        &self,
        tenant: TenantId,
        filter: &ToolFilter,
        after: Option<&ToolKey>,
        limit: usize,
    ) -> Vec<ToolRef>;
    /// Every live tool of that name, sorted by service name.
    fn tools_named(&self, tenant: TenantId, name: &ToolName) -> Vec<ToolRef>;
    /// How many live tools the tenant has.
    fn tool_count(&self, tenant: TenantId) -> usize;
    /// Whether a service of that name is registered in the tenant or is remembered as gone
    /// (the store remembers a bounded number of gone names; see `registry::gone`).
    fn was_seen(&self, tenant: TenantId, name: &ServiceName) -> bool;
    /// Starts a watch of the tenant's services.
    fn watch(&self, tenant: TenantId) -> WatchStart;
    /// The revision of the registry now (every tenant's changes count).
    fn revision(&self) -> u64;
    /// Every distinct non-empty endpoint of a live service, in any tenant.
    fn endpoints(&self) -> std::collections::HashSet<String>;
    /// Subscribes to every event of the tenant, from now on.
    fn subscribe(&self, tenant: TenantId) -> broadcast::Receiver<Arc<BufferedEvent>>;
    /// What every tenant's registrations hold together, and how many tenants have any.
    fn totals(&self) -> (u64, Usage);
    /// How many live instances the services of every tenant have together.
    fn instance_count(&self) -> u64;
    /// How late the leases that lapsed since the start were removed.
    fn expiry_lateness(&self) -> super::lateness::ExpiryLateness;
}
