use super::*;

fn rule(identity: &str, tenants: &[u64]) -> TenantAccessRule {
    TenantAccessRule {
        identity: identity.to_owned(),
        tenants: tenants.to_vec(),
        ..TenantAccessRule::default()
    }
}

fn operator(identity: &str) -> TenantAccessRule {
    TenantAccessRule {
        identity: identity.to_owned(),
        all_tenants: true,
        ..TenantAccessRule::default()
    }
}

fn token_rule(variable: &str, tenants: &[u64]) -> TenantAccessRule {
    TenantAccessRule {
        token_env: variable.to_owned(),
        tenants: tenants.to_vec(),
        ..TenantAccessRule::default()
    }
}

/// The environment the token tests read: two tokens.
fn env(variable: &str) -> Option<String> {
    match variable {
        "PLANNER_TOKEN" => Some("s3cret-planner".to_owned()),
        "OPS_TOKEN" => Some("s3cret-ops".to_owned()),
        "EMPTY_TOKEN" => Some(String::new()),
        _ => None,
    }
}

/// A certificate with these subject alternative names, as DER.
fn certificate(names: Vec<rcgen::SanType>) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = names;
    let key = rcgen::KeyPair::generate().expect("key");
    params
        .self_signed(&key)
        .expect("certificate")
        .der()
        .to_vec()
}

fn uri(text: &str) -> rcgen::SanType {
    rcgen::SanType::URI(text.try_into().expect("an IA5 string"))
}

fn dns(text: &str) -> rcgen::SanType {
    rcgen::SanType::DnsName(text.try_into().expect("an IA5 string"))
}

/// A caller may act for exactly the tenants of the rules naming its identities, together.
#[test]
fn a_grant_is_the_union_of_the_rules_naming_the_caller() {
    let access = TenantAccess::from_rules(&[
        rule("spiffe://test/ns/a/sa/planner", &[1, 2]),
        rule("planner.a.svc", &[3]),
        rule("someone-else", &[4]),
    ])
    .expect("valid rules");
    let grant = access.grant_for(vec![
        "spiffe://test/ns/a/sa/planner".to_owned(),
        "planner.a.svc".to_owned(),
    ]);
    for tenant in [1, 2, 3] {
        grant.check(TenantId(tenant)).expect("granted");
    }
    let refused = grant.check(TenantId(4)).expect_err("not granted");
    let text = refused.to_string();
    assert!(text.contains("tenant 4"), "{text}");
    assert!(
        text.contains("spiffe://test/ns/a/sa/planner, planner.a.svc"),
        "{text}"
    );
    assert!(text.contains("grants it tenants 1, 2, 3"), "{text}");
}

/// An operator's identity may act for any tenant; an identity no rule names, for none.
#[test]
fn all_tenants_and_unknown_identities() {
    let access =
        TenantAccess::from_rules(&[operator("ops.example"), rule("a", &[1])]).expect("valid");
    let ops = access.grant_for(vec!["ops.example".to_owned()]);
    ops.check(TenantId(0)).expect("any tenant");
    ops.check(TenantId(u64::MAX)).expect("any tenant");
    let stranger = access.grant_for(vec!["b".to_owned()]);
    let text = stranger.check(TenantId(0)).expect_err("none").to_string();
    assert!(text.contains("grants it no tenant"), "{text}");
    let nameless = access.grant_for(Vec::new());
    let text = nameless.check(TenantId(1)).expect_err("none").to_string();
    assert!(
        text.contains("no certificate identity or bearer token"),
        "{text}"
    );
}

/// Rules that grant nothing, grant twice over, or name no identity are refused, each naming
/// the entry and the fix.
#[test]
fn bad_rules_are_refused_with_the_entry_named() {
    let cases: Vec<(Vec<TenantAccessRule>, &str)> = vec![
        (vec![rule("a", &[])], "entry 1 (\"a\"): grants nothing"),
        (
            vec![TenantAccessRule {
                all_tenants: true,
                ..rule("a", &[1])
            }],
            "leave tenants out",
        ),
        (
            vec![rule("a", &[1]), rule("a", &[2])],
            "entry 2 (\"a\"): its identity is in another entry too",
        ),
        (
            vec![rule("", &[1])],
            "entry 1 (\"\"): name a certificate's URI or DNS name",
        ),
        (vec![rule(" a", &[1])], "without spaces"),
        (
            vec![token_rule("UNSET_TOKEN", &[1])],
            "token_env names UNSET_TOKEN, which is not set or is empty",
        ),
        (vec![token_rule("EMPTY_TOKEN", &[1])], "not set or is empty"),
        (
            vec![TenantAccessRule {
                identity: "a".into(),
                ..token_rule("OPS_TOKEN", &[1])
            }],
            "not several",
        ),
        (
            vec![token_rule("OPS_TOKEN", &[1]), token_rule("OPS_TOKEN", &[2])],
            "entry 2 (\"OPS_TOKEN\"): a token of it is in tenant_access entry 1 (\"OPS_TOKEN\") too",
        ),
    ];
    for (rules, expected) in cases {
        let error = TenantAccess::from_rules_with(&rules, env).expect_err("refused");
        assert!(error.contains(expected), "{error}");
    }
    assert!(TenantAccess::from_rules(&[]).expect("no rules").is_open());
}

