//! Tenant access: which tenants a caller may act for, by the identity its client certificate
//! names or the bearer token it sends (`[[tenant_access]]` in `toolplane.toml`).
//!
//! Without rules every caller may name any tenant, as before. With rules, each connection's
//! client certificate (mutual TLS, `tls_client_ca_file`) is read once, when it is accepted: its
//! URI names (SPIFFE ids such as `spiffe://cluster.local/ns/agents/sa/planner`, as service
//! meshes and cert-manager issue them) and DNS names are its identities, and the tenants the
//! rules grant any of them are the tenants its calls may name. A call that sends
//! `authorization: Bearer TOKEN` is granted the tenants of the rule holding that token too
//! (tokens are read from environment variables or files the rules name, and kept only as
//! sha256 digests: `access::tokens`); a token no rule holds is refused as unauthenticated. A call
//! naming a tenant it is not granted is refused before anything is read or changed.
//!
//! Behind a proxy that terminates TLS (a mesh sidecar), the identities of a call are those of
//! the certificate the proxy forwards in `x-forwarded-client-cert`, believed only from the
//! proxies listed (`access::forwarded`).
//!
//! Identities and tokens are compared exactly (no wildcards); an `identity_prefix` takes in the
//! URI names that start with it, and ends where a path segment does.
//!
//! The rules are read again when the configuration file they came from changes, and calls on
//! open connections are checked against the new ones (`access::live`).
//!
//! Refused calls are logged within a budget for the process (`access::refusals_logged`).

mod forwarded;
mod live;
mod refusals_logged;
mod tokens;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::envelope::TenantId;
pub use forwarded::{FORWARDED_CLIENT_CERT, ForwardedIdentityHeader, L5D_CLIENT_ID, parse_proxies};
use ipnet::IpNet;
pub use live::{
    ConnectionAccess, IDENTITIES_NEED_CERTIFICATES, LiveTenantAccess, ReadTenantAccess,
    TenantAccessSource,
};
pub use refusals_logged::{REFUSALS_BURST, REFUSALS_WINDOW};
pub(crate) use refusals_logged::{RefusedAt, log_refused};
use tokens::Tokens;

/// One `[[tenant_access]]` entry: the tenants a certificate identity, or the callers sending a
/// bearer token, may act for.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantAccessRule {
    /// A URI name (e.g. a SPIFFE id) or DNS name of client certificates, compared exactly;
    /// empty in an entry of a token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// The start of URI names (ending in `/`, such as `spiffe://cluster.local/ns/agents/`):
    /// every client certificate whose URI name starts with it is granted this entry's tenants.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity_prefix: String,
    /// The environment variable holding a bearer token (`authorization: Bearer TOKEN`) that
    /// grants this entry's tenants; empty in an entry of an identity.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_env: String,
    /// A file holding bearer tokens, one per line, each granting this entry's tenants; read
    /// again when it changes (every `tls_reload_interval`), so a rotated token needs no
    /// restart. Empty in an entry of an identity or a variable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_file: String,
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

/// The tenant access rules, checked: an identity, or a token's digest, to the tenants it is
/// granted. Clones share the tokens, so a token file read again is seen by every clone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantAccess {
    grants: HashMap<String, Tenants>,
    /// URI name prefixes (each ending in `/`) and what they grant, in entry order.
    prefixes: Vec<(String, Tenants)>,
    tokens: Arc<Tokens>,
    /// The proxies whose forwarded certificates are believed.
    proxies: Vec<IpNet>,
    /// The header they name their callers in.
    forwarded_header: ForwardedIdentityHeader,
}

impl TenantAccess {
    /// The rules, checked, their tokens read from the process's environment: see
    /// [`Self::from_rules_with`].
    pub fn from_rules(rules: &[TenantAccessRule]) -> Result<Self, String> {
        Self::from_rules_with(rules, |variable| std::env::var(variable).ok())
    }

    /// The rules, checked: each names an identity, a token variable (set, and not empty) or a
    /// token file (readable, holding a token), once, and either tenants or `all_tenants`;
    /// `env` reads a variable. The error says which entry is at fault and how.
    pub fn from_rules_with(
        rules: &[TenantAccessRule],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        Self::from_rules_read_by(rules, env, |path| std::fs::read_to_string(path))
    }

