//! The registry's state at one revision, and the edits writers make to a copy of it.

use std::sync::Arc;

use imbl::OrdMap;

use super::gone::GoneNames;
use super::instance::Instance;
use super::model::{ServiceEntry, ServiceName, ToolRef};
use super::quota::Usage;
use super::store::{ToolChange, ToolKey};
use crate::envelope::TenantId;

/// One tenant's live services and the index of their tools. A tenant with no services has
/// no index.
#[derive(Debug, Clone, Default)]
pub(super) struct TenantIndex {
    pub(super) services: OrdMap<ServiceName, Arc<ServiceEntry>>,
    pub(super) tools: OrdMap<ToolKey, ToolRef>,
    /// The sum of the services' `usage().tools`: more than the index holds while replicas
    /// of several versions hold several contracts.
    pub(super) tools_held: u64,
    /// The sum of the services' `usage().tool_bytes`.
    pub(super) tool_bytes: u64,
}

impl TenantIndex {
    pub(super) fn usage(&self) -> Usage {
        Usage {
            services: self.services.len() as u64,
            tools: self.tools_held,
            tool_bytes: self.tool_bytes,
        }
    }
}

/// An immutable view of the whole registry at one revision.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    pub(super) revision: u64,
    pub(super) tenants: imbl::HashMap<TenantId, TenantIndex>,
    pub(super) gone: GoneNames,
}

impl Snapshot {
    /// Every tenant's live instances at the monotonic time `now`.
    pub(super) fn live_instances(&self, now: u64) -> impl Iterator<Item = &Arc<Instance>> {
        self.tenants
            .values()
            .flat_map(|index| index.services.values())
            .flat_map(move |entry| entry.live_instances_at(now))
    }

    pub(super) fn tenant(&self, tenant: TenantId) -> Option<&TenantIndex> {
        self.tenants.get(&tenant)
    }
}

/// Removes a service that went (deregistered or expired) and remembers its name as gone.
pub(super) fn remove_gone_service(snapshot: &mut Snapshot, tenant: TenantId, name: &ServiceName) {
    if remove_service(snapshot, tenant, name).is_some() {
        snapshot.gone.remember(tenant, name.clone());
    }
}

/// Adds a service and its tools to its tenant's index (made when it is the first). A service
/// of that name must not be in the index.
pub(super) fn insert_service(snapshot: &mut Snapshot, entry: &Arc<ServiceEntry>) {
    let index = snapshot.tenants.entry(entry.tenant).or_default();
    let usage = entry.usage();
    index.tools_held += usage.tools;
    index.tool_bytes += usage.tool_bytes;
    for tool in entry.tools() {
        let key = (
            tool.name.as_str().to_owned(),
            entry.name.as_str().to_owned(),
        );
        index.tools.insert(
            key,
            ToolRef {
                service: Arc::clone(entry),
                tool: Arc::clone(tool),
            },
        );
    }
    index.services.insert(entry.name.clone(), Arc::clone(entry));
}

/// Puts `entry` in place of the service of its name, which only lost or gained instances.
pub(super) fn replace_service(snapshot: &mut Snapshot, entry: &Arc<ServiceEntry>) {
    remove_service(snapshot, entry.tenant, &entry.name);
    insert_service(snapshot, entry);
}

/// Removes the service and its tools, and the tenant's index when it was the last service.
pub(super) fn remove_service(
    snapshot: &mut Snapshot,
    tenant: TenantId,
    name: &ServiceName,
) -> Option<Arc<ServiceEntry>> {
    let index = snapshot.tenants.get_mut(&tenant)?;
    let removed = index.services.remove(name)?;
    let usage = removed.usage();
    index.tools_held -= usage.tools;
    index.tool_bytes -= usage.tool_bytes;
    for tool in removed.tools() {
        index
            .tools
            .remove(&(tool.name.as_str().to_owned(), name.as_str().to_owned()));
    }
    if index.services.is_empty() {
        snapshot.tenants.remove(&tenant);
    }
    Some(removed)
}

pub(super) fn tool_changes(old: &ServiceEntry, new: &ServiceEntry) -> Vec<ToolChange> {
    let mut changes = Vec::new();
    for tool in new.tools() {
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
    for tool in old.tools() {
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
