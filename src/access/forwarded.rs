//! Client certificates forwarded by a proxy that terminates TLS in front of toolplane: a
//! service mesh's sidecar or an edge Envoy. Such a proxy checks the caller's certificate itself
//! and names it to toolplane in a header (`forwarded_client_cert_header`):
//! `x-forwarded-client-cert` (Envoy's, so Istio's: `By=...;Hash=...;URI=spiffe://...;DNS=...`,
//! one element per proxy, the nearest proxy's last; read with the `xfcc-parser` crate), or
//! `l5d-client-id` (Linkerd's inbound proxy: the caller's mesh identity, a DNS-like name, set
//! on meshed connections and removed from every other request).
//!
//! The header is believed only on connections from the proxies `forwarded_client_cert_proxies`
//! lists (a sidecar connects from a loopback address); anyone else could write it. Only the
//! header named is read: a proxy passes the other on as its caller wrote it.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::AccessError;

/// The header Envoy names its caller's certificate in.
pub const FORWARDED_CLIENT_CERT: &str = "x-forwarded-client-cert";

/// The header Linkerd's inbound proxy names its caller's mesh identity in.
pub const L5D_CLIENT_ID: &str = "l5d-client-id";

/// The header the listed proxies name their callers in (`forwarded_client_cert_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ForwardedIdentityHeader {
    /// `x-forwarded-client-cert`: Envoy's (Istio's sidecars, an edge Envoy).
    #[default]
    #[serde(rename = "x-forwarded-client-cert")]
    XForwardedClientCert,
    /// `l5d-client-id`: Linkerd's inbound proxy's.
    #[serde(rename = "l5d-client-id")]
    L5dClientId,
}

impl ForwardedIdentityHeader {
    /// The header's name.
    pub fn name(self) -> &'static str {
        match self {
            ForwardedIdentityHeader::XForwardedClientCert => FORWARDED_CLIENT_CERT,
            ForwardedIdentityHeader::L5dClientId => L5D_CLIENT_ID,
        }
    }

    /// The identities a listed proxy names in the header's `value`.
    pub(crate) fn identities(self, value: &[u8]) -> Result<Vec<String>, AccessError> {
        match self {
            ForwardedIdentityHeader::XForwardedClientCert => forwarded_identities(value),
            ForwardedIdentityHeader::L5dClientId => linkerd_identity(value).map(|id| vec![id]),
        }
    }
}

/// The mesh identity in Linkerd's `l5d-client-id`: one name, such as
/// `planner.agents.serviceaccount.identity.linkerd.cluster.local`.
fn linkerd_identity(value: &[u8]) -> Result<String, AccessError> {
    let unreadable = |problem: &str| AccessError::ForwardedCertificateUnreadable {
        header: L5D_CLIENT_ID,
        problem: problem.to_owned(),
    };
    let text = std::str::from_utf8(value)
        .map_err(|_| unreadable("it is not text"))?
        .trim();
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_graphic()) || text.contains(',') {
        return Err(unreadable("it is not one identity name"));
    }
    Ok(text.to_owned())
}

/// The proxies whose forwarded certificates are believed, parsed from a comma-separated list
/// of addresses (`127.0.0.6`) and networks (`10.0.0.0/8`). The error names what is not one.
pub fn parse_proxies(list: &str) -> Result<Vec<IpNet>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    format!(
                        "forwarded_client_cert_proxies: {item:?} is not an IP address or network \
                         (such as 127.0.0.6 or 10.0.0.0/8)"
                    )
                })
        })
        .collect()
}

/// Whether a connection from `peer` comes from one of `proxies` (an IPv4 peer seen on an IPv6
/// socket, `::ffff:a.b.c.d`, as its IPv4 address).
pub(super) fn from_proxy(proxies: &[IpNet], peer: Option<SocketAddr>) -> bool {
    let Some(peer) = peer else {
        return false;
    };
    let address = peer.ip().to_canonical();
    proxies.iter().any(|proxy| proxy.contains(&address))
}

/// The identities of the certificate a proxy forwarded: the URI and DNS names of the header's
/// last element (the nearest proxy's, which checked the certificate), URIs first. A header that
/// cannot be read is refused: a trusted proxy that sends one is misconfigured.
pub(super) fn forwarded_identities(header: &[u8]) -> Result<Vec<String>, AccessError> {
    let elements = xfcc_parser::element_list(header).map_err(|error| {
        AccessError::ForwardedCertificateUnreadable {
            header: FORWARDED_CLIENT_CERT,
            problem: error.to_string(),
        }
    })?;
    let Some(nearest) = elements.last() else {
        return Ok(Vec::new());
    };
    Ok(nearest
        .uri
        .iter()
        .chain(&nearest.dns)
        .map(ToString::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_addresses_or_networks() {
        let proxies = parse_proxies(" 127.0.0.6, 10.0.0.0/8,::1 ,").expect("valid");
        assert_eq!(proxies.len(), 3);
        let at = |address: &str| Some(SocketAddr::new(address.parse().expect("an IP"), 4000));
        assert!(from_proxy(&proxies, at("127.0.0.6")));
        assert!(from_proxy(&proxies, at("10.1.2.3")));
        assert!(from_proxy(&proxies, at("::1")));
        assert!(
            from_proxy(&proxies, at("::ffff:127.0.0.6")),
            "IPv4 on an IPv6 socket"
        );
        assert!(!from_proxy(&proxies, at("127.0.0.1")));
        assert!(!from_proxy(&proxies, None));
        let error = parse_proxies("127.0.0.6, sidecar").expect_err("not an address");
        assert!(error.contains("\"sidecar\""), "{error}");
        assert_eq!(parse_proxies(" , ").expect("none"), Vec::<IpNet>::new());
    }

    #[test]
    fn the_nearest_proxy_s_element_names_the_caller() {
        let header = br#"By=spiffe://cluster.local/ns/edge/sa/gateway;Hash=1a2b;URI=spiffe://cluster.local/ns/outside/sa/x,By=spiffe://cluster.local/ns/tp/sa/toolplane;Hash=3c4d;Subject="CN=planner,O=a\"b";URI=spiffe://cluster.local/ns/agents/sa/planner;DNS=planner.agents.svc;DNS=planner"#;
        assert_eq!(
            forwarded_identities(header).expect("readable"),
            [
                "spiffe://cluster.local/ns/agents/sa/planner",
                "planner.agents.svc",
                "planner"
            ]
        );
        assert_eq!(
            forwarded_identities(b"Hash=1a2b").expect("readable"),
            Vec::<String>::new()
        );
        assert!(matches!(
            forwarded_identities(b"URI=\"unterminated"),
            Err(AccessError::ForwardedCertificateUnreadable { .. })
        ));
    }

    #[test]
    fn linkerd_names_one_identity() {
        let header = ForwardedIdentityHeader::L5dClientId;
        let name = "planner.agents.serviceaccount.identity.linkerd.cluster.local";
        assert_eq!(
            header
                .identities(format!(" {name} ").as_bytes())
                .expect("readable"),
            [name]
        );
        for unreadable in [&b""[..], b"a b", b"a,b", b"\xff"] {
            let error = header.identities(unreadable).expect_err("not one name");
            assert!(
                error.to_string().contains("l5d-client-id header"),
                "{error}"
            );
        }
    }
}
