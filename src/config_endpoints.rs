//! The endpoints beside the gRPC port a configuration asks for: metrics and MCP.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer};

use super::ServerConfig;
use crate::mcp::McpEndpoint;

impl ServerConfig {
    /// The address to serve metrics on, if any.
    pub fn metrics_address(&self) -> Result<Option<SocketAddr>, String> {
        side_address(
            "metrics_listen",
            &self.metrics_listen,
            "0.0.0.0:9090",
            "metrics",
        )
    }

    /// Who may reach the MCP endpoint (the hosts listed, or any when `*` is among them), and
    /// how many sessions it holds.
    pub fn mcp_endpoint(&self) -> McpEndpoint {
        let hosts: Vec<&str> = self.mcp_allowed_hosts.split(',').map(str::trim).collect();
        let allowed_hosts = if hosts.contains(&"*") {
            Vec::new()
        } else {
            hosts
                .into_iter()
                .filter(|host| !host.is_empty())
                .map(str::to_owned)
                .collect()
        };
        McpEndpoint {
            allowed_hosts,
            max_sessions: self.mcp_max_sessions,
            max_sessions_per_tenant: self.mcp_max_sessions_per_tenant,
        }
    }

    /// The address to serve the MCP endpoint on, if any.
    pub fn mcp_address(&self) -> Result<Option<SocketAddr>, String> {
        side_address(
            "mcp_listen",
            &self.mcp_listen,
            "0.0.0.0:8080",
            "MCP endpoint",
        )
    }
}

/// The address a side endpoint's `setting` names, if any.
fn side_address(
    setting: &str,
    value: &str,
    example: &str,
    what: &str,
) -> Result<Option<SocketAddr>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|error| {
        format!(
            "{setting} {value:?} is not an address such as {example} ({error}); leave it empty to serve no {what}"
        )
    })
}

/// The address `listen` (or `--listen`, `--metrics-listen`, `--mcp-listen`) names: an IP
/// address and a port. Host names are not looked up, since a name may stand for several
/// addresses.
pub fn parse_listen_address(value: &str) -> Result<SocketAddr, String> {
    value.parse().map_err(|error| {
        format!(
            "{value:?} is not an IP address and port such as 0.0.0.0:50051, [::]:50051 or \
             127.0.0.1:50051 ({error})"
        )
    })
}

/// Reads `listen` as [`parse_listen_address`] does.
pub(crate) fn deserialize_listen_address<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let value = String::deserialize(deserializer)?;
    parse_listen_address(&value).map_err(serde::de::Error::custom)
}
