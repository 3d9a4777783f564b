//! The tenant access rules in force while the server runs, and what one connection is granted
//! under them.
//!
//! The rules are replaced as a whole when the configuration file they came from changes
//! (`[[tenant_access]]`, `forwarded_client_cert_proxies`: a Kubernetes ConfigMap updated in
//! place), so granting a tenant or taking one away needs no restart. Every call is checked
//! against the rules in force when it arrives, also on connections accepted before the change:
//! a connection's grant is worked out again, once, the first time it is used under new rules.
//!
//! A server that started without rules (every caller may name any tenant) puts rules added to
//! the file in force the same way, so access can be ruled without a restart. Two changes are
//! refused, logged, and the rules in force stay: rules that name certificate identities on a
//! server that neither asks for client certificates nor believes a forwarding proxy (no caller
//! could have one), and removing every rule from a server that has some (that would let every
//! caller name any tenant, which takes a restart).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{AccessError, CallerGrant, TenantAccess, forwarded};

/// Reads the rules again from where they came from; the error says why they cannot be used.
pub type ReadTenantAccess = crate::config::ReadConfigPart<TenantAccess>;

/// Where the rules are read again from while the server runs: the configuration file, watched
/// for changes every `tls_reload_interval`, and how to read the rules from it.
pub type TenantAccessSource = crate::config::ConfigSource<TenantAccess>;

/// The rules in force: every connection checks its calls against the rules held here now.
#[derive(Debug)]
pub struct LiveTenantAccess {
    rules: ArcSwap<TenantAccess>,
    /// Whether the server asks callers for client certificates (fixed when it starts).
    client_certificates: bool,
}

/// Why rules naming certificate identities cannot be served without client certificates.
pub const IDENTITIES_NEED_CERTIFICATES: &str = "tenant_access entries naming an identity need \
    client certificates: serve TLS (tls_cert_file, tls_key_file) and set tls_client_ca_file, or \
    set forwarded_client_cert_proxies when a proxy terminates TLS in front of toolplane";

/// Whether the rules name identities no caller could have: the server neither asks for client
/// certificates nor believes a proxy forwarding them.
fn unservable(rules: &TenantAccess, client_certificates: bool) -> bool {
    rules.identities() > 0
        && !client_certificates
        && rules.forwarded_client_cert_proxies().is_empty()
}

impl LiveTenantAccess {
    /// The rules to serve, on a server that asks callers for client certificates or not;
    /// rules that are open (none: every caller may name any tenant) check no call until rules
    /// replace them. Rules naming identities that no caller could have are an error
    /// ([`IDENTITIES_NEED_CERTIFICATES`]).
    pub fn start(
        rules: &TenantAccess,
        client_certificates: bool,
    ) -> Result<Arc<Self>, &'static str> {
        if unservable(rules, client_certificates) {
            return Err(IDENTITIES_NEED_CERTIFICATES);
        }
        Ok(Arc::new(Self {
            rules: ArcSwap::from_pointee(rules.clone()),
            client_certificates,
        }))
    }

    /// The rules in force now.
    pub fn current(&self) -> Arc<TenantAccess> {
        self.rules.load_full()
    }

    /// Puts `rules` in force for every call from now on, also on open connections, also on a
    /// server whose rules were open until now. Open rules replacing rules that grant (every
    /// caller could then name any tenant) and rules naming identities no caller could have are
    /// refused, saying why, and the rules in force stay.
    pub fn replace(&self, rules: TenantAccess) -> Result<(), String> {
        if rules.is_open() && !self.rules.load().is_open() {
            return Err(
                "tenant_access has no entry now: letting every caller name any tenant takes a \
                 restart; the entries read before stay in force"
                    .to_owned(),
            );
        }
        if unservable(&rules, self.client_certificates) {
            return Err(format!(
                "{IDENTITIES_NEED_CERTIFICATES}; the entries read before stay in force"
            ));
        }
        // The rules hold the tokens their files held when the configuration was read. A file
        // rotated since may have been read again already, by the token files' watch, into the
        // rules these replace: the watch would not read it again for these, as it has not
        // changed since. So the files are read again now if they changed, and once more after
        // the rules are in force, for a reading the watch made meanwhile into the old rules.
        catch_up_with_token_files(&rules);
        // Unchanged rules (another setting changed) keep every connection's grant.
        if rules != **self.rules.load() {
            self.rules.store(Arc::new(rules));
        }
        catch_up_with_token_files(&self.rules.load());
        Ok(())
    }

    /// The token files of the rules in force, to be read again when they change.
    pub fn token_files(&self) -> Vec<PathBuf> {
        self.rules.load().token_files()
    }

    /// What the token files of the rules in force held when they were read.
    pub fn token_files_read(&self) -> crate::grpc::tls_reload::Fingerprint {
        self.rules.load().token_files_read()
    }

    /// Reads the token files of the rules in force again (see
    /// [`TenantAccess::reload_token_files`]).
    pub fn reload_token_files(&self) -> Result<(), String> {
        self.rules.load().reload_token_files()
    }
}

