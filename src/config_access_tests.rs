//! Unit tests of the configuration of TLS (served and towards providers) and of tenant access:
//! what is read from the file and the environment, and which settings are refused.

use super::*;
use crate::envelope::TenantId;
use crate::grpc::server_tls::ServerTlsFiles;

#[test]
fn provider_tls_files_are_read_from_the_environment() {
    let none = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(
        none.server_options().provider_tls,
        OutgoingTlsFiles::default()
    );
    let set = ServerConfig::load(
        None,
        env(&[
            (
                "TOOLPLANE_PROVIDER_CA_FILE",
                "/etc/toolplane/providers-ca.pem",
            ),
            (
                "TOOLPLANE_PROVIDER_CLIENT_CERT_FILE",
                "/etc/toolplane/tls.crt",
            ),
            (
                "TOOLPLANE_PROVIDER_CLIENT_KEY_FILE",
                "/etc/toolplane/tls.key",
            ),
        ]),
    )
    .expect("valid");
    assert_eq!(
        set.server_options().provider_tls,
        OutgoingTlsFiles {
            ca_file: Some("/etc/toolplane/providers-ca.pem".into()),
            client_identity: Some(ClientIdentityFiles {
                cert_file: "/etc/toolplane/tls.crt".into(),
                key_file: "/etc/toolplane/tls.key".into(),
            }),
        }
    );
    for half in [
        "TOOLPLANE_PROVIDER_CLIENT_CERT_FILE",
        "TOOLPLANE_PROVIDER_CLIENT_KEY_FILE",
    ] {
        let error = ServerConfig::load(None, env(&[(half, "/etc/toolplane/tls.pem")]))
            .expect_err("a certificate without its key, or a key without its certificate");
        assert!(error.to_string().contains("go together"), "{error}");
    }
}

#[test]
fn tls_is_served_only_with_a_certificate_and_its_key() {
    let none = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(none.server_options().tls, None);
    let set = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_TLS_CERT_FILE", "/etc/toolplane/tls.crt"),
            ("TOOLPLANE_TLS_KEY_FILE", "/etc/toolplane/tls.key"),
            (
                "TOOLPLANE_TLS_CLIENT_CA_FILE",
                "/etc/toolplane/clients-ca.pem",
            ),
            ("TOOLPLANE_TLS_RELOAD_INTERVAL", "1m"),
        ]),
    )
    .expect("valid");
    assert_eq!(
        set.server_options().tls_reload_interval,
        Duration::from_secs(60)
    );
    assert_eq!(
        none.server_options().tls_reload_interval,
        Duration::from_secs(10)
    );
    assert_eq!(
        set.server_options().tls,
        Some(ServerTlsFiles {
            cert_file: "/etc/toolplane/tls.crt".into(),
            key_file: "/etc/toolplane/tls.key".into(),
            client_ca_file: Some("/etc/toolplane/clients-ca.pem".into()),
        })
    );
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_TLS_CERT_FILE", "/etc/tls.crt")]))
        .expect_err("a certificate without its key");
    assert!(error.to_string().contains("go together"), "{error}");
    let error = ServerConfig::load(
        None,
        env(&[("TOOLPLANE_TLS_CLIENT_CA_FILE", "/etc/clients-ca.pem")]),
    )
    .expect_err("client certificates without TLS");
    assert!(error.to_string().contains("tls_client_ca_file"), "{error}");
}

/// `[[tenant_access]]` entries are read from the file and checked: with client certificates
/// asked for they reach the server's options; without, or badly formed, the error names the
/// setting or the entry.
#[test]
fn tenant_access_is_read_from_the_file_and_needs_client_certificates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("toolplane.toml");
    let rules = r#"
[[tenant_access]]
identity = "spiffe://cluster.local/ns/agents/sa/planner"
tenants = [1, 2]

[[tenant_access]]
identity = "ops.example.com"
all_tenants = true
"#;
    let tls = "tls_cert_file = \"/etc/tls.crt\"\ntls_key_file = \"/etc/tls.key\"\n";
    let with_ca = format!("{tls}tls_client_ca_file = \"/etc/clients-ca.pem\"\n{rules}");
    std::fs::write(&file, with_ca).expect("write");
    let config = ServerConfig::load(Some(&file), env(&[])).expect("valid");
    let access = config.server_options().tenant_access;
    assert_eq!(access.identities(), 2);
    let planner = access.grant_for(vec!["spiffe://cluster.local/ns/agents/sa/planner".into()]);
    planner.check(TenantId(2)).expect("granted");
    planner.check(TenantId(3)).expect_err("not granted");
    let defaults = ServerConfig::load(None, env(&[])).expect("valid");
    assert!(defaults.server_options().tenant_access.is_open());

    std::fs::write(&file, format!("{tls}{rules}")).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("no client certificates");
    assert!(
        error.to_string().contains("set tls_client_ca_file"),
        "{error}"
    );
    let nothing_granted = "[[tenant_access]]\nidentity = \"a.example\"\n";
    std::fs::write(&file, nothing_granted).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("grants nothing");
    assert!(
        error.to_string().contains("tenant_access entry 1"),
        "{error}"
    );
    // Bearer tokens need no client certificates; their variables must be set.
    std::fs::write(
        &file,
        "[[tenant_access]]\ntoken_env = \"PATH\"\ntenants = [3]\n",
    )
    .expect("write");
    let config = ServerConfig::load(Some(&file), env(&[])).expect("valid without TLS");
    assert_eq!(config.server_options().tenant_access.tokens(), 1);
    let unset =
        "[[tenant_access]]\ntoken_env = \"TOOLPLANE_TEST_VARIABLE_NEVER_SET\"\ntenants = [3]\n";
    std::fs::write(&file, unset).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("unset");
    assert!(error.to_string().contains("not set or is empty"), "{error}");
    let misspelt = "[[tenant_access]]\nidentity = \"a.example\"\ntenant = [1]\n";
    std::fs::write(&file, misspelt).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("unknown field");
    assert!(error.to_string().contains("tenant"), "{error}");
}

