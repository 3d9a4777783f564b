//! The binaries: `toolplane` serve, preflight exit codes, listings for people and scripts, a
//! clean exit 0 on SIGTERM, its log lines; and what each binary's `--help` says it is. The
//! benchmark harness's own options are in `bench_harness.rs`, `toolplane agent` in `cli_agent.rs`.

use crate::common;

use common::process::{ServerProcess, run_binary, toolplane_cli};
use common::*;
use std::time::Duration;

/// `toolplane preflight` exits 1 listing what is missing, and 0 once everything is registered.
#[tokio::test(flavor = "multi_thread")]
async fn preflight_command_fails_fast_then_passes() {
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let args = [
        "preflight",
        "--endpoint",
        &endpoint,
        "--tenant",
        "4",
        "--require",
        "story-generator:generate_structure,generate_nodes",
        "--require",
        "quality-control:validate_content",
        "--optional",
        "prompt-helper:get_model_for_language",
    ];
    let (code, _, stderr) = toolplane_cli(&args);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("3 required tool(s) missing"), "{stderr}");
    assert!(
        stderr.contains("generate_nodes") && stderr.contains("validate_content"),
        "{stderr}"
    );
    assert!(
        stderr.contains("WARN") && stderr.contains("get_model_for_language"),
        "optional misses are warnings: {stderr}"
    );

    let mut client =
        toolplane::pb::discovery_service_client::DiscoveryServiceClient::connect(endpoint.clone())
            .await
            .expect("connect");
    register_ok(&mut client, 4, story_generator()).await;
    register_ok(
        &mut client,
        4,
        registration("quality-control", vec![simple_tool("validate_content")]),
    )
    .await;
    let (code, stdout, stderr) = toolplane_cli(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("pre-flight ok"));
    assert!(
        stderr.contains("found tool") && stderr.contains("generate_structure"),
        "found tools logged at INFO: {stderr}"
    );

    let (code, stdout, _) = toolplane_cli(&[
        "services",
        "--endpoint",
        &endpoint,
        "--tenant",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0);
    let services: serde_json::Value =
        serde_json::from_str(&stdout).expect("services --json is JSON");
    assert_eq!(services.as_array().map(Vec::len), Some(2));
    let (code, stdout, _) = toolplane_cli(&[
        "tools",
        "--endpoint",
        &endpoint,
        "--tenant",
        "4",
        "--service",
        "story-generator",
    ]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("TOOL") && stdout.contains("generate_nodes"),
        "{stdout}"
    );
    let (code, stdout, _) = toolplane_cli(&[
        "health",
        "story-generator",
        "--endpoint",
        &endpoint,
        "--tenant",
        "4",
        "--json",
    ]);
    assert_eq!(code, 0);
    let health: serde_json::Value = serde_json::from_str(&stdout).expect("health --json is JSON");
    assert_eq!(health["status"], "healthy");
    let (code, _, stderr) = toolplane_cli(&["health", "nobody", "--endpoint", &endpoint]);
    assert_eq!(code, 1, "a service not registered is not healthy: {stderr}");
    assert!(
        stderr.contains("service nobody is not registered"),
        "{stderr}"
    );

    assert_eq!(
        server.terminate().code(),
        Some(0),
        "SIGTERM drains and exits 0"
    );
}

/// SIGTERM sent the moment the server announces its address (before it has finished setting
/// up, with span export on to lengthen that) still drains and exits 0: the signal handler is
/// in place before the announcement.
#[test]
fn sigterm_right_after_the_announcement_drains() {
    for _ in 0..5 {
        let server = ServerProcess::start(&[("TOOLPLANE_OTLP_ENDPOINT", "http://127.0.0.1:9")]);
        assert_eq!(server.terminate().code(), Some(0), "killed, not drained");
    }
}

