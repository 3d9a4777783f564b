//! Tenant access: which tenants a caller may act for, by the identity its client certificate
//! names (`[[tenant_access]]` in `toolplane.toml`).
//!
//! Without rules every caller may name any tenant, as before. With rules (which need mutual TLS,
//! `tls_client_ca_file`), each connection's client certificate is read once, when it is
//! accepted: its URI names (SPIFFE ids such as `spiffe://cluster.local/ns/agents/sa/planner`,
//! as service meshes and cert-manager issue them) and DNS names are its identities, and the
//! tenants the rules grant any of them are the tenants its calls may name. A call naming another
//! tenant is refused before anything is read or changed. A certificate whose identities no rule
//! lists is granted no tenant.
//!
//! Identities are compared exactly (no wildcards): a rule names one certificate identity.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::envelope::TenantId;

/// One `[[tenant_access]]` entry: the tenants a certificate identity may act for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantAccessRule {
    /// A URI name (e.g. a SPIFFE id) or DNS name of client certificates, compared exactly.
    pub identity: String,
    /// The tenants it may act for.
    #[serde(default)]
    pub tenants: Vec<u64>,
    /// Whether it may act for every tenant (an operator's identity); then `tenants` is empty.
    #[serde(default)]
    pub all_tenants: bool,
}

/// Which tenants a grant covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tenants {
    /// Every tenant.
    All,
    /// These tenants (none when empty).
    Only(BTreeSet<TenantId>),
}

impl Tenants {
    fn add(&mut self, other: &Tenants) {
        match (&mut *self, other) {
            (Tenants::All, _) => {}
            (_, Tenants::All) => *self = Tenants::All,
            (Tenants::Only(mine), Tenants::Only(theirs)) => mine.extend(theirs.iter().copied()),
        }
    }
}

impl fmt::Display for Tenants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tenants::All => f.write_str("every tenant"),
            Tenants::Only(tenants) if tenants.is_empty() => f.write_str("no tenant"),
            Tenants::Only(tenants) => {
                let listed: Vec<String> = tenants.iter().map(ToString::to_string).collect();
                write!(f, "tenants {}", listed.join(", "))
            }
        }
    }
}

/// The tenant access rules, checked: an identity to the tenants it is granted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantAccess {
    grants: HashMap<String, Tenants>,
}

impl TenantAccess {
    /// The rules, checked: each names an identity, once, and either tenants or `all_tenants`.
    /// The error says which entry is at fault and how.
    pub fn from_rules(rules: &[TenantAccessRule]) -> Result<Self, String> {
        let mut grants = HashMap::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let at = format!("tenant_access entry {} ({:?})", index + 1, rule.identity);
            let identity = rule.identity.trim();
            if identity.is_empty() || identity != rule.identity {
                return Err(format!(
                    "{at}: identity must be a certificate's URI or DNS name, without spaces"
                ));
            }
            let tenants = match (rule.all_tenants, rule.tenants.is_empty()) {
                (true, true) => Tenants::All,
                (false, false) => {
                    Tenants::Only(rule.tenants.iter().copied().map(TenantId).collect())
                }
                (true, false) => {
                    return Err(format!(
                        "{at}: all_tenants = true grants every tenant; leave tenants out"
                    ));
                }
                (false, true) => {
                    return Err(format!(
                        "{at}: grants nothing; list its tenants (tenants = [1, 2]) or set \
                         all_tenants = true"
                    ));
                }
            };
            if grants.insert(identity.to_owned(), tenants).is_some() {
                return Err(format!(
                    "{at}: identity is listed twice; give it one entry with all its tenants"
                ));
            }
        }
        Ok(Self { grants })
    }

    /// Whether there are no rules (every caller may name any tenant).
    pub fn is_open(&self) -> bool {
        self.grants.is_empty()
    }

    /// How many identities the rules name.
    pub fn identities(&self) -> usize {
        self.grants.len()
    }

    /// What a caller presenting `certificate` (DER; `None` for none) is granted: the tenants
    /// of every rule naming one of its URI or DNS names.
    pub fn grant_for_certificate(&self, certificate: Option<&[u8]>) -> CallerGrant {
        let identities = certificate.map(certificate_identities).unwrap_or_default();
        self.grant_for(identities)
    }

    /// What a caller with `identities` is granted.
    pub fn grant_for(&self, identities: Vec<String>) -> CallerGrant {
        let mut tenants = Tenants::Only(BTreeSet::new());
        for identity in &identities {
            if let Some(granted) = self.grants.get(identity) {
                tenants.add(granted);
            }
        }
        CallerGrant {
            identities,
            tenants,
        }
    }
}

/// The URI and DNS names of a DER certificate, URIs first; none when it cannot be read (rustls
/// verified it already, so that would be a name form x509-parser does not know).
fn certificate_identities(der: &[u8]) -> Vec<String> {
    let Ok((_, certificate)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(names)) = certificate.subject_alternative_name() else {
        return Vec::new();
    };
    let names = &names.value.general_names;
    let uris = names.iter().filter_map(|name| match name {
        GeneralName::URI(uri) => Some((*uri).to_owned()),
        _ => None,
    });
    let dns = names.iter().filter_map(|name| match name {
        GeneralName::DNSName(dns) => Some((*dns).to_owned()),
        _ => None,
    });
    uris.chain(dns).collect()
}

/// What one caller (one connection) may act for, worked out when its connection was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerGrant {
    /// The identities its certificate names.
    identities: Vec<String>,
    /// The tenants they are granted.
    tenants: Tenants,
}

impl CallerGrant {
    /// Whether the caller may act for `tenant`.
    pub fn check(&self, tenant: TenantId) -> Result<(), AccessError> {
        let allowed = match &self.tenants {
            Tenants::All => true,
            Tenants::Only(tenants) => tenants.contains(&tenant),
        };
        if allowed {
            return Ok(());
        }
        Err(AccessError::TenantNotGranted {
            tenant,
            caller: self.caller(),
            granted: self.tenants.to_string(),
        })
    }

    /// The caller as an error names it: its certificate's identities.
    fn caller(&self) -> String {
        if self.identities.is_empty() {
            "a certificate with no URI or DNS name".to_owned()
        } else {
            self.identities.join(", ")
        }
    }
}

/// A call its caller may not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The call names a tenant the caller's certificate is not granted.
    #[error(
        "the caller's certificate ({caller}) may not act for tenant {tenant}: tenant_access \
         grants it {granted}"
    )]
    TenantNotGranted {
        /// The tenant the call named.
        tenant: TenantId,
        /// The identities of the caller's certificate.
        caller: String,
        /// What it is granted, as words.
        granted: String,
    },
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
