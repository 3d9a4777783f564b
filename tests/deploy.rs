//! The Kubernetes manifests in `deploy/kubernetes/`: valid against the Kubernetes API schemas
//! (`kubernetes-validate --strict`), consistent with each other and with `deploy/Dockerfile`
//! (which passes hadolint), and the real server, started with the Deployment's arguments and
//! environment and the ConfigMap's `toolplane.toml`, answering its probes, gRPC health and an
//! MCP client that names the Service, and stopping cleanly on SIGTERM.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::process::peer;
use serde_json::Value;
use toolplane::config::ServerConfig;

/// The Kubernetes version the manifests are checked against (the oldest still supported by
/// the major managed offerings when written).
const KUBERNETES_VERSION: &str = "1.30.0";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn manifests() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join("kubernetes"))
        .expect("deploy/kubernetes")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .collect();
    paths.sort();
    paths
}

/// Every object of the manifests, by kind, read with PyYAML (installed with kubernetes-validate);
/// `None` when the Python peers are not installed. The Namespace is the first file's: `kubectl
/// apply -f deploy/kubernetes/` takes the files in name order, and the others are in it.
fn objects() -> Option<HashMap<String, Value>> {
    let python = peer("venv/bin/python")?;
    let mut objects = HashMap::new();
    for (index, path) in manifests().into_iter().enumerate() {
        let output = Command::new(&python)
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            ])
            .arg(&path)
            .output()
            .expect("run python");
        assert!(output.status.success(), "{path:?}: {output:?}");
        let documents: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
        for document in documents {
            let kind = document["kind"].as_str().expect("a kind").to_owned();
            assert_eq!(kind == "Namespace", index == 0, "{path:?} holds a {kind}");
            assert!(
                objects.insert(kind.clone(), document).is_none(),
                "two {kind}s"
            );
        }
    }
    Some(objects)
}

/// The manifests pass `kubernetes-validate --strict` (unknown fields refused) for Kubernetes
/// 1.30.
#[test]
fn the_manifests_validate_against_the_kubernetes_api_schemas() {
    let Some(validate) = peer("venv/bin/kubernetes-validate") else {
        return;
    };
    let output = Command::new(validate)
        .args(["-k", KUBERNETES_VERSION, "--strict"])
        .args(manifests())
        .output()
        .expect("run kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    for kind in [
        "namespace",
        "configmap",
        "persistentvolumeclaim",
        "deployment",
        "service",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}/")),
            "{text}"
        );
    }
}