/// A certificate's URI names (SPIFFE ids) and DNS names are its identities; its other names
/// and its subject are not.
#[test]
fn identities_are_the_certificate_s_uri_and_dns_names() {
    let der = certificate(vec![
        dns("planner.a.svc"),
        uri("spiffe://test/ns/a/sa/planner"),
        rcgen::SanType::IpAddress("127.0.0.1".parse().expect("an address")),
    ]);
    assert_eq!(
        certificate_identities(&der),
        ["spiffe://test/ns/a/sa/planner", "planner.a.svc"]
    );
    let access =
        TenantAccess::from_rules(&[rule("spiffe://test/ns/a/sa/planner", &[7])]).expect("valid");
    let grant = access.grant_for_certificate(Some(&der));
    grant.check(TenantId(7)).expect("granted by its URI name");
    grant.check(TenantId(8)).expect_err("not granted");
    assert_eq!(
        certificate_identities(b"not a certificate"),
        Vec::<String>::new()
    );
    assert!(
        access
            .grant_for_certificate(None)
            .check(TenantId(7))
            .is_err()
    );
}

/// A call sending a bearer token the rules hold is granted its tenants beside its connection's;
/// any other `authorization` header is refused, and one without is granted its connection's.
#[test]
fn bearer_tokens_add_their_tenants_to_the_call() {
    let access = TenantAccess::from_rules_with(
        &[
            rule("planner.a.svc", &[1]),
            token_rule("PLANNER_TOKEN", &[2]),
            TenantAccessRule {
                token_env: "OPS_TOKEN".into(),
                all_tenants: true,
                ..TenantAccessRule::default()
            },
        ],
        env,
    )
    .expect("valid");
    assert_eq!((access.identities(), access.tokens()), (1, 2));
    let connection = Arc::new(access.grant_for(vec!["planner.a.svc".to_owned()]));
    let plain = access.grant_for_call(&connection, None).expect("no token");
    assert!(
        Arc::ptr_eq(&plain, &connection),
        "the connection's grant as it is"
    );
    let with_token = access
        .grant_for_call(&connection, Some(b"Bearer s3cret-planner"))
        .expect("a token held");
    with_token.check(TenantId(1)).expect("by the certificate");
    with_token.check(TenantId(2)).expect("by the token");
    let text = with_token
        .check(TenantId(3))
        .expect_err("neither")
        .to_string();
    assert!(
        text.contains("planner.a.svc, the bearer token of PLANNER_TOKEN"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "a token is never named: {text}");
    let nameless = Arc::new(access.grant_for(Vec::new()));
    let ops = access
        .grant_for_call(&nameless, Some(b"bearer  s3cret-ops "))
        .expect("the scheme in any case");
    ops.check(TenantId(99)).expect("every tenant");
    for header in [
        &b"Bearer wrong"[..],
        b"Basic czNjcmV0",
        b"Bearer ",
        b"s3cret-ops",
    ] {
        assert_eq!(
            access.grant_for_call(&nameless, Some(header)),
            Err(AccessError::UnknownToken),
            "{}",
            String::from_utf8_lossy(header)
        );
    }
    let debug = format!("{access:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
}

fn file_rule(path: &std::path::Path, tenants: &[u64]) -> TenantAccessRule {
    TenantAccessRule {
        token_file: path.display().to_string(),
        tenants: tenants.to_vec(),
        ..TenantAccessRule::default()
    }
}

/// A token file's lines are tokens granting its entry's tenants; read again, its new tokens
/// are granted and removed ones refused, in every clone of the rules; a file that cannot be
/// read or holds no token, or a token held by another entry, is an error naming the entry,
/// at the start or on reading again (then the tokens held before stay).
#[test]
fn token_files_are_read_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("agents");
    std::fs::write(&file, "s3cret-old\n\n  s3cret-new  \n").expect("write");
    let access = TenantAccess::from_rules_with(
        &[file_rule(&file, &[5]), token_rule("OPS_TOKEN", &[6])],
        env,
    )
    .expect("valid");
    let serving = access.clone();
    assert_eq!(access.token_files(), std::slice::from_ref(&file));
    assert_eq!(access.tokens(), 3);
    let nameless = Arc::new(access.grant_for(Vec::new()));
    let call =
        |token: &str| serving.grant_for_call(&nameless, Some(format!("Bearer {token}").as_bytes()));
    for token in ["s3cret-old", "s3cret-new"] {
        let grant = call(token).expect("a token of the file");
        grant.check(TenantId(5)).expect("the file's tenant");
        let text = grant
            .check(TenantId(6))
            .expect_err("not its tenant")
            .to_string();
        assert!(
            text.contains(&format!("the bearer token of {}", file.display())),
            "{text}"
        );
    }

    std::fs::write(&file, "s3cret-new\n").expect("rotate");
    access.reload_token_files().expect("read again");
    assert_eq!(call("s3cret-old"), Err(AccessError::UnknownToken));
    call("s3cret-new").expect("still held");
    call("s3cret-ops").expect("the variable's token stays");

    for (content, expected) in [
        ("\n \n", "holds no token"),
        ("s3cret-ops\n", "is in tenant_access entry 1"),
    ] {
        std::fs::write(&file, content).expect("write");
        let error = access.reload_token_files().expect_err("cannot be used");
        assert!(error.contains(expected), "{error}");
        call("s3cret-new").expect("the tokens held before stay");
    }
    std::fs::remove_file(&file).expect("remove");
    let error = access.reload_token_files().expect_err("gone");
    assert!(error.contains("cannot be read"), "{error}");
    let error = TenantAccess::from_rules_with(&[file_rule(&file, &[5])], env).expect_err("missing");
    assert!(
        error.contains(&format!("token_file {} cannot be read", file.display())),
        "{error}"
    );
    assert!(!format!("{access:?}").contains("s3cret"));
}

/// A token file rewritten in place is read again once it settles: a reading that starts
/// while the writer is between its pieces takes the whole new token, not the piece written.
#[test]
fn a_token_file_being_rewritten_is_read_whole() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("agents");
    std::fs::write(&file, "s3cret-old\n").expect("write");
    let access = TenantAccess::from_rules_with(&[file_rule(&file, &[5])], env).expect("valid");
    let nameless = Arc::new(access.grant_for(Vec::new()));
    let first_piece_written = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut rewritten = std::fs::File::create(&file).expect("truncate");
            rewritten.write_all(b"s3cret-n").expect("a first piece");
            first_piece_written.wait();
            std::thread::sleep(std::time::Duration::from_millis(10));
            rewritten.write_all(b"ew\n").expect("the rest");
        });
        first_piece_written.wait();
        access.reload_token_files().expect("read again");
    });
    access
        .grant_for_call(&nameless, Some(b"Bearer s3cret-new"))
        .expect("the whole new token");
    for cut_or_old in ["s3cret-n", "s3cret-old"] {
        let header = format!("Bearer {cut_or_old}");
        assert_eq!(
            access.grant_for_call(&nameless, Some(header.as_bytes())),
            Err(AccessError::UnknownToken)
        );
    }
}

