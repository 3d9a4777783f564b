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

/// Names the first two of `endpoints` (each a setting or flag and the address it gives) that
/// cannot both be bound, and why; `None` when each can be. Two collide on the same port at the
/// same address, or when one is the unspecified address taking that port on every address of
/// its family (`0.0.0.0`) or, as Linux binds `[::]` by default, of both families. Port 0 takes
/// a free port each time, so it collides with nothing. Checked before binding, so that the
/// error names the settings rather than only the address already in use.
pub fn colliding_endpoints(endpoints: &[(&str, SocketAddr)]) -> Option<String> {
    endpoints.iter().enumerate().find_map(|(i, &(first, a))| {
        endpoints[i + 1..].iter().find_map(|&(second, b)| {
            let why = collision(a, b)?;
            Some(format!(
                "{first} {a} and {second} {b} cannot both be served: {why}; give each its own port"
            ))
        })
    })
}

/// Why `a` and `b` cannot both be bound, if they cannot.
fn collision(a: SocketAddr, b: SocketAddr) -> Option<String> {
    if a.port() != b.port() || a.port() == 0 {
        return None;
    }
    if a.ip() == b.ip() {
        return Some("they are the same address".to_owned());
    }
    [(a, b), (b, a)].into_iter().find_map(|(wide, other)| {
        let ip = wide.ip();
        let port = wide.port();
        match (ip.is_unspecified(), ip.is_ipv4(), other.is_ipv4()) {
            (true, true, true) => Some(format!("{ip} takes port {port} on every IPv4 address")),
            (true, false, _) => Some(format!(
                "[{ip}] takes port {port} on every address, IPv4 ones too"
            )),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collides(a: &str, b: &str) -> Option<String> {
        let address = |text: &str| text.parse().expect("address");
        colliding_endpoints(&[("listen", address(a)), ("mcp_listen", address(b))])
    }

    /// Two endpoints collide where Linux refuses to bind the second (checked with real
    /// sockets): the same address, or an unspecified one of the family, `[::]` of both.
    #[test]
    fn endpoints_collide_where_the_second_could_not_be_bound() {
        for (a, b) in [
            ("127.0.0.1:9000", "127.0.0.1:9000"),
            ("0.0.0.0:9000", "127.0.0.1:9000"),
            ("127.0.0.1:9000", "0.0.0.0:9000"),
            ("[::]:9000", "127.0.0.1:9000"),
            ("0.0.0.0:9000", "[::]:9000"),
            ("[::]:9000", "[::1]:9000"),
        ] {
            assert!(collides(a, b).is_some(), "{a} {b}");
        }
        for (a, b) in [
            ("127.0.0.1:9000", "127.0.0.1:9001"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("0.0.0.0:9000", "[::1]:9000"),
            ("[::1]:9000", "127.0.0.1:9000"),
            ("10.0.0.1:9000", "127.0.0.1:9000"),
        ] {
            assert_eq!(collides(a, b), None, "{a} {b}");
        }
        assert_eq!(
            collides("0.0.0.0:9000", "127.0.0.1:9000").as_deref(),
            Some(
                "listen 0.0.0.0:9000 and mcp_listen 127.0.0.1:9000 cannot both be served: \
                 0.0.0.0 takes port 9000 on every IPv4 address; give each its own port"
            )
        );
    }

    /// The first pair that collides is named, whichever two of three endpoints it is.
    #[test]
    fn the_colliding_pair_is_named() {
        let endpoints = [
            ("listen", "127.0.0.1:50051".parse().expect("address")),
            ("metrics_listen", "127.0.0.1:9090".parse().expect("address")),
            ("mcp_listen", "0.0.0.0:9090".parse().expect("address")),
        ];
        let said = colliding_endpoints(&endpoints).expect("a collision");
        assert!(
            said.starts_with("metrics_listen 127.0.0.1:9090 and mcp_listen 0.0.0.0:9090"),
            "{said}"
        );
    }
}
