//! Pre-flight requirements as the CLI writes them: `SERVICE:TOOL[,TOOL...]` or `SERVICE`.

use std::str::FromStr;

use crate::pb;

/// The tools needed from one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRequirement {
    /// The service.
    pub service: String,
    /// The tools; empty means the service itself.
    pub tools: Vec<String>,
    /// Whether a miss is only a warning.
    pub optional: bool,
}

/// A requirement string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("requirement {0:?} must look like SERVICE:TOOL[,TOOL...] or SERVICE")]
pub struct ParseRequirementError(pub String);

impl ToolRequirement {
    /// A required set of tools.
    pub fn required(service: &str, tools: &[&str]) -> Self {
        Self {
            service: service.to_owned(),
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            optional: false,
        }
    }

    /// An optional set of tools.
    pub fn optional(service: &str, tools: &[&str]) -> Self {
        Self {
            optional: true,
            ..Self::required(service, tools)
        }
    }

    /// The wire form.
    pub fn to_pb(&self) -> pb::ServiceRequirement {
        pb::ServiceRequirement {
            service_name: self.service.clone(),
            tool_names: self.tools.clone(),
            optional: self.optional,
        }
    }
}

impl FromStr for ToolRequirement {
    type Err = ParseRequirementError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseRequirementError(text.to_owned());
        let (service, tools) = match text.split_once(':') {
            Some((service, tools)) => (
                service.trim(),
                tools.split(',').map(str::trim).collect::<Vec<_>>(),
            ),
            None => (text.trim(), Vec::new()),
        };
        if service.is_empty() || tools.iter().any(|tool| tool.is_empty()) {
            return Err(invalid());
        }
        Ok(Self::required(service, &tools))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_service_and_tools() {
        let parsed: ToolRequirement = "story-generator:generate_structure, generate_nodes"
            .parse()
            .expect("valid");
        assert_eq!(
            parsed,
            ToolRequirement::required("story-generator", &["generate_structure", "generate_nodes"])
        );
        let service_only: ToolRequirement = "quality-control".parse().expect("valid");
        assert!(service_only.tools.is_empty());
        assert!("svc:".parse::<ToolRequirement>().is_err());
        assert!(":tool".parse::<ToolRequirement>().is_err());
        assert!("svc:a,,b".parse::<ToolRequirement>().is_err());
    }
}
