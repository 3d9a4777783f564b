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
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::{broadcast, mpsc};

use super::error::RegistryError;
use super::expiry::{ExpiryTicket, spawn_expiry_task};
use super::gone::GoneNames;
use super::instance::{Contract, Instance};
use super::lateness::ExpiryLateness;
use super::lease::{Lease, LeaseId, monotonic_now, wall_time_of};
use super::model::{ServiceEntry, ServiceName, ToolName, ToolRef, ValidatedService};
use super::quota::{TenantQuota, Usage};
use super::snapshot::{
    Snapshot, TenantIndex, insert_service, remove_gone_service, remove_service, replace_service,
    tool_changes,
};
use super::store::{
    BufferedEvent, ChangeKind, RegistryEvent, RegistryStore, ToolFilter, ToolKey, WatchStart,
};
use super::tenant_events::TenantEvents;
use crate::envelope::TenantId;

/// How many events a watcher may fall behind before it is ended.
pub const DEFAULT_EVENT_BUFFER: usize = 4096;
/// How many bytes of changed services a tenant's watchers may fall behind by before the
/// oldest changes are let go, and a watcher still to read them is ended (256 MiB).
pub const DEFAULT_EVENT_BUFFER_BYTES: u64 = 256 << 20;

/// The embedded in-memory registry store.
#[derive(Debug)]
pub struct MemoryStore {
    snapshot: ArcSwap<Snapshot>,
    writer: Mutex<()>,
    events: TenantEvents,
    expiry: mpsc::UnboundedSender<ExpiryTicket>,
    lateness: Mutex<ExpiryLateness>,
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
    /// fall `event_buffer` events behind (and [`DEFAULT_EVENT_BUFFER_BYTES`]); the names of
    /// the last `gone_services_remembered` services to go are remembered (see
    /// `registry::gone`).
    pub fn start(event_buffer: usize, gone_services_remembered: usize) -> Arc<Self> {
        Self::start_bounded(
            event_buffer,
            DEFAULT_EVENT_BUFFER_BYTES,
            gone_services_remembered,
        )
    }