/// `deploy/Dockerfile` passes hadolint (the Dockerfile linter, with ShellCheck for `RUN`)
/// without a warning: images pinned, no root user, exec-form entry point.
#[test]
fn the_dockerfile_passes_hadolint() {
    let Some(hadolint) = peer("venv/bin/hadolint") else {
        return;
    };
    let output = Command::new(hadolint)
        .args(["--failure-threshold", "warning", "--no-color"])
        .arg(deploy_dir().join("Dockerfile"))
        .output()
        .expect("run hadolint");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The port of a listen address such as `0.0.0.0:50051`.
fn port_of(address: &str) -> u64 {
    address
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {address:?}"))
}

/// The configuration, ports, volumes, user and grace period of the manifests and the
/// Dockerfile agree: each config address's port is the container port of that name, each
/// Service port targets a container port, the config file, the records and the agents are
/// where volumes are mounted (the root filesystem is read-only), the Dockerfile's user and ports are the
/// Deployment's, and `drain_grace` is shorter than the pod's grace period.
#[test]
fn the_manifests_agree_with_each_other_and_the_dockerfile() {
    let Some(objects) = objects() else {
        return;
    };
    let deployment = &objects["Deployment"];
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let ports: HashMap<&str, u64> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|port| {
            (
                port["name"].as_str().expect("a port name"),
                port["containerPort"].as_u64().expect("a port"),
            )
        })
        .collect();
    let config_text = objects["ConfigMap"]["data"]["toolplane.toml"]
        .as_str()
        .expect("toolplane.toml");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config_path = dir.path().join("toolplane.toml");
    std::fs::write(&config_path, config_text).expect("written");
    let config = ServerConfig::load(Some(&config_path), std::iter::empty()).expect("a config");
    assert_eq!(ports["grpc"], u64::from(config.listen.port()));
    assert_eq!(ports["metrics"], port_of(&config.metrics_listen));
    assert_eq!(ports["mcp"], port_of(&config.mcp_listen));
    for port in objects["Service"]["spec"]["ports"]
        .as_array()
        .expect("ports")
    {
        let target = port["targetPort"].as_str().expect("a named target port");
        assert!(ports.contains_key(target), "no container port {target}");
    }
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
    let scrape = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(scrape["prometheus.io/port"], ports["metrics"].to_string());

    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|mount| mount["mountPath"].as_str().expect("a path"))
        .collect();
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| arg.as_str().expect("an argument"))
        .collect();
    let config_arg = args
        .iter()
        .position(|arg| *arg == "--config")
        .map(|index| Path::new(args[index + 1]))
        .expect("--config");
    assert!(mounts.contains(&config_arg.parent().expect("a dir").to_str().expect("UTF-8")));
    assert_eq!(config_arg.file_name().expect("a name"), "toolplane.toml");
    for (setting, path) in [
        ("records_path", &config.records_path),
        ("agents_path", &config.agents_path),
    ] {
        assert!(
            !path.is_empty() && mounts.iter().any(|mount| path.starts_with(mount)),
            "{setting} {path:?} is on no volume: the root filesystem is read-only"
        );
    }
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);

    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(config.drain_grace < Duration::from_secs(grace));

    let dockerfile = std::fs::read_to_string(deploy_dir().join("Dockerfile")).expect("Dockerfile");
    let user = pod["securityContext"]["runAsUser"]
        .as_u64()
        .expect("a user");
    assert!(
        dockerfile.contains(&format!("\nUSER {user}:")),
        "USER {user}"
    );
    let exposed = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("EXPOSE "))
        .expect("EXPOSE");
    let mut exposed: Vec<u64> = exposed
        .split_whitespace()
        .map(|port| port.parse().expect("a port"))
        .collect();
    let mut container_ports: Vec<u64> = ports.values().copied().collect();
    exposed.sort_unstable();
    container_ports.sort_unstable();
    assert_eq!(exposed, container_ports);
}

/// The addresses a server logging JSON lines says it serves at, by message.
fn served_addresses(lines: impl Iterator<Item = String>) -> HashMap<String, String> {
    let mut found = HashMap::new();
    for line in lines {
        let Ok(entry) = serde_json::from_str::<Value>(&line) else {
            panic!("a log line that is not JSON (log_format = \"json\"): {line}");
        };
        let fields = &entry["fields"];
        if let (Some(message), Some(address)) =
            (fields["message"].as_str(), fields["address"].as_str())
        {
            found.insert(message.to_owned(), address.to_owned());
        }
        if found.len() == 3 {
            break;
        }
    }
    found
}

