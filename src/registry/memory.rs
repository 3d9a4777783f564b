//! The embedded in-memory store.
//!
//! Readers load an immutable `Snapshot` through `ArcSwap` and never wait on writers. Writers
//! take one mutex, build the next snapshot from persistent (`imbl`) maps that share structure
//! with the last one, publish it, and broadcast the change to the tenant's watchers
//! (`registry::tenant_events`), so events leave in revision order.
//!
//! Leases are measured on the monotonic clock and checked exactly on every read, so a lapsed
//! lease is never served. Removal of lapsed leases (the EXPIRED event, health flip) is driven
//! by `registry::expiry`, a tokio `DelayQueue` with millisecond resolution. moka's per-entry
//! expiry was considered: its timer wheel only processes the ~1.07 s bucket an entry lands in
//! after the wheel's tick has moved past it, so an eviction could be observed more than 1 s
//! late, which the lease contract does not allow.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use imbl::OrdMap;
use tokio::sync::{broadcast, mpsc};

use super::error::RegistryError;
use super::expiry::{ExpiryTicket, spawn_expiry_task};
use super::gone::GoneNames;
use super::lease::{Lease, LeaseId, monotonic_now};
use super::model::{ServiceEntry, ServiceName, ToolName, ToolRef, ValidatedService};
use super::quota::{TenantQuota, Usage};
use super::store::{
    ChangeKind, RegistryEvent, RegistryStore, ToolChange, ToolFilter, ToolKey, WatchStart,
};
use super::tenant_events::TenantEvents;
use crate::envelope::TenantId;

/// How many events a watcher may fall behind before it is ended.
pub const DEFAULT_EVENT_BUFFER: usize = 4096;

/// One tenant's live services and the index of their tools. A tenant with no services has
/// no index.
#[derive(Debug, Clone, Default)]
struct TenantIndex {
    services: OrdMap<ServiceName, Arc<ServiceEntry>>,
    tools: OrdMap<ToolKey, ToolRef>,
    /// The sum of the services' `usage().tool_bytes`.
    tool_bytes: u64,
}

impl TenantIndex {
    fn usage(&self) -> Usage {
        Usage {
            services: self.services.len() as u64,
            tools: self.tools.len() as u64,
            tool_bytes: self.tool_bytes,
        }
    }
}

/// An immutable view of the whole registry at one revision.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    revision: u64,
    tenants: imbl::HashMap<TenantId, TenantIndex>,
    gone: GoneNames,
}

impl Snapshot {
    fn tenant(&self, tenant: TenantId) -> Option<&TenantIndex> {
        self.tenants.get(&tenant)
    }
}

/// The embedded in-memory registry store.
#[derive(Debug)]
pub struct MemoryStore {
    snapshot: ArcSwap<Snapshot>,
    writer: Mutex<()>,
    events: TenantEvents,
    expiry: mpsc::UnboundedSender<ExpiryTicket>,
}

/// What the expiry task should do after asking the store to expire a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpiryOutcome {
    /// The lease was renewed: check again at this monotonic deadline.
    CheckAgainAt(u64),
    /// The lease expired and was removed, or is no longer the service's lease.
    Done,
}

