//! Unit tests of configuration layering: defaults, file, environment and their checks.

use super::*;
use crate::grpc::ServerOptions;
use crate::grpc::outgoing_tls::{ClientIdentityFiles, OutgoingTlsFiles};
use crate::otlp::OtlpExport;

fn env(pairs: &[(&str, &str)]) -> impl Iterator<Item = (String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect::<Vec<_>>()
        .into_iter()
}

#[test]
fn environment_overrides_file_overrides_defaults() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("toolplane.toml");
    std::fs::write(
        &path,
        "default_ttl = \"20s\"\nmax_schema_depth = 10\nlisten = \"127.0.0.1:7000\"\n",
    )
    .expect("write");
    let config = ServerConfig::load(
        Some(&path),
        env(&[
            ("TOOLPLANE_DEFAULT_TTL", "45s"),
            ("TOOLPLANE_MAX_TOOLS_PER_SERVICE", "7"),
            ("OTHER", "x"),
        ]),
    )
    .expect("valid");
    assert_eq!(config.default_ttl, Duration::from_secs(45));
    assert_eq!(config.max_schema_depth, 10);
    assert_eq!(config.max_tools_per_service, 7);
    assert_eq!(config.listen.port(), 7000);
    assert_eq!(config.max_ttl, validate::DEFAULT_MAX_TTL);
}

/// The bounds on what tenants may keep in memory: each has its default and its variable.
#[test]
fn the_bounds_of_tenants_default_and_can_be_set() {
    type Read = fn(&ServerOptions) -> u64;
    let bounds: [(&str, u64, Read); 11] = [
        (
            "TOOLPLANE_MAX_IN_FLIGHT_PER_SERVICE",
            DEFAULT_MAX_IN_FLIGHT_PER_SERVICE as u64,
            |options| options.rate_limits.max_in_flight_per_service as u64,
        ),
        (
            "TOOLPLANE_MAX_CONCURRENT_STREAMS",
            DEFAULT_MAX_CONCURRENT_STREAMS.into(),
            |options| options.max_concurrent_streams.into(),
        ),
        (
            "TOOLPLANE_MAX_CONVERSATION_BYTES",
            DEFAULT_MAX_CONVERSATION_BYTES as u64,
            |options| options.max_conversation_bytes as u64,
        ),
        (
            "TOOLPLANE_MAX_SERVICES_PER_TENANT",
            validate::DEFAULT_MAX_SERVICES_PER_TENANT as u64,
            |options| options.limits.max_services_per_tenant as u64,
        ),
        (
            "TOOLPLANE_MAX_INSTANCES_PER_SERVICE",
            validate::DEFAULT_MAX_INSTANCES_PER_SERVICE,
            |options| options.limits.max_instances_per_service,
        ),
        (
            "TOOLPLANE_MAX_TOOLS_PER_TENANT",
            DEFAULT_MAX_TOOLS_PER_TENANT,
            |options| options.limits.max_tools_per_tenant,
        ),
        (
            "TOOLPLANE_MAX_TOOL_BYTES_PER_TENANT",
            DEFAULT_MAX_TOOL_BYTES_PER_TENANT,
            |options| options.limits.max_tool_bytes_per_tenant,
        ),
        (
            "TOOLPLANE_MAX_AGENTS_PER_TENANT",
            DEFAULT_MAX_AGENTS_PER_TENANT as u64,
            |options| options.max_agents_per_tenant as u64,
        ),
        (
            "TOOLPLANE_WATCH_EVENT_BUFFER_BYTES",
            crate::registry::memory::DEFAULT_EVENT_BUFFER_BYTES,
            |options| options.event_buffer_bytes,
        ),
        ("TOOLPLANE_MAX_CONNECTIONS", 0, |options| {
            options.max_connections as u64
        }),
        (
            "TOOLPLANE_GONE_SERVICES_REMEMBERED",
            DEFAULT_GONE_SERVICES_REMEMBERED as u64,
            |options| options.gone_services_remembered as u64,
        ),
    ];
    let defaults = ServerConfig::load(None, env(&[]))
        .expect("valid")
        .server_options();
    for (variable, default, read) in bounds {
        assert_eq!(read(&defaults), default, "{variable}");
        for value in [0, 3] {
            let set = ServerConfig::load(None, env(&[(variable, &value.to_string())]))
                .expect("valid")
                .server_options();
            assert_eq!(read(&set), value, "{variable}={value}");
        }
    }
}