/// `toolplane config check` passes the ConfigMap's file; the server, started as the Deployment
/// starts it (its arguments and environment, the ConfigMap's file) with only the listen
/// addresses moved to free loopback ports and the records and agents to a temporary directory, answers
/// its probes, gRPC health and an MCP client naming the Service by its in-cluster name, and
/// exits 0 on SIGTERM.
#[tokio::test(flavor = "multi_thread")]
async fn the_server_runs_as_the_deployment_starts_it() {
    let Some(objects) = objects() else {
        return;
    };
    let container = &objects["Deployment"]["spec"]["template"]["spec"]["containers"][0];
    let dir = tempfile::tempdir().expect("temporary directory");
    let config_path = dir.path().join("toolplane.toml");
    let config_text = objects["ConfigMap"]["data"]["toolplane.toml"]
        .as_str()
        .expect("toolplane.toml");
    std::fs::write(&config_path, config_text).expect("written");
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|arg| arg.as_str().expect("an argument").to_owned())
        .collect();
    let config_index = args
        .iter()
        .position(|arg| arg == "--config")
        .expect("--config")
        + 1;
    let mut args = args;
    args[config_index] = config_path.display().to_string();
    let records = dir.path().join("records.jsonl");
    let agents = dir.path().join("agents");
    // `config check` takes the ConfigMap's file as it is (its records and agents directories
    // aside, which are the volume's).
    let check = Command::new(env!("CARGO_BIN_EXE_toolplane"))
        .args(["config", "check", "--config"])
        .arg(&config_path)
        .env_clear()
        .env("TOOLPLANE_RECORDS_PATH", &records)
        .env("TOOLPLANE_AGENTS_PATH", &agents)
        .output()
        .expect("run config check");
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{check:?}");
    for line in [
        "gRPC:        0.0.0.0:50051 (plain text)",
        "metrics:     0.0.0.0:9090",
        "MCP:         0.0.0.0:8080",
    ] {
        assert!(summary.contains(line), "{summary}");
    }

    let mut command = Command::new(env!("CARGO_BIN_EXE_toolplane"));
    command.args(&args).env_clear();
    for variable in container["env"].as_array().into_iter().flatten() {
        command.env(
            variable["name"].as_str().expect("a name"),
            variable["value"].as_str().expect("a value"),
        );
    }
    command
        .env("TOOLPLANE_LISTEN", "127.0.0.1:0")
        .env("TOOLPLANE_METRICS_LISTEN", "127.0.0.1:0")
        .env("TOOLPLANE_MCP_LISTEN", "127.0.0.1:0")
        .env("TOOLPLANE_RECORDS_PATH", &records)
        .env("TOOLPLANE_AGENTS_PATH", &agents)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = common::process::ChildGuard(command.spawn().expect("start toolplane"));
    let stderr = server.0.stderr.take().expect("piped");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let served = served_addresses(&mut lines);
    std::thread::spawn(move || lines.for_each(drop));
    let metrics = &served["metrics served at /metrics"];
    let scrape = &objects["Deployment"]["spec"]["template"]["metadata"]["annotations"];
    let metrics_path = scrape["prometheus.io/path"].as_str().expect("a path");
    let grpc = &served["toolplane serving"];
    let mcp = &served["MCP served at /mcp"];

    let http = common::http_client();
    let scraped = (http.get(format!("http://{metrics}{metrics_path}")).send())
        .await
        .expect("scraped");
    assert_eq!(scraped.status(), 200, "{metrics_path}");
    for probe in ["readinessProbe", "livenessProbe"] {
        let path = container[probe]["httpGet"]["path"]
            .as_str()
            .expect("a path");
        let answer = http
            .get(format!("http://{metrics}{path}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(answer.status(), 200, "{probe} {path}");
    }

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .expect("an endpoint")
        .connect()
        .await
        .expect("connected");
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health answered")
        .into_inner();
    assert_eq!(
        health.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let service_port = objects["Service"]["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|port| port["name"] == "mcp")
        .and_then(|port| port["port"].as_u64())
        .expect("the mcp port");
    let host = format!("toolplane.toolplane.svc.cluster.local:{service_port}");
    let answer = http
        .post(format!("http://{mcp}/mcp"))
        .header("host", &host)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"deploy-test","version":"1"}}}"#,
        )
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 200, "an MCP client naming {host}");

    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.expect("kill").success());
    let give_up = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.0.try_wait().expect("poll") {
            break status;
        }
        assert!(Instant::now() < give_up, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    assert!(records.exists(), "the records file was opened at the start");
    assert!(
        agents.is_dir(),
        "the agents directory was made at the start"
    );
}
