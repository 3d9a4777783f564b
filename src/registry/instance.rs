//! Instances: the replicas of one service, each registered under a lease of its own.
//!
//! A provider deployed as several replicas registers one service from each, with an instance
//! id of its own (a pod name). Each instance heartbeats its own lease; the service lives while
//! any instance does, and calls are spread over the live ones (`invoke::route`). Without
//! instance ids, replicas would replace each other's lease at every registration and take
//! turns being the service.
//!
//! Each instance keeps the [`Contract`] it registered (its version and tools; instances that
//! registered the same one share it). During a rolling update replicas of two versions are
//! live at once: the service offers the contract of its highest version (the most recent
//! registration among equals), and a call goes only to instances that registered the called
//! tool exactly so, so an input checked against one schema never reaches a replica that
//! registered another.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::lease::Lease;
use super::model::{RegisteredTool, ServiceName};
use super::search_index::ServiceSearchIndex;

/// Longest instance id: a Kubernetes object name (a DNS subdomain) fits.
pub const MAX_INSTANCE_ID_LEN: usize = 253;

/// A replica's name within its service; empty for the service's unnamed instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(String);

impl InstanceId {
    /// Validates an instance id (empty is allowed); the error says what is wrong.
    pub fn parse(id: &str) -> Result<Self, String> {
        if id.len() > MAX_INSTANCE_ID_LEN {
            return Err(format!(
                "instance id must be at most {MAX_INSTANCE_ID_LEN} characters, got {}",
                id.len()
            ));
        }
        if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        {
            return Err(format!(
                "instance id {id:?} may contain only letters, digits, '.', '_', ':' and '-'"
            ));
        }
        Ok(Self(id.to_owned()))
    }

    /// The id as a string; empty for the unnamed instance.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(unnamed)")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// What one registration offers: the service's version and tools.
#[derive(Debug)]
pub struct Contract {
    /// The version (semantic versioning), as registered.
    pub version: String,
    /// The version, parsed; contracts of higher versions lead.
    pub semver: semver::Version,
    /// The tools offered, sorted by name.
    pub tools: Vec<Arc<RegisteredTool>>,
    /// The tools' search index, built on the first search that reads them.
    search_index: std::sync::OnceLock<ServiceSearchIndex>,
    /// The bytes the tools take in a discovery answer, when measured as they registered (see
    /// `registry::answer_bound`).
    answer_bytes: Option<usize>,
}

impl Contract {
    /// A contract of `version` (already validated as semantic versioning) and `tools`.
    pub fn new(version: String, tools: Vec<Arc<RegisteredTool>>) -> Self {
        let semver = semver::Version::parse(&version).unwrap_or(semver::Version::new(0, 0, 0));
        Self {
            version,
            semver,
            tools,
            search_index: Default::default(),
            answer_bytes: None,
        }
    }

    /// The same contract, its tools measured as taking `answer_bytes` in a discovery answer.
    pub fn measured(self, answer_bytes: Option<usize>) -> Self {
        Self {
            answer_bytes,
            ..self
        }
    }

    /// The bytes the tools take in a discovery answer, when they were measured.
    pub fn answer_bytes(&self) -> Option<usize> {
        self.answer_bytes
    }

    /// The search index of the tools, as offered by `service` (a contract belongs to one
    /// service); built on first use and kept while the contract is.
    pub fn search_index(&self, service: &ServiceName) -> &ServiceSearchIndex {
        self.search_index
            .get_or_init(|| ServiceSearchIndex::build(service.as_str(), &self.tools))
    }

    /// Finds a tool by name.
    pub fn tool(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools
            .binary_search_by(|tool| tool.name.as_str().cmp(name))
            .ok()
            .map(|index| &self.tools[index])
    }

    /// Whether `other` offers the same version and tools, exactly.
    pub fn same_as(&self, other: &Contract) -> bool {
        self.version == other.version
            && self.tools.len() == other.tools.len()
            && self
                .tools
                .iter()
                .zip(&other.tools)
                .all(|(mine, theirs)| mine.same_as(theirs))
    }

    /// Whether this contract offers `tool` exactly as `tool` is registered.
    pub fn offers(&self, tool: &RegisteredTool) -> bool {
        self.tool(tool.name.as_str())
            .is_some_and(|mine| mine.same_as(tool))
    }
}

/// One live registration of a service.
#[derive(Debug)]
pub struct Instance {
    /// Which replica it is.
    pub id: InstanceId,
    /// Where it serves ToolProviderService; may be empty.
    pub endpoint: String,
    /// When it registered.
    pub registered_at: SystemTime,
    /// The lease keeping it registered.
    pub lease: Lease,
    /// What it registered.
    pub contract: Arc<Contract>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_allow_pod_names_and_nothing_else() {
        for good in [
            "",
            "tools-7d9f8b6c5-x2kq4",
            "host:7001",
            "a.b_c",
            &"i".repeat(253),
        ] {
            assert!(InstanceId::parse(good).is_ok(), "{good}");
        }
        for bad in ["has space", "slash/", "ünï", &"i".repeat(254)] {
            assert!(InstanceId::parse(bad).is_err(), "{bad}");
        }
    }
}