/// Reads the token files of `rules` again if they changed since the rules' tokens were read
/// from them. A file that cannot be used now is logged, and the tokens read before stay (the
/// token files' watch logs and counts it as it reads it).
fn catch_up_with_token_files(rules: &TenantAccess) {
    if let Err(error) = rules.reload_changed_token_files() {
        tracing::warn!(
            %error,
            "a token file changed since the tenant access rules were read from the \
             configuration and cannot be used; its tokens as read then stay"
        );
    }
}

/// What a connection is granted under one set of rules.
#[derive(Debug)]
struct Granted {
    /// The rules it was worked out under.
    rules: Arc<TenantAccess>,
    /// What the connection's certificate is granted (its identities kept, to work it out
    /// again under other rules).
    grant: Arc<CallerGrant>,
    /// Whether the connection comes from a proxy whose forwarded certificates are believed.
    from_proxy: bool,
}

impl Granted {
    fn new(rules: Arc<TenantAccess>, grant: CallerGrant, peer: Option<SocketAddr>) -> Self {
        Self {
            grant: Arc::new(grant),
            from_proxy: forwarded::from_proxy(&rules.proxies, peer),
            rules,
        }
    }
}

/// Tenant access on one connection: the rules in force, and what its caller's certificate is
/// granted, worked out as the connection was accepted and again after the rules change.
#[derive(Debug, Clone)]
pub struct ConnectionAccess {
    live: Arc<LiveTenantAccess>,
    peer: Option<SocketAddr>,
    granted: Arc<ArcSwap<Granted>>,
}

impl ConnectionAccess {
    /// Access on a connection from `peer` whose caller presented `certificate` (DER; `None`
    /// for none).
    pub fn new(
        live: &Arc<LiveTenantAccess>,
        certificate: Option<&[u8]>,
        peer: Option<SocketAddr>,
    ) -> Self {
        let rules = live.current();
        let grant = rules.grant_for_certificate(certificate);
        let granted = Granted::new(rules, grant, peer);
        Self {
            live: Arc::clone(live),
            peer,
            granted: Arc::new(ArcSwap::from_pointee(granted)),
        }
    }

    /// What the connection is granted under the rules in force now (a guard: no reference
    /// count is taken on the usual path, where the rules have not changed).
    fn granted(&self) -> arc_swap::Guard<Arc<Granted>> {
        let granted = self.granted.load();
        let rules = self.live.rules.load();
        if Arc::ptr_eq(&granted.rules, &rules) {
            return granted;
        }
        let grant = rules.grant_for(granted.grant.identities.clone());
        self.granted
            .store(Arc::new(Granted::new(Arc::clone(&rules), grant, self.peer)));
        self.granted.load()
    }