#[test]
fn unknown_file_keys_and_bad_values_are_rejected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "no_such_key = 1\n").expect("write");
    assert!(ServerConfig::load(Some(&path), env(&[])).is_err());
    let error = ServerConfig::load(Some(&path.with_file_name("missing.toml")), env(&[]))
        .expect_err("missing file");
    assert!(matches!(error, ConfigError::Read { .. }));
    std::fs::write(&path, "min_ttl = \"10s\"\ndefault_ttl = \"5s\"\n").expect("write");
    assert!(ServerConfig::load(Some(&path), env(&[])).is_err());
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_KEEPALIVE_TIMEOUT", "0s")]))
        .expect_err("a ping nobody may answer");
    assert!(error.to_string().contains("keepalive_timeout"), "{error}");
    let off = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_KEEPALIVE_INTERVAL", "0s"),
            ("TOOLPLANE_KEEPALIVE_TIMEOUT", "0s"),
        ]),
    )
    .expect("keepalive off");
    assert!(off.server_options().keepalive_interval.is_zero());
}

/// A provider health interval of zero (the checks' ticker panicked on it) and a duration past
/// 100 years (adding it to the clock may overflow it) are refused, naming the setting.
#[test]
fn durations_are_above_zero_where_they_must_be_and_at_most_100_years() {
    for (variable, value, said) in [
        (
            "TOOLPLANE_PROVIDER_HEALTH_INTERVAL",
            "0s",
            "provider_health_interval must be above 0s",
        ),
        (
            "TOOLPLANE_TLS_RELOAD_INTERVAL",
            "300000000000years",
            "tls_reload_interval must be at most 100 years",
        ),
        (
            "TOOLPLANE_PROVIDER_HEALTH_INTERVAL",
            "101years",
            "provider_health_interval must be at most 100 years",
        ),
    ] {
        let error = ServerConfig::load(None, env(&[(variable, value)])).expect_err("refused");
        assert!(
            error.to_string().contains(said),
            "{variable}={value}: {error}"
        );
    }
    let years = [("TOOLPLANE_MAX_INVOKE_TIMEOUT", "100years")];
    ServerConfig::load(None, env(&years)).expect("100 years is taken");
}

/// A setting that does not read is named as where it was set: its line in a file that does not
/// parse, its path in the file, or the variable that set it.
#[test]
fn a_bad_value_is_named_where_it_was_set() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    let refused = |text: &str, vars: &[(&str, &str)]| {
        std::fs::write(&path, text).expect("write");
        (ServerConfig::load(Some(&path), env(vars)).expect_err("refused")).to_string()
    };
    let message = refused("listen = \"127.0.0.1:1\"\nrecords_path = \n", &[]);
    assert!(message.contains("line 2, column 16: "), "{message}");
    let message = refused("rate_limit_per_second = -1\n", &[]);
    assert!(message.contains("): rate_limit_per_second: "), "{message}");
    let message = refused("[[mcp_imports]]\nservice = \"docs\"\nurl = 5\n", &[]);
    assert!(message.contains("): mcp_imports[0].url: "), "{message}");
    let message = refused("lisen = 1\n", &[]);
    assert!(
        message.ends_with("): unknown field `lisen`; did you mean `listen`?"),
        "{message}"
    );
    let message = refused(
        "[[tenant_access]]\nidentity = \"a.example\"\ntenant = [1]\n",
        &[],
    );
    assert!(
        message.ends_with(
            "): tenant_access[0].tenant: unknown field `tenant`; did you mean `tenants`?"
        ),
        "{message}"
    );
    let message = refused("max_ttl = \"1h\"\n", &[("TOOLPLANE_MAX_TTL", "forever")]);
    assert!(message.contains("): TOOLPLANE_MAX_TTL: "), "{message}");
}