impl MemoryStore {
    /// Creates the store and starts its expiry task on the current tokio runtime. Watchers may
    /// fall `event_buffer` events behind; the names of the last `gone_services_remembered`
    /// services to go are remembered (see `registry::gone`).
    pub fn start(event_buffer: usize, gone_services_remembered: usize) -> Arc<Self> {
        let (expiry, tickets) = mpsc::unbounded_channel();
        let store = Arc::new(Self {
            snapshot: ArcSwap::from_pointee(Snapshot {
                gone: GoneNames::new(gone_services_remembered),
                ..Snapshot::default()
            }),
            writer: Mutex::new(()),
            events: TenantEvents::new(event_buffer),
            expiry,
        });
        spawn_expiry_task(Arc::downgrade(&store), tickets);
        store
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data of its own (the snapshot is swapped atomically), so a
        // panic in another writer leaves nothing half-changed: recover from poisoning.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Publishes `next` as revision + 1 and broadcasts the change. Call with the writer lock.
    fn publish(
        &self,
        mut next: Snapshot,
        tenant: TenantId,
        service: ServiceName,
        kind: ChangeKind,
        entry: Option<Arc<ServiceEntry>>,
    ) {
        next.revision += 1;
        let revision = next.revision;
        self.snapshot.store(Arc::new(next));
        self.events.send(tenant, || RegistryEvent {
            revision,
            tenant,
            service,
            kind,
            entry,
            wire: Default::default(),
        });
    }

    /// Removes a lapsed lease, unless it was renewed or replaced meanwhile.
    pub(crate) fn expire(&self, ticket: &ExpiryTicket) -> ExpiryOutcome {
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        let Some(index) = current.tenant(ticket.tenant) else {
            return ExpiryOutcome::Done;
        };
        let Some(entry) = index.services.get(&ticket.service) else {
            return ExpiryOutcome::Done;
        };
        if entry.lease.id != ticket.lease {
            return ExpiryOutcome::Done;
        }
        if entry.lease.is_live() {
            return ExpiryOutcome::CheckAgainAt(entry.lease.deadline());
        }
        let mut next = (*current).clone();
        remove_gone_service(&mut next, ticket.tenant, &ticket.service);
        tracing::info!(tenant = %ticket.tenant, service = %ticket.service, "lease expired");
        self.publish(
            next,
            ticket.tenant,
            ticket.service.clone(),
            ChangeKind::Expired,
            None,
        );
        ExpiryOutcome::Done
    }
}

/// Removes a service that went (deregistered or expired) and remembers its name as gone.
fn remove_gone_service(snapshot: &mut Snapshot, tenant: TenantId, name: &ServiceName) {
    if remove_service(snapshot, tenant, name).is_some() {
        snapshot.gone.remember(tenant, name.clone());
    }
}

/// Removes the service and its tools, and the tenant's index when it was the last service.
fn remove_service(
    snapshot: &mut Snapshot,
    tenant: TenantId,
    name: &ServiceName,
) -> Option<Arc<ServiceEntry>> {
    let index = snapshot.tenants.get_mut(&tenant)?;
    let removed = index.services.remove(name)?;
    index.tool_bytes -= removed.usage().tool_bytes;
    for tool in &removed.tools {
        index
            .tools
            .remove(&(tool.name.as_str().to_owned(), name.as_str().to_owned()));
    }
    if index.services.is_empty() {
        snapshot.tenants.remove(&tenant);
    }
    Some(removed)
}

fn tool_changes(old: &ServiceEntry, new: &ServiceEntry) -> Vec<ToolChange> {
    let mut changes = Vec::new();
    for tool in &new.tools {
        let old_sha = old
            .tool(tool.name.as_str())
            .map(|t| t.definition_sha256.clone());
        if old_sha.as_deref() != Some(tool.definition_sha256.as_str()) {
            changes.push(ToolChange {
                tool: tool.name.clone(),
                old_sha256: old_sha,
                new_sha256: Some(tool.definition_sha256.clone()),
            });
        }
    }
    for tool in &old.tools {
        if new.tool(tool.name.as_str()).is_none() {
            changes.push(ToolChange {
                tool: tool.name.clone(),
                old_sha256: Some(tool.definition_sha256.clone()),
                new_sha256: None,
            });
        }
    }
    changes.sort_by(|a, b| a.tool.cmp(&b.tool));
    changes
}

impl RegistryStore for MemoryStore {
    fn register(
        &self,
        tenant: TenantId,
        service: ValidatedService,
        quota: &TenantQuota,
    ) -> Result<Arc<ServiceEntry>, RegistryError> {
        let entry = Arc::new(ServiceEntry {
            tenant,
            name: service.name,
            version: service.version,
            endpoint: service.endpoint,
            tools: service.tools,
            registered_at: SystemTime::now(),
            lease: Lease::new(service.ttl),
        });
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        // A lapsed lease not yet swept (the sweep runs within milliseconds) still counts.
        let index = current.tenant(tenant);
        let before = index.map_or_else(Usage::default, TenantIndex::usage);
        let replaced = index
            .and_then(|index| index.services.get(&entry.name))
            .map_or_else(Usage::default, |old| old.usage());
        let added = entry.usage();
        quota
            .check(before, before.replace(replaced, added))
            .map_err(|breach| RegistryError::QuotaExceeded {
                tenant,
                service: entry.name.clone(),
                breach,
            })?;
        let mut next = (*current).clone();
        let mut previous = remove_service(&mut next, tenant, &entry.name);
        if previous.as_ref().is_some_and(|old| !old.lease.is_live()) {
            // The old lease lapsed but was not swept yet: tell watchers before the new one.
            self.publish(next, tenant, entry.name.clone(), ChangeKind::Expired, None);
            next = (*self.snapshot.load_full()).clone();
            previous = None;
        }
        next.gone.forget(tenant, &entry.name);
        let index = next.tenants.entry(tenant).or_default();
        index.tool_bytes += added.tool_bytes;
        for tool in &entry.tools {
            let key = (
                tool.name.as_str().to_owned(),
                entry.name.as_str().to_owned(),
            );
            index.tools.insert(
                key,
                ToolRef {
                    service: Arc::clone(&entry),
                    tool: Arc::clone(tool),
                },
            );
        }
        index
            .services
            .insert(entry.name.clone(), Arc::clone(&entry));
        let kind = match previous {
            Some(old) => ChangeKind::Updated(tool_changes(&old, &entry)),
            None => ChangeKind::Added,
        };
        self.publish(
            next,
            tenant,
            entry.name.clone(),
            kind,
            Some(Arc::clone(&entry)),
        );
        // The receiver only goes away with the runtime; then nothing expires anyway.
        let _ = self.expiry.send(ExpiryTicket {
            tenant,
            service: entry.name.clone(),
            lease: entry.lease.id,
            deadline: entry.lease.deadline(),
        });
        Ok(entry)
    }