/// Identity entries behind a proxy that terminates TLS need `forwarded_client_cert_proxies`
/// instead of client certificates; the list (file or environment) is of addresses and
/// networks, and with no identity entry to grant it is refused.
#[test]
fn forwarded_client_cert_proxies_stand_in_for_client_certificates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("toolplane.toml");
    let rules =
        "[[tenant_access]]\nidentity = \"spiffe://cluster.local/ns/a/sa/p\"\ntenants = [1]\n";
    std::fs::write(&file, rules).expect("write");
    let proxies = [(
        "TOOLPLANE_FORWARDED_CLIENT_CERT_PROXIES",
        "127.0.0.6, 10.0.0.0/8",
    )];
    let config = ServerConfig::load(Some(&file), env(&proxies)).expect("valid behind proxies");
    let access = config.server_options().tenant_access;
    assert_eq!(access.forwarded_client_cert_proxies().len(), 2);
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("no certificates");
    assert!(
        error.to_string().contains("forwarded_client_cert_proxies"),
        "{error}"
    );
    assert_eq!(
        access.forwarded_identity_header(),
        ForwardedIdentityHeader::XForwardedClientCert
    );
    let linkerd = [
        proxies[0],
        ("TOOLPLANE_FORWARDED_CLIENT_CERT_HEADER", "l5d-client-id"),
    ];
    let config = ServerConfig::load(Some(&file), env(&linkerd)).expect("valid behind Linkerd");
    assert_eq!(
        config
            .server_options()
            .tenant_access
            .forwarded_identity_header(),
        ForwardedIdentityHeader::L5dClientId
    );
    let unknown = [
        proxies[0],
        ("TOOLPLANE_FORWARDED_CLIENT_CERT_HEADER", "x-client-id"),
    ];
    let error = ServerConfig::load(Some(&file), env(&unknown)).expect_err("not a header we read");
    assert!(error.to_string().contains("l5d-client-id"), "{error}");
    let unlisted = [("TOOLPLANE_FORWARDED_CLIENT_CERT_HEADER", "l5d-client-id")];
    let error = ServerConfig::load(Some(&file), env(&unlisted)).expect_err("no proxies");
    assert!(
        error
            .to_string()
            .contains("forwarded_client_cert_proxies is empty"),
        "{error}"
    );
    let bad = [("TOOLPLANE_FORWARDED_CLIENT_CERT_PROXIES", "sidecar")];
    let error = ServerConfig::load(Some(&file), env(&bad)).expect_err("not an address");
    assert!(error.to_string().contains("\"sidecar\""), "{error}");
    std::fs::write(&file, "forwarded_client_cert_proxies = \"127.0.0.6\"\n").expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("nothing to grant");
    assert!(
        error
            .to_string()
            .contains("no tenant_access entry names an identity"),
        "{error}"
    );
}

/// `identity_prefix` entries are read from the file, need client certificates like
/// identities, and are checked to end at a path segment.
#[test]
fn identity_prefixes_are_read_from_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("toolplane.toml");
    let tls = "tls_cert_file = \"/etc/tls.crt\"\ntls_key_file = \"/etc/tls.key\"\n\
               tls_client_ca_file = \"/etc/ca.pem\"\n";
    let entry = "[[tenant_access]]\nidentity_prefix = \"spiffe://cluster.local/ns/b/\"\n\
                 tenants = [4]\n";
    std::fs::write(&file, format!("{tls}{entry}")).expect("write");
    let config = ServerConfig::load(Some(&file), env(&[])).expect("valid");
    let access = config.server_options().tenant_access;
    let grant = access.grant_for(vec!["spiffe://cluster.local/ns/b/sa/x".into()]);
    grant.check(TenantId(4)).expect("granted by the prefix");
    std::fs::write(&file, entry).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("no client certificates");
    assert!(error.to_string().contains("tls_client_ca_file"), "{error}");
    let open_ended = entry.replace("ns/b/", "ns/b");
    std::fs::write(&file, format!("{tls}{open_ended}")).expect("write");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("not at a segment");
    assert!(
        error.to_string().contains("tenant_access entry 1"),
        "{error}"
    );
}

/// A configuration read again reads the token files of its `tenant_access` entries as it reads
/// itself (once they settle), not with a plain read: the files and the configuration are read
/// alike.
#[test]
fn token_files_are_read_as_the_configuration_is() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (file, tokens) = (dir.path().join("toolplane.toml"), dir.path().join("tokens"));
    let entry = format!(
        "[[tenant_access]]\ntoken_file = {:?}\ntenants = [4]\n",
        tokens.display().to_string()
    );
    std::fs::write(&file, entry).expect("write");
    std::fs::write(&tokens, "secret-token\n").expect("write");
    let read = std::sync::Mutex::new(Vec::new());
    let config = ServerConfig::load_read_by(Some(&file), env(&[]), |path| {
        read.lock().expect("lock").push(path.to_owned());
        std::fs::read_to_string(path)
    })
    .expect("valid");
    assert_eq!(*read.lock().expect("lock"), [file, tokens]);
    assert_eq!(config.server_options().tenant_access.tokens(), 1);
}