#[test]
fn call_scheduling_is_per_connection_unless_set() {
    let default = ServerConfig::load(None, env(&[])).expect("defaults");
    assert_eq!(
        default.server_options().call_scheduling,
        CallScheduling::PerConnection
    );
    let per_call = ServerConfig::load(None, env(&[("TOOLPLANE_CALL_SCHEDULING", "per-call")]))
        .expect("a known value");
    assert_eq!(
        per_call.server_options().call_scheduling,
        CallScheduling::PerCall
    );
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_CALL_SCHEDULING", "sometimes")]))
        .expect_err("an unknown value");
    assert!(error.to_string().contains("per-connection"), "{error}");
}

/// The model's token-limit field is `max_tokens` unless set; an unknown one is refused, naming
/// the two it may be.
#[test]
fn the_model_token_limit_field_is_max_tokens_unless_set() {
    let model = |pairs: &[(&str, &str)]| {
        let mut pairs = pairs.to_vec();
        pairs.push(("TOOLPLANE_MODEL_BASE_URL", "http://127.0.0.1:1/v1"));
        ServerConfig::load(None, env(&pairs)).map(|config| {
            let options = config.server_options();
            options.model.expect("a model client").max_tokens_field
        })
    };
    assert_eq!(model(&[]).expect("defaults"), MaxTokensField::MaxTokens);
    let field = [("TOOLPLANE_MODEL_MAX_TOKENS_FIELD", "max_completion_tokens")];
    assert_eq!(
        model(&field).expect("a known value"),
        MaxTokensField::MaxCompletionTokens
    );
    let error = model(&[("TOOLPLANE_MODEL_MAX_TOKENS_FIELD", "max_new_tokens")])
        .expect_err("an unknown value");
    assert!(
        error.to_string().contains("max_completion_tokens"),
        "{error}"
    );
}

/// The tool calls an agent runs at once are 1 to 128: 0 (none would run) and more than a turn
/// makes are refused, naming the setting.
#[test]
fn concurrent_tool_calls_are_bounded() {
    let load = |value: &str| {
        ServerConfig::load(None, env(&[("TOOLPLANE_MAX_CONCURRENT_TOOL_CALLS", value)]))
            .map(|config| config.server_options().max_concurrent_tool_calls)
    };
    assert_eq!(load("1").expect("one at a time"), 1);
    assert_eq!(load("128").expect("as many as a turn makes"), 128);
    for refused in ["0", "129"] {
        let error = load(refused).expect_err("out of bounds").to_string();
        assert!(
            error.contains("max_concurrent_tool_calls must be 1 to 128"),
            "{error}"
        );
    }
}

#[test]
fn metrics_are_served_only_where_asked() {
    let none = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(none.metrics_address(), Ok(None));
    let set = ServerConfig::load(None, env(&[("TOOLPLANE_METRICS_LISTEN", "127.0.0.1:9090")]))
        .expect("valid");
    assert_eq!(
        set.metrics_address(),
        Ok(Some("127.0.0.1:9090".parse().expect("address")))
    );
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_METRICS_LISTEN", "port 9090")]))
        .expect_err("not an address");
    assert!(error.to_string().contains("metrics_listen"), "{error}");
}