    fn heartbeat(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<SystemTime, RegistryError> {
        let not_found = || RegistryError::LeaseNotFound {
            service: service.clone(),
            lease_id: lease.to_string(),
        };
        let entry = self.service(tenant, service).ok_or_else(not_found)?;
        if entry.lease.id != lease {
            return Err(not_found());
        }
        entry.lease.renew().ok_or_else(not_found)?;
        Ok(entry.lease.expires_at())
    }

    fn deregister(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        let live = current
            .tenant(tenant)
            .and_then(|index| index.services.get(service))
            .filter(|entry| entry.lease.id == lease && entry.lease.is_live());
        if live.is_none() {
            return Err(RegistryError::LeaseNotFound {
                service: service.clone(),
                lease_id: lease.to_string(),
            });
        }
        let mut next = (*current).clone();
        remove_gone_service(&mut next, tenant, service);
        self.publish(next, tenant, service.clone(), ChangeKind::Removed, None);
        Ok(())
    }

    fn service(&self, tenant: TenantId, name: &ServiceName) -> Option<Arc<ServiceEntry>> {
        let snapshot = self.snapshot.load();
        snapshot
            .tenant(tenant)?
            .services
            .get(name)
            .filter(|entry| entry.lease.is_live())
            .cloned()
    }

    fn services_after(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<ServiceEntry>> {
        let snapshot = self.snapshot.load();
        let Some(index) = snapshot.tenant(tenant) else {
            return Vec::new();
        };
        let now = monotonic_now();
        index
            .services
            .iter()
            .skip_while(|(name, _)| after.is_some_and(|after| name.as_str() <= after))
            .map(|(_, entry)| entry)
            .filter(|entry| entry.lease.is_live_at(now))
            .take(limit)
            .cloned()
            .collect()
    }

    fn tools_after(
        &self,
        tenant: TenantId,
        filter: &ToolFilter,
        after: Option<&ToolKey>,
        limit: usize,
    ) -> Vec<ToolRef> {
        let snapshot = self.snapshot.load();
        let Some(index) = snapshot.tenant(tenant) else {
            return Vec::new();
        };
        let now = monotonic_now();
        let prefix = filter.name_prefix.as_deref().unwrap_or("");
        let start: ToolKey = match after {
            Some(after) if after.0.as_str() >= prefix => after.clone(),
            _ => (prefix.to_owned(), String::new()),
        };
        index
            .tools
            .range(start.clone()..)
            .skip_while(|(key, _)| after.is_some() && **key == start)
            .take_while(|(key, _)| key.0.starts_with(prefix))
            .map(|(_, tool)| tool)
            .filter(|tool| tool.service.lease.is_live_at(now) && filter.matches(tool))
            .take(limit)
            .cloned()
            .collect()
    }

    fn tools_named(&self, tenant: TenantId, name: &ToolName) -> Vec<ToolRef> {
        let snapshot = self.snapshot.load();
        let Some(index) = snapshot.tenant(tenant) else {
            return Vec::new();
        };
        let now = monotonic_now();
        index
            .tools
            .range((name.as_str().to_owned(), String::new())..)
            .take_while(|(key, _)| key.0 == name.as_str())
            .map(|(_, tool)| tool)
            .filter(|tool| tool.service.lease.is_live_at(now))
            .cloned()
            .collect()
    }

    fn tool_count(&self, tenant: TenantId) -> usize {
        let snapshot = self.snapshot.load();
        let now = monotonic_now();
        snapshot.tenant(tenant).map_or(0, |index| {
            index
                .services
                .values()
                .filter(|entry| entry.lease.is_live_at(now))
                .map(|entry| entry.tools.len())
                .sum()
        })
    }

    fn was_seen(&self, tenant: TenantId, name: &ServiceName) -> bool {
        let snapshot = self.snapshot.load();
        snapshot
            .tenant(tenant)
            .is_some_and(|index| index.services.contains_key(name))
            || snapshot.gone.contains(tenant, name)
    }

    fn watch(&self, tenant: TenantId) -> WatchStart {
        // Subscribe before reading the snapshot, so no event falls between the two.
        let events = self.events.subscribe(tenant);
        let snapshot = self.snapshot.load_full();
        let now = monotonic_now();
        let services = snapshot.tenant(tenant).map_or_else(Vec::new, |index| {
            index
                .services
                .values()
                .filter(|entry| entry.lease.is_live_at(now))
                .cloned()
                .collect()
        });
        WatchStart {
            revision: snapshot.revision,
            services,
            events,
        }
    }

    fn endpoints(&self) -> std::collections::HashSet<String> {
        let snapshot = self.snapshot.load();
        let now = monotonic_now();
        snapshot
            .tenants
            .values()
            .flat_map(|index| index.services.values())
            .filter(|entry| !entry.endpoint.is_empty() && entry.lease.is_live_at(now))
            .map(|entry| entry.endpoint.clone())
            .collect()
    }

    fn totals(&self) -> (u64, Usage) {
        let snapshot = self.snapshot.load();
        let mut total = Usage::default();
        let mut tenants = 0;
        for index in snapshot.tenants.values() {
            let usage = index.usage();
            if usage.services > 0 {
                tenants += 1;
            }
            total.services += usage.services;
            total.tools += usage.tools;
            total.tool_bytes += usage.tool_bytes;
        }
        (tenants, total)
    }

    fn subscribe(&self, tenant: TenantId) -> broadcast::Receiver<Arc<RegistryEvent>> {
        self.events.subscribe(tenant)
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