    /// [`Self::start`], with watchers falling at most `event_buffer_bytes` of changed services
    /// behind (see `registry::tenant_events`; 0 sets no bound).
    pub fn start_bounded(
        event_buffer: usize,
        event_buffer_bytes: u64,
        gone_services_remembered: usize,
    ) -> Arc<Self> {
        let (expiry, tickets) = mpsc::unbounded_channel();
        let store = Arc::new(Self {
            snapshot: ArcSwap::from_pointee(Snapshot {
                gone: GoneNames::new(gone_services_remembered),
                ..Snapshot::default()
            }),
            writer: Mutex::new(()),
            events: TenantEvents::new(event_buffer, event_buffer_bytes),
            expiry,
            lateness: Mutex::default(),
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

    /// Removes a lapsed lease's instance, unless it was renewed or replaced meanwhile; the
    /// service goes with its last live instance.
    pub(crate) fn expire(&self, ticket: &ExpiryTicket) -> ExpiryOutcome {
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        let Some(entry) = current
            .tenant(ticket.tenant)
            .and_then(|index| index.services.get(&ticket.service))
        else {
            return ExpiryOutcome::Done;
        };
        let Some(instance) = entry.instance_with_lease(ticket.lease) else {
            return ExpiryOutcome::Done;
        };
        let now = monotonic_now();
        if instance.lease.is_live_at(now) {
            return ExpiryOutcome::CheckAgainAt(instance.lease.deadline());
        }
        let late = Duration::from_nanos(now.saturating_sub(instance.lease.deadline()));
        self.lateness
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .observe(late);
        // In whole microseconds, so the log says 1.789 rather than 1.7891190000000001.
        let late_ms = f64::from(u32::try_from(late.as_micros()).unwrap_or(u32::MAX)) / 1e3;
        tracing::info!(tenant = %ticket.tenant, service = %ticket.service, instance = %instance.id, late_ms, "lease expired");
        let mut next = (*current).clone();
        let (kind, entry) = match remaining_instances(entry, ticket.lease) {
            Some(remaining) => {
                let remaining = Arc::new(remaining);
                replace_service(&mut next, &remaining);
                let changes = tool_changes(entry, &remaining);
                (ChangeKind::Updated(changes), Some(remaining))
            }
            None => {
                remove_gone_service(&mut next, ticket.tenant, &ticket.service);
                (ChangeKind::Expired, None)
            }
        };
        self.publish(next, ticket.tenant, ticket.service.clone(), kind, entry);
        ExpiryOutcome::Done
    }
}

/// The service without the instance holding `lease` nor any lapsed one; `None` when no live
/// instance is left.
fn remaining_instances(entry: &ServiceEntry, lease: LeaseId) -> Option<ServiceEntry> {
    let now = monotonic_now();
    let remaining: Vec<Arc<Instance>> = entry
        .live_instances_at(now)
        .filter(|instance| instance.lease.id != lease)
        .cloned()
        .collect();
    (!remaining.is_empty()).then(|| entry.with_instances(remaining))
}

impl RegistryStore for MemoryStore {
    fn register(
        &self,
        tenant: TenantId,
        service: ValidatedService,
        quota: &TenantQuota,
    ) -> Result<Arc<ServiceEntry>, RegistryError> {
        let ValidatedService {
            name,
            version,
            endpoint,
            tools,
            ttl,
            instance: id,
        } = service;
        let measured = quota
            .answer
            .as_ref()
            .map(super::answer_bound::AnswerRoom::tools);
        let contract = Contract::new(version, tools).measured(measured);
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        let now = monotonic_now();
        let index = current.tenant(tenant);
        let old = index.and_then(|index| index.services.get(&name));
        let live_before: Vec<&Arc<Instance>> =
            old.map_or_else(Vec::new, |old| old.live_instances_at(now).collect());
        // Replicas that registered the same contract share one copy of it.
        let contract = live_before
            .iter()
            .map(|instance| &instance.contract)
            .find(|theirs| theirs.same_as(&contract))
            .cloned()
            .unwrap_or_else(|| Arc::new(contract));
        let registered = Arc::new(Instance {
            id,
            endpoint,
            registered_at: SystemTime::now(),
            lease: Lease::new(ttl),
            contract,
        });
        // The old service's live instances stay, but for the one this registration replaces.
        let mut instances: Vec<Arc<Instance>> = live_before
            .iter()
            .filter(|instance| instance.id != registered.id)
            .map(|instance| Arc::clone(instance))
            .collect();
        instances.push(Arc::clone(&registered));
        let entry = match old {
            Some(old) => old.with_instances(instances),
            None => ServiceEntry::new(tenant, name, instances),
        };
        // A lapsed lease not yet swept (the sweep runs within milliseconds) still counts.
        let before = index.map_or_else(Usage::default, TenantIndex::usage);
        let replaced = old.map_or_else(Usage::default, |old| old.usage());
        quota
            .check(before, before.replace(replaced, entry.usage()))
            .and_then(|()| {
                quota.check_instances(live_before.len() as u64, entry.instances.len() as u64)
            })
            .map_err(|breach| RegistryError::QuotaExceeded {
                tenant,
                service: entry.name.clone(),
                breach,
            })?;
        // What a watcher is told changed, when the old service is live (else it is added).
        let changes = old
            .filter(|old| old.is_live())
            .map(|old| tool_changes(old, &entry));
        if let Some(answer) = &quota.answer {
            answer.check(&entry, changes.as_deref().unwrap_or_default())?;
        }
        let entry = Arc::new(entry);
        let mut next = (*current).clone();
        let mut previous = remove_service(&mut next, tenant, &entry.name);
        if previous.as_ref().is_some_and(|old| !old.is_live()) {
            // The old leases lapsed but were not swept yet: tell watchers before the new one.
            self.publish(next, tenant, entry.name.clone(), ChangeKind::Expired, None);
            next = (*self.snapshot.load_full()).clone();
            previous = None;
        }
        next.gone.forget(tenant, &entry.name);
        insert_service(&mut next, &entry);
        let kind = match previous {
            // Live, so `changes` were worked out above (a lapsed lease never comes back).
            Some(old) => ChangeKind::Updated(changes.unwrap_or_else(|| tool_changes(&old, &entry))),
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
            lease: registered.lease.id,
            deadline: registered.lease.deadline(),
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
        let instance = entry.instance_with_lease(lease).ok_or_else(not_found)?;
        let deadline = instance.lease.renew().ok_or_else(not_found)?;
        Ok(wall_time_of(deadline))
    }

    fn deregister(
        &self,
        tenant: TenantId,
        service: &ServiceName,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        let _guard = self.lock();
        let current = self.snapshot.load_full();
        let Some(entry) = current
            .tenant(tenant)
            .and_then(|index| index.services.get(service))
            .filter(|entry| {
                entry
                    .instance_with_lease(lease)
                    .is_some_and(|instance| instance.lease.is_live())
            })
        else {
            return Err(RegistryError::LeaseNotFound {
                service: service.clone(),
                lease_id: lease.to_string(),
            });
        };
        let mut next = (*current).clone();
        match remaining_instances(entry, lease) {
            Some(remaining) => {
                let remaining = Arc::new(remaining);
                replace_service(&mut next, &remaining);
                let kind = ChangeKind::Updated(tool_changes(entry, &remaining));
                self.publish(next, tenant, service.clone(), kind, Some(remaining));
            }
            None => {
                remove_gone_service(&mut next, tenant, service);
                self.publish(next, tenant, service.clone(), ChangeKind::Removed, None);
            }
        }
        Ok(())
    }

    fn service(&self, tenant: TenantId, name: &ServiceName) -> Option<Arc<ServiceEntry>> {
        let snapshot = self.snapshot.load();
        snapshot
            .tenant(tenant)?
            .services
            .get(name)
            .filter(|entry| entry.is_live())
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
            .filter(|entry| entry.is_live_at(now))
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
            .filter(|tool| tool.service.is_live_at(now) && filter.matches(tool))
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
            .filter(|tool| tool.service.is_live_at(now))
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
                .filter(|entry| entry.is_live_at(now))
                .map(|entry| entry.tools().len())
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
        let (mut services, mut lapsed) = (Vec::new(), Vec::new());
        for entry in snapshot
            .tenant(tenant)
            .map(|index| index.services.values())
            .into_iter()
            .flatten()
        {
            if entry.is_live_at(now) {
                services.push(Arc::clone(entry));
            } else {
                lapsed.push(entry.name.clone());
            }
        }
        WatchStart {
            revision: snapshot.revision,
            services,
            events,
            max_buffered_bytes: self.events.max_bytes(),
            lapsed,
        }
    }

    fn revision(&self) -> u64 {
        self.snapshot.load().revision
    }

    fn endpoints(&self) -> std::collections::HashSet<String> {
        let snapshot = self.snapshot.load();
        snapshot
            .live_instances(monotonic_now())
            .filter(|instance| !instance.endpoint.is_empty())
            .map(|instance| instance.endpoint.clone())
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

    fn instance_count(&self) -> u64 {
        let snapshot = self.snapshot.load();
        snapshot.live_instances(monotonic_now()).count() as u64
    }

    fn subscribe(&self, tenant: TenantId) -> broadcast::Receiver<Arc<BufferedEvent>> {
        self.events.subscribe(tenant)
    }

    fn expiry_lateness(&self) -> ExpiryLateness {
        self.lateness
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "memory_watch_tests.rs"]
mod watch_tests;