#[test]
fn the_mcp_endpoint_is_served_only_where_asked_and_answers_the_hosts_listed() {
    let none = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(none.mcp_address(), Ok(None));
    assert_eq!(
        none.server_options().mcp.allowed_hosts,
        ["localhost", "127.0.0.1", "::1"]
    );
    let set = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_MCP_LISTEN", "0.0.0.0:8080"),
            (
                "TOOLPLANE_MCP_ALLOWED_HOSTS",
                "toolplane, toolplane.tools.svc:8080",
            ),
        ]),
    )
    .expect("valid");
    assert_eq!(
        set.mcp_address(),
        Ok(Some("0.0.0.0:8080".parse().expect("address")))
    );
    assert_eq!(
        set.server_options().mcp.allowed_hosts,
        ["toolplane", "toolplane.tools.svc:8080"]
    );
    let any =
        ServerConfig::load(None, env(&[("TOOLPLANE_MCP_ALLOWED_HOSTS", "*")])).expect("valid");
    assert!(any.server_options().mcp.allowed_hosts.is_empty());
    for (key, value, named) in [
        ("TOOLPLANE_MCP_LISTEN", "port 8080", "mcp_listen"),
        ("TOOLPLANE_MCP_ALLOWED_HOSTS", " , ", "mcp_allowed_hosts"),
    ] {
        let error = ServerConfig::load(None, env(&[(key, value)])).expect_err("refused");
        assert!(error.to_string().contains(named), "{error}");
    }
}

#[test]
fn mcp_imports_are_read_from_the_file_and_checked() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("toolplane.toml");
    let imports = r#"
        [[mcp_imports]]
        service = "github"
        url = "http://127.0.0.1:3001/mcp"
        refresh_interval = "30s"

        [[mcp_imports]]
        service = "github"
        url = "http://127.0.0.1:3001/mcp"
        tenant = 7

        [[mcp_imports]]
        service = "memory"
        command = ["python3", "memory.py"]
        env = { LOG_LEVEL = "warning" }
        pass_env = ["PATH"]
    "#;
    std::fs::write(&file, imports).expect("written");
    let config = ServerConfig::load(Some(&file), env(&[])).expect("valid");
    let checked = config.server_options().mcp_imports;
    assert_eq!(checked.len(), 3);
    let crate::mcp::import::McpSource::Stdio(started) = &checked[2].source else {
        panic!("a started server: {:?}", checked[2].source);
    };
    let names: Vec<&str> = started.env.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["LOG_LEVEL", "PATH"]);
    assert_eq!(
        checked[0].refresh_interval,
        std::time::Duration::from_secs(30)
    );
    assert_eq!(
        checked[1].refresh_interval,
        std::time::Duration::from_secs(60)
    );
    std::fs::write(
        &file,
        format!("{imports}\n[[mcp_imports]]\nservice = \"github\"\nurl = \"http://other/mcp\"\n"),
    )
    .expect("written");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("imported twice");
    assert!(error.to_string().contains("imported twice"), "{error}");
    let token = dir.path().join("token");
    let with_token_file = format!(
        "tls_reload_interval = \"7s\"\n{imports}\n[[mcp_imports]]\nservice = \"crm\"\n\
         url = \"http://crm/mcp\"\nbearer_token_file = {token:?}\n"
    );
    std::fs::write(&file, with_token_file).expect("written");
    let error = ServerConfig::load(Some(&file), env(&[])).expect_err("no token file yet");
    assert!(
        error
            .to_string()
            .contains("bearer_token_file of service crm"),
        "{error}"
    );
    std::fs::write(&token, "s3cret\n").expect("written");
    let config = ServerConfig::load(Some(&file), env(&[])).expect("valid");
    assert_eq!(
        config.server_options().mcp_imports[3].auth,
        Some(crate::mcp::import::ServerAuth::BearerFile {
            path: token,
            every: std::time::Duration::from_secs(7),
        })
    );
    // The token file is read as the configuration file is, by the reader given.
    let only_the_configuration = |path: &Path| {
        if path == file {
            std::fs::read_to_string(path)
        } else {
            Err(std::io::ErrorKind::PermissionDenied.into())
        }
    };
    let error = ServerConfig::load_read_by(Some(&file), env(&[]), only_the_configuration)
        .expect_err("the token file not read");
    assert!(error.to_string().contains("permission denied"), "{error}");
}