/// A client command that cannot reach the server exits 2 with a clear message, each cause said
/// once.
#[test]
fn unreachable_server_is_a_clear_error() {
    let (code, _, stderr) = toolplane_cli(&["services", "--endpoint", "http://127.0.0.1:1"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("cannot connect to http://127.0.0.1:1") && stderr.contains("refused"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("tcp connect error").count(), 1, "{stderr}");
    let (code, _, stderr) = toolplane_cli(&["services", "--endpoint", "no-scheme"]);
    assert_eq!(code, 2);
    assert_eq!(stderr.matches("scheme is missing").count(), 1, "{stderr}");
    // A deadline of zero would end the call before it began: refused before connecting.
    let (code, _, stderr) = toolplane_cli(&["invoke", "t", "--timeout", "0s"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("a timeout must be above zero"), "{stderr}");
}

/// A failed `toolplane invoke` says how to see the record written of it, and `toolplane
/// records --id` shows that record, as does the listing by its status; an id with no record is
/// NOT_FOUND.
#[test]
fn a_failed_invoke_names_its_record_and_records_shows_it() {
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let (code, _, stderr) = toolplane_cli(&["invoke", "nope", "--endpoint", &endpoint]);
    assert_eq!(code, 1, "{stderr}");
    let id = stderr
        .split("the call's record: toolplane records --id ")
        .nth(1)
        .map(str::trim)
        .unwrap_or_else(|| panic!("no record named: {stderr}"));
    let (code, stdout, stderr) =
        toolplane_cli(&["records", "--id", id, "--json", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let shown: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(shown[0]["invocation_id"], id, "{shown}");
    assert_eq!(shown[0]["status"], "rejected", "{shown}");
    assert_eq!(shown.as_array().map(Vec::len), Some(1), "{shown}");
    // The listing filtered by status (as it prints it, or the proto's name) and service.
    let listed = |filters: &[&str]| {
        let mut args = vec!["records", "--json", "--endpoint", &endpoint];
        args.extend(filters);
        let (code, stdout, stderr) = toolplane_cli(&args);
        assert_eq!(code, 0, "{filters:?}: {stderr}");
        let listed: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        (listed.as_array().expect("a list").iter())
            .map(|record| record["invocation_id"].as_str().expect("an id").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(&["--status", "rejected"]), [id]);
    assert_eq!(listed(&["--status", "INVOCATION_STATUS_REJECTED"]), [id]);
    assert!(listed(&["--status", "succeeded"]).is_empty());
    assert!(listed(&["--status", "rejected", "--service", "elsewhere"]).is_empty());
    let (code, _, stderr) = toolplane_cli(&["records", "--status", "ok", "--endpoint", &endpoint]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("not a status; one of succeeded, invalidinput, rejected"),
        "{stderr}"
    );

    let unknown = "00000000-0000-4000-8000-000000000000";
    let (code, _, stderr) = toolplane_cli(&["records", "--id", unknown, "--endpoint", &endpoint]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("NotFound") && stderr.contains(unknown),
        "{stderr}"
    );
}

/// A bad config file stops `serve` with exit 2 and says what is wrong.
#[test]
fn bad_config_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("toolplane.toml");
    std::fs::write(&path, "unknown_key = true\n").expect("write config");
    let path = path.to_string_lossy().into_owned();
    let (code, _, stderr) = toolplane_cli(&["serve", "--config", &path, "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown_key"), "{stderr}");
}

/// Two endpoints on one port stop `serve` before it binds either, naming the flags or
/// settings that give them (a flag standing in for its setting).
#[test]
fn serve_refuses_two_endpoints_on_one_port() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("toolplane.toml");
    std::fs::write(&path, "metrics_listen = \"127.0.0.1:50999\"\n").expect("write config");
    let path = path.to_string_lossy().into_owned();
    let (code, _, stderr) =
        toolplane_cli(&["serve", "--config", &path, "--listen", "0.0.0.0:50999"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "--listen 0.0.0.0:50999 and metrics_listen 127.0.0.1:50999 cannot both be served"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("toolplane serving"), "{stderr}");
}

/// `toolplane config check` reads a configuration as `serve` does and refuses, with exit 2 and
/// the setting named, what `serve` would refuse at its start (a bad setting, an unreadable TLS
/// file or OAuth key file, a records directory that does not exist); a usable one exits 0 saying what it serves.
#[test]
fn config_check_refuses_what_serve_would_and_summarizes_the_rest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("toolplane.toml");
    let check = |text: &str| {
        std::fs::write(&path, text).expect("write config");
        toolplane_cli(&["config", "check", "--config", &path.to_string_lossy()])
    };
    let records = dir.path().join("records.jsonl");
    let (code, stdout, stderr) = check(&format!(
        "listen = \"0.0.0.0:50051\"\nmetrics_listen = \"0.0.0.0:9090\"\nrecords_path = {:?}\n",
        records.display().to_string()
    ));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("configuration ok"), "{stdout}");
    assert!(
        stdout.contains("gRPC:        0.0.0.0:50051 (plain text)"),
        "{stdout}"
    );
    assert!(stdout.contains("metrics:     0.0.0.0:9090"), "{stdout}");
    assert!(
        stdout.contains("tenants:     any tenant a caller names"),
        "{stdout}"
    );
    assert!(!records.exists(), "a check writes nothing");
    // An import's command that cannot be found is warned of; serve would start all the same.
    let (code, stdout, stderr) = check(
        "[[mcp_imports]]\nservice = \"gone\"\ncommand = [\"/nonexistent/mcp-server\"]\n\
         [[mcp_imports]]\nservice = \"shell\"\ncommand = [\"sh\", \"server.sh\"]\n",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout
            .lines()
            .filter(|line| line.contains("warning:"))
            .collect::<Vec<_>>(),
        [
            "  warning:     MCP import gone: command \"/nonexistent/mcp-server\" is not found (as a \
             file, or on PATH); serve starts anyway, and tries it again at each call and refresh"
        ],
        "{stdout}"
    );
    // How an import authenticates is said, its secret not.
    let (code, stdout, stderr) = check(
        "[[mcp_imports]]\nservice = \"crm\"\nurl = \"https://crm.internal/mcp\"\n\
         [mcp_imports.oauth_client_credentials]\nclient_id = \"toolplane\"\n\
         client_secret_env = \"PATH\"\nscopes = [\"crm:read\"]\n",
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(
            "  MCP imports: crm (https://crm.internal/mcp; OAuth client credentials of client \
             toolplane, with a secret, scopes crm:read)"
        ),
        "{stdout}"
    );
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("write the token");
    let (code, stdout, stderr) = check(&format!(
        "[[mcp_imports]]\nservice = \"crm\"\nurl = \"https://crm.internal/mcp\"\n\
         bearer_token_file = {:?}\n",
        token.display().to_string()
    ));
    assert_eq!(code, 0, "{stderr}");
    let said = format!(
        "  MCP imports: crm (https://crm.internal/mcp; bearer token file {})",
        token.display()
    );
    assert!(
        stdout.contains(&said) && !stdout.contains("s3cret"),
        "{stdout}"
    );
    for (text, named) in [
        ("max_ttl = \"1s\"\nmin_ttl = \"2s\"\n", "ttl"),
        (
            "tls_cert_file = \"/nonexistent/cert.pem\"\ntls_key_file = \"/nonexistent/key.pem\"\n",
            "tls_cert_file /nonexistent/cert.pem",
        ),
        (
            "records_path = \"/nonexistent/dir/records.jsonl\"\n",
            "its directory /nonexistent/dir does not exist",
        ),
        (
            "[[tenant_access]]\nidentity = \"planner.agents.svc\"\ntenants = [1]\n",
            "set tls_client_ca_file",
        ),
        (
            "listen = \"localhost:50051\"\n",
            "listen: \"localhost:50051\" is not an IP address and port such as 0.0.0.0:50051",
        ),
        (
            "listen = \"127.0.0.1:50051\"\nmcp_listen = \"0.0.0.0:50051\"\n",
            "listen 127.0.0.1:50051 and mcp_listen 0.0.0.0:50051 cannot both be served",
        ),
        (
            "max_invoke_timeout = \"5 parsecs\"\n",
            "max_invoke_timeout: \"5 parsecs\" is not a duration written as text, such as \
             \"30s\", \"500ms\" or \"5m\": unknown time unit \"parsecs\"",
        ),
        (
            "[[mcp_imports]]\nservice = \"crm\"\nurl = \"https://crm.internal/mcp\"\n\
             [mcp_imports.oauth_client_credentials]\nclient_id = \"toolplane\"\n\
             private_key_file = \"/nonexistent/crm.pem\"\n",
            "oauth_client_credentials of service crm: cannot read private_key_file \
             /nonexistent/crm.pem",
        ),
        (
            "[[mcp_imports]]\nservice = \"crm\"\nurl = \"https://crm.internal/mcp\"\n\
             bearer_token_file = \"/nonexistent/token\"\n",
            "bearer_token_file of service crm: the bearer token file /nonexistent/token cannot \
             be read",
        ),
    ] {
        let (code, _, stderr) = check(text);
        assert_eq!(code, 2, "{text}");
        assert!(stderr.contains(named), "{text}: {stderr}");
    }
}

/// A `TOOLPLANE_*` variable no setting reads (a misspelt one) is warned of, naming the
/// setting's variable it may have meant: by `config check` (which still exits 0) and by
/// `serve` as it starts. Variables toolplane's other commands read are not.
#[test]
fn a_variable_no_setting_reads_is_warned_of() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolplane"))
        .args(["config", "check", "--config", "/dev/null"])
        .env("TOOLPLANE_MAX_INVOKE_TIMOUT", "3s")
        .env("TOOLPLANE_ENDPOINT", "http://127.0.0.1:1")
        .env_remove(common::process::REQUIRE_PEERS)
        .output()
        .expect("run config check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let warnings: Vec<_> = (stdout.lines())
        .filter(|line| line.contains("warning:"))
        .collect();
    assert_eq!(
        warnings,
        [
            "  warning:     TOOLPLANE_MAX_INVOKE_TIMOUT is set, but no setting reads it; did you \
             mean TOOLPLANE_MAX_INVOKE_TIMEOUT?"
        ],
        "{stdout}"
    );
    let server = ServerProcess::start(&[("TOOLPLANE_MAX_INVOKE_TIMOUT", "3s")]);
    let logged = server.log_lines_with("TOOLPLANE_MAX_INVOKE_TIMOUT is set");
    assert!(
        logged.len() == 1 && logged[0].contains("WARN"),
        "{logged:?}"
    );
}

/// A `RUST_LOG` that does not read is said in a WARN line, and the server logs as without it.
#[test]
fn a_rust_log_that_does_not_read_is_warned_of() {
    let server = ServerProcess::start(&[("RUST_LOG", "toolplane=verbose")]);
    let logged = server.log_lines_with("RUST_LOG cannot be read");
    assert!(
        logged.len() == 1
            && logged[0].contains("WARN")
            && logged[0].contains("rust_log=\"toolplane=verbose\""),
        "{logged:?}"
    );
}

/// A variable that is not UTF-8 text, set for another program, is no concern of toolplane's
/// (reading the environment with `std::env::vars` panicked on it, stopping the server at its
/// start); a `TOOLPLANE_*` one is refused naming it.
#[test]
fn a_variable_that_is_not_text_stops_nothing_unless_it_is_a_setting() {
    use std::os::unix::ffi::OsStrExt;
    let not_text = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let check = |name: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolplane"))
            .args(["config", "check", "--config", "/dev/null"])
            .env(name, not_text)
            .env_remove(common::process::REQUIRE_PEERS)
            .output()
            .expect("run config check");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), stderr)
    };
    let (code, stderr) = check("OTHER_PROGRAMS_SETTING");
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = check("TOOLPLANE_MAX_TTL");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("(environment): TOOLPLANE_MAX_TTL: not UTF-8 text"),
        "{stderr}"
    );
}