    /// As [`Self::from_rules_with`], the token files read by `read_file` (a configuration
    /// read again reads them as it reads itself: once they settle).
    pub fn from_rules_read_by(
        rules: &[TenantAccessRule],
        env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&std::path::Path) -> std::io::Result<String>,
    ) -> Result<Self, String> {
        let mut grants = HashMap::new();
        let mut prefixes: Vec<(String, Tenants)> = Vec::new();
        let mut tokens = Tokens::default();
        for (index, rule) in rules.iter().enumerate() {
            let names = [
                &rule.identity,
                &rule.identity_prefix,
                &rule.token_env,
                &rule.token_file,
            ];
            let named = names
                .iter()
                .find(|name| !name.is_empty())
                .map_or("", |name| name);
            let at = format!("tenant_access entry {} ({named:?})", index + 1);
            let tenants = rule_tenants(rule).map_err(|problem| format!("{at}: {problem}"))?;
            match names.map(|name| name.as_str()) {
                ["", "", "", ""] => {
                    return Err(format!(
                        "{at}: name a certificate's URI or DNS name (identity), the start of \
                         URI names (identity_prefix), the variable of a bearer token \
                         (token_env) or a file of bearer tokens (token_file)"
                    ));
                }
                [identity, "", "", ""] if identity.trim() != identity => {
                    return Err(format!("{at}: identity must be written without spaces"));
                }
                ["", prefix, "", ""] => {
                    check_prefix(prefix).map_err(|problem| format!("{at}: {problem}"))?;
                    if prefixes.iter().any(|(known, _)| known == prefix) {
                        return Err(format!(
                            "{at}: its identity_prefix is in another entry too; give it one \
                             entry with all its tenants"
                        ));
                    }
                    prefixes.push((prefix.to_owned(), tenants));
                }
                [identity, "", "", ""] => {
                    if grants.insert(identity.to_owned(), tenants).is_some() {
                        return Err(format!(
                            "{at}: its identity is in another entry too; give it one entry \
                             with all its tenants"
                        ));
                    }
                }
                ["", "", variable, ""] => {
                    let token = env(variable).filter(|token| !token.trim().is_empty());
                    let token = token.ok_or_else(|| {
                        format!("{at}: token_env names {variable}, which is not set or is empty")
                    })?;
                    tokens.add_variable(at, variable, &token, tenants);
                }
                ["", "", "", file] => tokens.add_file(at, file, tenants),
                _ => {
                    return Err(format!(
                        "{at}: set one of identity, identity_prefix, token_env and token_file, \
                         not several"
                    ));
                }
            }
        }
        tokens.load(read_file)?;
        Ok(Self {
            grants,
            prefixes,
            tokens: Arc::new(tokens),
            proxies: Vec::new(),
            forwarded_header: ForwardedIdentityHeader::default(),
        })
    }

    /// These rules, with the certificate forwarded in `x-forwarded-client-cert` (or the header
    /// [`Self::with_forwarded_identity_header`] names) taken for a call's identities on
    /// connections from `proxies` (and only there).
    pub fn with_forwarded_client_cert_proxies(mut self, proxies: Vec<IpNet>) -> Self {
        self.proxies = proxies;
        self
    }

    /// These rules, with the callers of the listed proxies named in `header` (default
    /// `x-forwarded-client-cert`).
    pub fn with_forwarded_identity_header(mut self, header: ForwardedIdentityHeader) -> Self {
        self.forwarded_header = header;
        self
    }

    /// The header the listed proxies name their callers in.
    pub fn forwarded_identity_header(&self) -> ForwardedIdentityHeader {
        self.forwarded_header
    }

    /// The proxies whose forwarded certificates are believed.
    pub fn forwarded_client_cert_proxies(&self) -> &[IpNet] {
        &self.proxies
    }

    /// Whether there are no rules (every caller may name any tenant).
    pub fn is_open(&self) -> bool {
        self.grants.is_empty() && !self.tokens.any()
    }

    /// How many certificate identities the rules name (they need client certificates asked
    /// for).
    pub fn identities(&self) -> usize {
        self.grants.len() + self.prefixes.len()
    }

    /// How many bearer tokens the rules hold now.
    pub fn tokens(&self) -> usize {
        self.tokens.count()
    }

    /// The token files of `token_file` entries, to be read again when they change.
    pub fn token_files(&self) -> Vec<PathBuf> {
        self.tokens.files()
    }

    /// What the token files held when the tokens in use were read from them (see
    /// [`crate::grpc::tls_reload::Watched`]).
    pub fn token_files_read(&self) -> crate::grpc::tls_reload::Fingerprint {
        self.tokens.files_read()
    }

    /// Reads the token files again, each once it settles
    /// ([`crate::grpc::tls_reload::settled_text`]), and checks calls against the tokens they
    /// hold now; a file that cannot be read or holds no token, or a token in two entries, is
    /// an error naming the entry, and the tokens held before stay. Blocking.
    pub fn reload_token_files(&self) -> Result<(), String> {
        self.tokens.load(crate::grpc::tls_reload::settled_text)
    }

    /// Reads the token files again, as [`Self::reload_token_files`] does, if they no longer
    /// hold what they held when the tokens in use were read from them. Blocking.
    pub fn reload_changed_token_files(&self) -> Result<(), String> {
        self.tokens
            .load_if_changed(crate::grpc::tls_reload::settled_text)
    }

    /// What one call is granted: its connection's grant, and the tenants of the bearer token
    /// its `authorization` header sends, if any. A header that is not a bearer token the rules
    /// hold is refused.
    pub fn grant_for_call(
        &self,
        connection: &Arc<CallerGrant>,
        authorization: Option<&[u8]>,
    ) -> Result<Arc<CallerGrant>, AccessError> {
        let Some(header) = authorization.filter(|_| self.tokens.any()) else {
            return Ok(Arc::clone(connection));
        };
        let token = bearer_token(header).ok_or(AccessError::UnknownToken)?;
        let granted = self.tokens.grant(token).ok_or(AccessError::UnknownToken)?;
        if connection.identities.is_empty() {
            // No certificate identity to add (no client certificates, the usual case with
            // tokens): the token's grant as it is.
            return Ok(granted);
        }
        let mut grant = CallerGrant::clone(connection);
        grant.identities.extend(granted.identities.iter().cloned());
        grant.tenants.add(&granted.tenants);
        Ok(Arc::new(grant))
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
            for (prefix, granted) in &self.prefixes {
                if identity.starts_with(prefix.as_str()) {
                    tenants.add(granted);
                }
            }
        }
        CallerGrant {
            identities,
            tenants,
        }
    }
}

