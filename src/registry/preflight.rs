//! The seed 000 pre-flight check: are the tools a caller needs registered?

use std::collections::HashSet;
use std::sync::Arc;

use super::model::{ServiceEntry, ServiceName, ToolName};

/// The most requirements one pre-flight check takes. A caller names the services it needs, a
/// handful; without a bound, one 4 MiB request of a few bytes per requirement made the check
/// (and its answer, a missing tool's sentence each) hundreds of thousands of entries long.
pub const MAX_REQUIREMENTS: usize = 1_000;
/// The most tool names one pre-flight check takes, across its requirements (as many as an
/// agent may be allowed).
pub const MAX_REQUIRED_TOOLS: usize = 10_000;

/// The tools a caller needs from one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The service.
    pub service: ServiceName,
    /// The tools; empty means the service itself must be registered.
    pub tools: Vec<ToolName>,
    /// When true, what is missing is only a warning.
    pub optional: bool,
}

/// Why a required tool is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingReason {
    /// No live service of that name.
    ServiceNotRegistered,
    /// The service is live but does not offer the tool.
    ToolNotOffered,
}

/// One tool (or service) that was not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTool {
    /// The service.
    pub service: ServiceName,
    /// The tool; `None` when the requirement named the service only.
    pub tool: Option<ToolName>,
    /// Why it is missing.
    pub reason: MissingReason,
    /// A sentence a person can act on.
    pub detail: String,
}

/// The result of a pre-flight check.
#[derive(Debug, Clone, Default)]
pub struct PreflightReport {
    /// Required tools that are missing.
    pub missing_required: Vec<MissingTool>,
    /// Optional tools that are missing.
    pub missing_optional: Vec<MissingTool>,
    /// Every requested service that was found, once each, in request order.
    pub services: Vec<Arc<ServiceEntry>>,
}

impl PreflightReport {
    /// True when every required tool was found.
    pub fn ok(&self) -> bool {
        self.missing_required.is_empty()
    }
}

/// Checks `requirements` against the services `lookup` finds.
pub fn check(
    requirements: &[Requirement],
    lookup: impl Fn(&ServiceName) -> Option<Arc<ServiceEntry>>,
) -> PreflightReport {
    let mut report = PreflightReport::default();
    let mut found_already = HashSet::new();
    for requirement in requirements {
        let found = lookup(&requirement.service);
        let mut missing = Vec::new();
        match &found {
            None if requirement.tools.is_empty() => missing.push(MissingTool {
                service: requirement.service.clone(),
                tool: None,
                reason: MissingReason::ServiceNotRegistered,
                detail: format!("service {} is not registered", requirement.service),
            }),
            None => missing.extend(requirement.tools.iter().map(|tool| MissingTool {
                service: requirement.service.clone(),
                tool: Some(tool.clone()),
                reason: MissingReason::ServiceNotRegistered,
                detail: format!(
                    "service {} is not registered, so its tool {tool} is missing",
                    requirement.service
                ),
            })),
            Some(entry) => missing.extend(
                requirement
                    .tools
                    .iter()
                    .filter(|tool| entry.tool(tool.as_str()).is_none())
                    .map(|tool| MissingTool {
                        service: requirement.service.clone(),
                        tool: Some(tool.clone()),
                        reason: MissingReason::ToolNotOffered,
                        detail: format!(
                            "service {} {} does not offer tool {tool}",
                            entry.name,
                            entry.version()
                        ),
                    }),
            ),
        }
        if let Some(entry) = found
            && found_already.insert(entry.name.clone())
        {
            report.services.push(entry);
        }
        if requirement.optional {
            report.missing_optional.extend(missing);
        } else {
            report.missing_required.extend(missing);
        }
    }
    report
}