/// A command whose reader has gone (`toolplane config check | head -1`) ends quietly, with
/// the status of a program SIGPIPE ended, instead of panicking.
#[test]
fn a_reader_that_has_gone_ends_the_command_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolplane"))
        .args(["config", "check", "--config", "/dev/null"])
        .env_remove("RUST_BACKTRACE")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run config check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// At the default level every line the server logs for a call names its tenant and correlation
/// id: RegisterService's through its INFO span, a retried InvokeTool's (whose span is at
/// DEBUG) through the event's own fields.
#[tokio::test(flavor = "multi_thread")]
async fn log_lines_name_the_call_they_belong_to() {
    let server = ServerProcess::start(&[("RUST_LOG", "info")]);
    let port = toolplane::bench::procs::free_port().expect("a free port");
    let mut discovery =
        toolplane::pb::discovery_service_client::DiscoveryServiceClient::connect(server.endpoint())
            .await
            .expect("connect");
    let mut gone = registration("gone", vec![simple_tool("t")]);
    gone.endpoint = format!("http://127.0.0.1:{port}");
    register_ok(&mut discovery, 6, gone).await;
    let mut invoker = toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient::connect(
        server.endpoint(),
    )
    .await
    .expect("connect");
    let error = invoker
        .invoke_tool(toolplane::pb::InvokeToolRequest {
            meta: Some(toolplane::envelope::request_meta(
                toolplane::envelope::TenantId(6),
                "retry-corr-42",
            )),
            tool_name: "t".into(),
            input: schema(serde_json::json!({})),
            retry_policy: common::invoke_fixture::retry_policy(2),
            ..Default::default()
        })
        .await
        .expect_err("nobody listens");
    assert_eq!(error.code(), tonic::Code::Unavailable);

    eventually("the server logs the registration and the retry", || {
        let registered = server.log_lines_with("service registered");
        let retried = server.log_lines_with("retrying tool call");
        async move { !registered.is_empty() && !retried.is_empty() }
    })
    .await;
    let registered = server.log_lines_with("service registered").join("\n");
    assert!(
        registered.contains("tenant=6")
            && registered.contains("correlation_id=\"test-correlation\""),
        "{registered}"
    );
    let retried = server.log_lines_with("retrying tool call").join("\n");
    assert!(
        retried.contains("tenant=6")
            && retried.contains("correlation_id=retry-corr-42")
            && retried.contains("tool=t"),
        "{retried}"
    );
}