/// Whether `prefix` can be an `identity_prefix`: a URI up to a `/` after its authority, so
/// that it ends where a path segment does (`spiffe://td/ns/a/` must not take in
/// `spiffe://td/ns/ab/...`) and cannot take in every name of a scheme.
fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    let authority_and_path = prefix.split_once("://").map(|(_, rest)| rest);
    let authority = authority_and_path
        .and_then(|rest| rest.split_once('/'))
        .map(|(a, _)| a);
    if prefix.trim() != prefix || prefix.contains(char::is_whitespace) {
        return Err("identity_prefix must be written without spaces");
    }
    match authority {
        Some(authority) if !authority.is_empty() && prefix.ends_with('/') => Ok(()),
        _ => Err(
            "identity_prefix must be a URI with its authority that ends in / (such as \
             spiffe://cluster.local/ns/agents/), so that it ends where a path segment does",
        ),
    }
}

/// The tenants a rule grants.
fn rule_tenants(rule: &TenantAccessRule) -> Result<Tenants, &'static str> {
    match (rule.all_tenants, rule.tenants.is_empty()) {
        (true, true) => Ok(Tenants::All),
        (false, false) => Ok(Tenants::Only(
            rule.tenants.iter().copied().map(TenantId).collect(),
        )),
        (true, false) => Err("all_tenants = true grants every tenant; leave tenants out"),
        (false, true) => {
            Err("grants nothing; list its tenants (tenants = [1, 2]) or set all_tenants = true")
        }
    }
}

/// The token of an `authorization` header's `Bearer TOKEN` (the scheme in any case).
pub(crate) fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = header.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
        .filter(|token| !token.is_empty())
}

/// The URI and DNS names of a DER certificate, URIs first; none when it cannot be read (rustls
/// verified it already, so that would be a name form x509-parser does not know).
pub(crate) fn certificate_identities(der: &[u8]) -> Vec<String> {
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
    /// The identities its certificate names, then the bearer token it sent (by its variable).
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

    /// The caller as an error names it: its certificate's identities and its token's variable.
    fn caller(&self) -> String {
        if self.identities.is_empty() {
            "no certificate identity or bearer token".to_owned()
        } else {
            self.identities.join(", ")
        }
    }
}

/// A call its caller may not make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// The call's `authorization` header is not a bearer token the rules hold.
    #[error(
        "the authorization header is not a bearer token tenant_access holds: send \
         \"authorization: Bearer TOKEN\" with a token of a token_env or token_file entry, \
         or none"
    )]
    UnknownToken,
    /// A listed proxy forwarded a header naming its caller that cannot be read.
    #[error(
        "the {header} header from a proxy in forwarded_client_cert_proxies cannot be read \
         ({problem}): check what the proxy sends (Envoy: forward_client_cert_details), and \
         that forwarded_client_cert_header names the header it sets"
    )]
    ForwardedCertificateUnreadable {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The call names a tenant the caller's certificate is not granted.
    #[error(
        "the caller ({caller}) may not act for tenant {tenant}: tenant_access grants it \
         {granted}"
    )]
    TenantNotGranted {
        /// The tenant the call named.
        tenant: TenantId,
        /// The caller: its certificate's identities and its token's variable.
        caller: String,
        /// What it is granted, as words.
        granted: String,
    },
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