    /// What a call on the connection with these request headers is granted: on a connection
    /// from a listed proxy that names its caller (in `x-forwarded-client-cert` or
    /// `l5d-client-id`, as the rules say), that caller's grant (not the proxy's own), else the
    /// connection's; then the tenants of its bearer token (see
    /// [`TenantAccess::grant_for_call`]). `None` while the rules in force are open: the call
    /// may name any tenant, and what it sends is not looked at.
    pub fn grant_for_call(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<Arc<CallerGrant>>, AccessError> {
        let granted = self.granted();
        if granted.rules.is_open() {
            return Ok(None);
        }
        // Looked for only on connections from a listed proxy.
        let named_in = granted.rules.forwarded_header;
        let forwarded = granted
            .from_proxy
            .then(|| headers.get(named_in.name()))
            .flatten();
        let connection = match forwarded {
            Some(header) => Arc::new(
                granted
                    .rules
                    .grant_for(named_in.identities(header.as_bytes())?),
            ),
            None => Arc::clone(&granted.grant),
        };
        let authorization = headers.get(http::header::AUTHORIZATION);
        granted
            .rules
            .grant_for_call(&connection, authorization.map(|value| value.as_bytes()))
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{FORWARDED_CLIENT_CERT, TenantAccessRule};
    use crate::envelope::TenantId;

    fn rules(entries: &[(&str, &[u64])], proxies: &str) -> TenantAccess {
        let entries: Vec<TenantAccessRule> = entries
            .iter()
            .map(|(identity, tenants)| TenantAccessRule {
                identity: (*identity).to_owned(),
                tenants: tenants.to_vec(),
                ..TenantAccessRule::default()
            })
            .collect();
        TenantAccess::from_rules(&entries)
            .expect("valid rules")
            .with_forwarded_client_cert_proxies(
                crate::access::parse_proxies(proxies).expect("valid proxies"),
            )
    }

    fn certificate(uri: &str) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = vec![rcgen::SanType::URI(uri.try_into().expect("IA5"))];
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    fn may_act_for(access: &ConnectionAccess, headers: &http::HeaderMap, tenant: u64) -> bool {
        let grant = access.grant_for_call(headers).expect("granted something");
        grant.expect("ruled").check(TenantId(tenant)).is_ok()
    }

    /// A connection accepted before the rules change is checked against the new rules from
    /// its next call on, worked out once and kept.
    #[test]
    fn open_connections_follow_replaced_rules() {
        let planner = "spiffe://test/ns/a/sa/planner";
        let live = LiveTenantAccess::start(&rules(&[(planner, &[1])], ""), true).expect("servable");
        let der = certificate(planner);
        let access = ConnectionAccess::new(&live, Some(&der), None);
        let none = http::HeaderMap::new();
        assert!(may_act_for(&access, &none, 1));
        assert!(!may_act_for(&access, &none, 2));

        live.replace(rules(&[(planner, &[2])], ""))
            .expect("replaced");
        assert!(!may_act_for(&access, &none, 1), "tenant 1 taken away");
        assert!(may_act_for(&access, &none, 2), "tenant 2 granted");
        let first = access.granted();
        assert!(Arc::ptr_eq(&first, &access.granted()), "worked out once");

        live.replace(rules(&[(planner, &[2])], ""))
            .expect("the same rules");
        assert!(
            Arc::ptr_eq(&first, &access.granted()),
            "unchanged rules keep the connection's grant"
        );
    }

    /// Rules that would let every caller name any tenant, or name identities no caller could
    /// have, are refused saying why, and the rules in force stay.
    #[test]
    fn unservable_rules_are_refused_and_the_old_stay() {
        let live =
            LiveTenantAccess::start(&rules(&[("a.example", &[1])], ""), true).expect("servable");
        let error = live
            .replace(TenantAccess::default())
            .expect_err("no rules is refused");
        assert!(error.contains("takes a restart"), "{error}");
        assert_eq!(live.current().identities(), 1);

        let uncertified =
            LiveTenantAccess::start(&rules(&[("a.example", &[1])], "10.0.0.1"), false)
                .expect("servable: a proxy forwards certificates");
        let error = uncertified
            .replace(rules(&[("a.example", &[1])], ""))
            .expect_err("no proxy and no client certificates");
        assert!(error.contains("tls_client_ca_file"), "{error}");
        assert_eq!(
            uncertified.current().forwarded_client_cert_proxies().len(),
            1
        );
        assert_eq!(
            LiveTenantAccess::start(&rules(&[("a.example", &[1])], ""), false)
                .expect_err("no caller could have the identity"),
            IDENTITIES_NEED_CERTIFICATES
        );
    }

    /// A server that started with no rules checks no call, and checks every call, also on
    /// connections open before, once rules replace them.
    #[test]
    fn rules_added_to_an_open_server_are_put_in_force() {
        let live = LiveTenantAccess::start(&TenantAccess::default(), true).expect("open");
        let planner = "spiffe://test/ns/a/sa/planner";
        let der = certificate(planner);
        let access = ConnectionAccess::new(&live, Some(&der), None);
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer anything"),
        );
        assert!(
            access.grant_for_call(&headers).expect("open").is_none(),
            "open rules check nothing, a token neither"
        );
        live.replace(TenantAccess::default())
            .expect("open rules again are no change");

        live.replace(rules(&[(planner, &[1])], ""))
            .expect("rules put in force");
        let none = http::HeaderMap::new();
        assert!(may_act_for(&access, &none, 1));
        assert!(!may_act_for(&access, &none, 2));
    }

    /// Rules read from the configuration file while their token file still held the old
    /// token, and put in force after the token files' watch read the rotated file (into the
    /// rules they replace), check calls against the rotated file: the watch will not read it
    /// again, as it has not changed since. This holds whether the entry changed or not (the
    /// file changed in another setting).
    #[test]
    fn rules_read_before_a_token_rotation_check_the_rotated_tokens() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("tokens");
        let entry = |tenants: &[u64]| TenantAccessRule {
            token_file: file.display().to_string(),
            tenants: tenants.to_vec(),
            ..TenantAccessRule::default()
        };
        for tenants in [&[1][..], &[1, 2]] {
            std::fs::write(&file, "s3cret-old\n").expect("write");
            let at_start = TenantAccess::from_rules(&[entry(&[1])]).expect("valid");
            let live = LiveTenantAccess::start(&at_start, false).expect("servable");
            let read_before = TenantAccess::from_rules(&[entry(tenants)]).expect("valid");
            std::fs::write(&file, "s3cret-new\n").expect("rotate");
            live.reload_token_files()
                .expect("the watch reads the rotated file");
            live.replace(read_before).expect("put in force");

            let access = ConnectionAccess::new(&live, None, None);
            let bearer = |token: &str| {
                let mut headers = http::HeaderMap::new();
                let value = format!("Bearer {token}").parse().expect("header value");
                headers.insert(http::header::AUTHORIZATION, value);
                headers
            };
            assert!(
                may_act_for(&access, &bearer("s3cret-new"), 1),
                "{tenants:?}"
            );
            assert_eq!(
                access.grant_for_call(&bearer("s3cret-old")).map(|_| ()),
                Err(AccessError::UnknownToken),
                "the rotated-out token, with the entry granting {tenants:?}"
            );
        }
    }

    /// A proxy added to `forwarded_client_cert_proxies` is believed on connections from it
    /// that were open before.
    #[test]
    fn an_added_proxy_is_believed_on_open_connections() {
        let planner = "spiffe://test/ns/a/sa/planner";
        let live = LiveTenantAccess::start(&rules(&[(planner, &[1])], ""), true).expect("servable");
        let proxy: SocketAddr = "127.0.0.6:41000".parse().expect("address");
        let access = ConnectionAccess::new(&live, None, Some(proxy));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            FORWARDED_CLIENT_CERT,
            http::HeaderValue::from_str(&format!(
                "By=spiffe://test/ns/t/sa/toolplane;URI={planner}"
            ))
            .expect("header"),
        );
        assert!(!may_act_for(&access, &headers, 1), "not a listed proxy yet");
        live.replace(rules(&[(planner, &[1])], "127.0.0.6"))
            .expect("replaced");
        assert!(may_act_for(&access, &headers, 1), "believed now");
    }
}
