//! `toolplane export-rtfs DIR`: the live tools as RTFS capability definitions (seed 003,
//! "RTFS export"), one file per tool at `DIR/SERVICE/TOOL.rtfs`, written by
//! [`crate::mcp::rtfs::capability`].

use std::path::{Path, PathBuf};

use crate::client::{ClientError, ToolplaneClient};
use crate::json::struct_to_json;
use crate::mcp::rtfs::{CapabilityTool, capability};
use crate::pb;
use crate::registry::{ServiceName, ToolName};

/// What went wrong exporting.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The control plane could not be asked.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A file or directory could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// What could not be written.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No live service of that name.
    #[error("no live service {0}")]
    NoSuchService(String),
    /// The control plane answered a name that is no valid service or tool name, so no file is
    /// named after it (it could lead out of the directory).
    #[error("the control plane answered an invalid name: {0}")]
    InvalidName(String),
}

/// Writes the capability definition of every live tool (of `service`, when given) under
/// `dir`, replacing files of the same names; answers the files written, in order.
pub async fn export(
    client: &ToolplaneClient,
    dir: &Path,
    service: Option<&str>,
) -> Result<Vec<PathBuf>, ExportError> {
    let services: Vec<pb::DiscoveryInfo> = (client.all_services().await?.into_iter())
        .filter(|found| service.is_none_or(|name| found.service_name == name))
        .collect();
    if let (Some(name), true) = (service, services.is_empty()) {
        return Err(ExportError::NoSuchService(name.to_owned()));
    }
    let mut written = Vec::new();
    for found in &services {
        check_names(found).map_err(ExportError::InvalidName)?;
        let service_dir = dir.join(&found.service_name);
        std::fs::create_dir_all(&service_dir).map_err(|source| ExportError::Write {
            path: service_dir.clone(),
            source,
        })?;
        for tool in &found.available_tools {
            let path = service_dir.join(format!("{}.rtfs", tool.tool_name));
            std::fs::write(&path, definition(found, tool)).map_err(|source| {
                ExportError::Write {
                    path: path.clone(),
                    source,
                }
            })?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Checks that the names files are given after are valid service and tool names: letters,
/// digits and a few marks, never a path separator. The control plane the CLI asks is not
/// necessarily toolplane, and it names the files written.
fn check_names(service: &pb::DiscoveryInfo) -> Result<(), String> {
    ServiceName::parse(&service.service_name)?;
    for tool in &service.available_tools {
        ToolName::parse(&tool.tool_name)?;
    }
    Ok(())
}

/// The capability definition of `tool` of `service`.
fn definition(service: &pb::DiscoveryInfo, tool: &pb::ToolRegistration) -> String {
    let schema = |schema: Option<&prost_types::Struct>| schema.and_then(|s| struct_to_json(s).ok());
    let input = schema(tool.tool_schema.as_ref()).unwrap_or_default();
    let output = schema(tool.output_schema.as_ref());
    capability(&CapabilityTool {
        service: &service.service_name,
        version: &service.service_version,
        endpoint: &service.endpoint,
        name: &tool.tool_name,
        description: &tool.description,
        input_schema: &input,
        output_schema: output.as_ref(),
        domains: &tool.domains,
        categories: &tool.categories,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, tool: &str) -> pb::DiscoveryInfo {
        pb::DiscoveryInfo {
            service_name: name.to_owned(),
            available_tools: vec![pb::ToolRegistration {
                tool_name: tool.to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// A service or tool name that would lead out of the directory is refused; valid names,
    /// dots included, are taken.
    #[test]
    fn names_that_are_no_valid_names_name_no_file() {
        assert!(check_names(&service("files", "fs.read")).is_ok());
        assert!(
            check_names(&service("files", "..")).is_ok(),
            "a file `...rtfs`"
        );
        for (name, tool) in [
            ("..", "read"),
            ("a/b", "read"),
            ("files", "../../x"),
            ("files", "a/b"),
        ] {
            assert!(check_names(&service(name, tool)).is_err(), "{name} {tool}");
        }
    }
}