/// Each binary's `--help` opens with what that binary is, not with the crate's description.
#[test]
fn each_binary_says_what_it_is() {
    let binaries = [
        (env!("CARGO_BIN_EXE_toolplane"), "gRPC control plane"),
        (
            env!("CARGO_BIN_EXE_structs-provider"),
            "example Structs tool provider",
        ),
        (
            env!("CARGO_BIN_EXE_toolplane-bench"),
            "Benchmarks toolplane",
        ),
    ];
    for (binary, what) in binaries {
        let (code, help, _) = run_binary(binary, &["--help"]);
        assert_eq!(code, 0, "{binary} --help failed");
        let first = help.lines().next().unwrap_or_default();
        assert!(first.contains(what), "{binary}: {first}");
    }
}

/// `toolplane serve` serves Prometheus metrics where `metrics_listen` says, and logs where.
#[test]
fn serve_answers_metrics_scrapes_where_configured() {
    use std::io::{Read, Write};
    let server = ServerProcess::start(&[("TOOLPLANE_METRICS_LISTEN", "127.0.0.1:0")]);
    let address = server.logged_address("metrics served at /metrics");
    let mut stream = std::net::TcpStream::connect(&address).expect("connect to the metrics port");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: toolplane\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(answer.contains("\ntoolplane_serving 1\n"), "{answer}");
    assert!(
        answer.contains("\ntoolplane_registered_services 0\n"),
        "{answer}"
    );
}