/// An `identity_prefix` grants its tenants to every URI name under it, segment by segment,
/// beside exact identities; prefixes that would not end at a segment, or take in a whole
/// scheme, are refused.
#[test]
fn identity_prefixes_grant_every_name_under_them() {
    let access = TenantAccess::from_rules(&[
        TenantAccessRule {
            identity_prefix: "spiffe://cluster.local/ns/agents/".into(),
            tenants: vec![1],
            ..TenantAccessRule::default()
        },
        rule("spiffe://cluster.local/ns/agents/sa/planner", &[2]),
    ])
    .expect("valid");
    assert_eq!(access.identities(), 2);
    let planner = access.grant_for(vec!["spiffe://cluster.local/ns/agents/sa/planner".into()]);
    planner.check(TenantId(1)).expect("by the prefix");
    planner.check(TenantId(2)).expect("by the identity");
    let other = access.grant_for(vec!["spiffe://cluster.local/ns/agents/sa/writer".into()]);
    other.check(TenantId(1)).expect("by the prefix");
    other.check(TenantId(2)).expect_err("not its identity");
    for outside in [
        "spiffe://cluster.local/ns/agentsx/sa/a",
        "spiffe://cluster.local/ns/agents",
        "agents.cluster.local",
    ] {
        let grant = access.grant_for(vec![outside.to_owned()]);
        grant.check(TenantId(1)).expect_err(outside);
    }
    for (prefix, expected) in [
        ("spiffe://cluster.local/ns/agents", "ends in /"),
        ("spiffe://", "ends in /"),
        ("spiffe:///", "ends in /"),
        ("agents/", "ends in /"),
        ("spiffe://td/ns/ a/", "without spaces"),
    ] {
        let refused = TenantAccess::from_rules(&[TenantAccessRule {
            identity_prefix: prefix.into(),
            tenants: vec![1],
            ..TenantAccessRule::default()
        }])
        .expect_err(prefix);
        assert!(refused.contains(expected), "{prefix}: {refused}");
    }
}