#[test]
fn spans_are_exported_only_to_an_otlp_endpoint() {
    let none = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(none.server_options().otlp, None);
    let set = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_OTLP_ENDPOINT", "https://otel-collector:4317"),
            ("TOOLPLANE_OTLP_CA_FILE", "/etc/ssl/collector-ca.pem"),
            ("TOOLPLANE_OTLP_CLIENT_CERT_FILE", "/etc/otlp/tls.crt"),
            ("TOOLPLANE_OTLP_CLIENT_KEY_FILE", "/etc/otlp/tls.key"),
        ]),
    )
    .expect("valid");
    assert_eq!(
        set.server_options().otlp,
        Some(OtlpExport {
            endpoint: "https://otel-collector:4317".to_owned(),
            protocol: OtlpProtocol::Grpc,
            tls: OutgoingTlsFiles {
                ca_file: Some(PathBuf::from("/etc/ssl/collector-ca.pem")),
                client_identity: Some(ClientIdentityFiles {
                    cert_file: PathBuf::from("/etc/otlp/tls.crt"),
                    key_file: PathBuf::from("/etc/otlp/tls.key"),
                }),
            },
        })
    );
    let http = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_OTLP_ENDPOINT", "http://otel-collector:4318"),
            ("TOOLPLANE_OTLP_PROTOCOL", "http/protobuf"),
        ]),
    )
    .expect("valid");
    let export = http.server_options().otlp.expect("exported");
    assert_eq!(export.protocol, OtlpProtocol::HttpProtobuf);
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_OTLP_PROTOCOL", "http/json")]))
        .expect_err("not a protocol toolplane speaks");
    assert!(
        error.to_string().contains("grpc") && error.to_string().contains("http/protobuf"),
        "{error}"
    );
    let error = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_OTLP_ENDPOINT", "http://otel-collector:4317"),
            ("TOOLPLANE_OTLP_CA_FILE", "/etc/ssl/collector-ca.pem"),
        ]),
    )
    .expect_err("a CA file for a plaintext collector");
    assert!(error.to_string().contains("otlp_ca_file"), "{error}");
    let error = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_OTLP_ENDPOINT", "http://otel-collector:4317"),
            ("TOOLPLANE_OTLP_CLIENT_CERT_FILE", "/etc/otlp/tls.crt"),
            ("TOOLPLANE_OTLP_CLIENT_KEY_FILE", "/etc/otlp/tls.key"),
        ]),
    )
    .expect_err("a client certificate for a plaintext collector");
    assert!(
        error.to_string().contains("otlp_client_cert_file"),
        "{error}"
    );
    let error = ServerConfig::load(
        None,
        env(&[
            ("TOOLPLANE_OTLP_ENDPOINT", "https://otel-collector:4317"),
            ("TOOLPLANE_OTLP_CLIENT_CERT_FILE", "/etc/otlp/tls.crt"),
        ]),
    )
    .expect_err("a certificate without its key");
    assert!(error.to_string().contains("go together"), "{error}");
    for bad in ["otel-collector:4317", "grpc://otel-collector:4317"] {
        let error = ServerConfig::load(None, env(&[("TOOLPLANE_OTLP_ENDPOINT", bad)]))
            .expect_err("not an OTLP address");
        assert!(error.to_string().contains("otlp_endpoint"), "{error}");
    }
}

#[test]
fn response_compression_is_read_from_the_environment() {
    use crate::grpc::response_compression::ResponseCompression;
    let default = ServerConfig::load(None, env(&[])).expect("valid");
    assert_eq!(
        default.server_options().response_compression,
        ResponseCompression::Mirror
    );
    let gzip = ServerConfig::load(None, env(&[("TOOLPLANE_RESPONSE_COMPRESSION", "gzip")]))
        .expect("valid");
    assert_eq!(
        gzip.server_options().response_compression,
        ResponseCompression::Gzip
    );
    let error = ServerConfig::load(None, env(&[("TOOLPLANE_RESPONSE_COMPRESSION", "zstd")]))
        .expect_err("not a choice");
    let message = error.to_string();
    assert!(
        ["mirror", "gzip", "off"]
            .iter()
            .all(|choice| message.contains(choice)),
        "{message}"
    );
}

#[path = "config_access_tests.rs"]
mod access;