/// Two example providers started as replicas (`--instance-id`, `TOOLPLANE_INSTANCE_ID`) hold
/// one service together: `toolplane services` lists both instances, and a replica that stops
/// leaves the other serving.
#[test]
fn replicas_of_the_example_provider_share_one_service() {
    use common::process::ChildGuard;
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let _first = ChildGuard::structs_provider_with(&endpoint, &["--instance-id", "pod-a"]);
    let second = ChildGuard::structs_provider_with(&endpoint, &["--instance-id", "pod-b"]);
    let instances = || -> Vec<String> {
        let (code, stdout, stderr) =
            toolplane_cli(&["services", "--endpoint", &endpoint, "--json"]);
        assert_eq!(code, 0, "{stderr}");
        let services: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        let mut ids: Vec<String> = services[0]["instances"]
            .as_array()
            .map(|instances| {
                instances
                    .iter()
                    .map(|instance| instance["instance_id"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    };
    let wait_for = |want: &[&str]| {
        let give_up = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let seen = instances();
            if seen == want {
                return;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "instances {seen:?}, want {want:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(&["pod-a", "pod-b"]);
    let (code, stdout, stderr) = toolplane_cli(&["services", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("INSTANCES"), "{stdout}");
    // The table as kubectl prints one: the first column at the margin, no padding at line ends.
    let header = stdout.lines().next().unwrap_or_default();
    assert!(header.starts_with("SERVICE   VERSION   "), "{stdout}");
    assert!(
        stdout.lines().all(|line| line == line.trim_end()),
        "{stdout:?}"
    );

    // A replica stopping deregisters its own instance only.
    drop(second);
    wait_for(&["pod-a"]);
    let (code, stdout, stderr) = toolplane_cli(&[
        "invoke",
        "structs_calculate_power",
        "--input",
        r#"{"alpha_matter": 100, "generator_type": "reactor"}"#,
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "the remaining replica answers: {stderr}");
    assert!(!stdout.trim().is_empty());
}
