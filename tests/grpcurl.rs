//! The running server driven by real grpcurl (1.8.6, reflection v1alpha): list, describe, a
//! RegisterService with a JSON body, SearchTools, ListTools by domain, Preflight, and grpc.health.v1 Check.

use crate::common;

use std::process::Command;

use common::process::{ServerProcess, peer};

fn grpcurl(args: &[&str]) -> (bool, String, String) {
    let binary = peer("venv/bin/grpcurl").expect("checked by the caller");
    let output = Command::new(binary)
        .args(args)
        .output()
        .expect("run grpcurl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const REGISTRATION: &str = r#"{
  "meta": {"tenant_id": 7, "correlation_id": "grpcurl-1"},
  "registration": {
    "service_name": "story-generator", "service_version": "0.0.1",
    "endpoint": "http://127.0.0.1:7001", "ttl": "30s",
    "tools": [{"tool_name": "generate_structure", "description": "Generates a DAG",
               "tool_schema": {"type": "object",
                               "properties": {"theme": {"type": "string"}, "node_count": {"type": "integer", "minimum": 8}},
                               "required": ["theme"]},
               "capabilities": ["SERVICE_CAPABILITY_BATCHING", "SERVICE_CAPABILITY_RETRY"]}]}
}"#;

/// grpcurl sees every service through reflection and can call them with JSON.
#[test]
fn grpcurl_lists_describes_and_calls() {
    if peer("venv/bin/grpcurl").is_none() {
        return;
    }
    let server = ServerProcess::start(&[]);
    let addr = server.addr.clone();

    // `list` names what the server serves, and nothing else: ToolProviderService is in the
    // same descriptors but served by providers; it is still described, for their authors.
    let (ok, listed, err) = grpcurl(&["-plaintext", &addr, "list"]);
    assert!(ok, "{err}");
    assert_eq!(
        listed.lines().collect::<Vec<_>>(),
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "toolplane.v1.AgentService",
            "toolplane.v1.DiscoveryService",
            "toolplane.v1.HealthService",
            "toolplane.v1.ToolInvokeService",
        ],
        "{listed}"
    );
    let (ok, described, err) = grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "toolplane.v1.ToolProviderService",
    ]);
    assert!(ok && described.contains("rpc CallTool"), "{err}{described}");
    let (ok, described, err) = grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "toolplane.v1.DiscoveryService",
    ]);
    assert!(ok, "{err}");
    assert!(
        described.contains("rpc RegisterService") && described.contains("rpc WatchServices"),
        "{described}"
    );
    let (ok, described, err) = grpcurl(&["-plaintext", &addr, "describe", "grpc.health.v1.Health"]);
    assert!(ok, "{err}");
    assert!(described.contains("rpc Watch"), "{described}");
    let (ok, described, err) = grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "toolplane.v1.ToolRegistration",
    ]);
    assert!(ok, "{err}");
    assert!(described.contains("definition_sha256"), "{described}");

    let (ok, registered, err) = grpcurl(&[
        "-plaintext",
        "-d",
        REGISTRATION,
        &addr,
        "toolplane.v1.DiscoveryService/RegisterService",
    ]);
    assert!(ok, "{err}");
    let registered: serde_json::Value = serde_json::from_str(&registered).expect("JSON answer");
    assert!(
        registered["leaseId"]
            .as_str()
            .is_some_and(|id| id.len() == 36),
        "{registered}"
    );
    assert_eq!(registered["meta"]["correlationId"], "grpcurl-1");
    assert_eq!(
        registered["tools"][0]["definitionSha256"]
            .as_str()
            .map(str::len),
        Some(64)
    );

    // The integer bound survives the Struct round trip as an integer.
    let (ok, tool, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"meta": {"tenant_id": 7}, "tool_name": "generate_structure"}"#,
        &addr,
        "toolplane.v1.DiscoveryService/GetTool",
    ]);
    assert!(ok, "{err}");
    assert!(tool.contains("\"minimum\": 8"), "{tool}");

    let (ok, found, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"meta": {"tenant_id": 7}, "query": "generating a DAG", "max_results": 5}"#,
        &addr,
        "toolplane.v1.DiscoveryService/SearchTools",
    ]);
    assert!(ok, "{err}");
    let found: serde_json::Value = serde_json::from_str(&found).expect("JSON answer");
    assert_eq!(
        found["matches"][0]["tool"]["toolName"], "generate_structure",
        "{found}"
    );
    assert!(
        found["matches"][0]["score"]
            .as_f64()
            .is_some_and(|score| score > 0.0),
        "{found}"
    );
    assert_eq!(found["totalMatches"], 1, "{found}");

    let (ok, listed, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"meta": {"tenant_id": 7}, "domain": "story-generator.structures"}"#,
        &addr,
        "toolplane.v1.DiscoveryService/ListTools",
    ]);
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON answer");
    assert_eq!(
        listed["tools"][0]["domains"],
        serde_json::json!(["story-generator", "story-generator.structures"]),
        "{listed}"
    );

    let preflight = r#"{"meta": {"tenant_id": 7}, "requirements": [
        {"service_name": "story-generator", "tool_names": ["generate_structure"]},
        {"service_name": "quality-control", "tool_names": ["validate_content"], "optional": true}]}"#;
    let (ok, answer, err) = grpcurl(&[
        "-plaintext",
        "-d",
        preflight,
        &addr,
        "toolplane.v1.DiscoveryService/Preflight",
    ]);
    assert!(ok, "{err}");
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(
        answer["missingOptional"][0]["reason"],
        "MISSING_REASON_SERVICE_NOT_REGISTERED"
    );

    let (ok, health, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"service": ""}"#,
        &addr,
        "grpc.health.v1.Health/Check",
    ]);
    assert!(ok, "{err}");
    assert!(health.contains("\"SERVING\""), "{health}");
    let (ok, health, err) = grpcurl(&[
        "-plaintext",
        "-H",
        "toolplane-tenant-id: 7",
        "-d",
        r#"{"service": "story-generator"}"#,
        &addr,
        "grpc.health.v1.Health/Check",
    ]);
    assert!(ok, "{err}");
    assert!(health.contains("\"SERVING\""), "{health}");

    // A bad registration shows its code and details to a grpcurl user too: the details are
    // printed as JSON, their types resolved through reflection.
    let (ok, _, err) = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"registration": {"service_name": "Bad Name", "service_version": "1.0.0"}}"#,
        &addr,
        "toolplane.v1.DiscoveryService/RegisterService",
    ]);
    assert!(!ok);
    assert!(
        err.contains("InvalidArgument") && err.contains("registration.service_name"),
        "{err}"
    );
    for readable in [
        r#""@type":"type.googleapis.com/google.rpc.ErrorInfo""#,
        r#""reason":"VALIDATION_NAME""#,
        r#""@type":"type.googleapis.com/google.rpc.BadRequest""#,
        r#""field":"registration.service_name""#,
    ] {
        assert!(err.contains(readable), "{readable} not in {err}");
    }
    assert!(!err.contains("not recognized"), "{err}");
}

/// A `toolplane-tenant-id` header sent with an enveloped call (as a client sending it for its
/// grpc.health.v1 calls may) must name the envelope's tenant: one naming another tenant, or no
/// tenant at all, is refused with the field to fix, and nothing is registered anywhere.
#[test]
fn a_tenant_header_must_agree_with_the_envelope() {
    if peer("venv/bin/grpcurl").is_none() {
        return;
    }
    let server = ServerProcess::start(&[]);
    let addr = server.addr.clone();
    let register = |header: &str| {
        grpcurl(&[
            "-plaintext",
            "-H",
            header,
            "-d",
            REGISTRATION,
            &addr,
            "toolplane.v1.DiscoveryService/RegisterService",
        ])
    };
    let services_of = |tenant: &str| {
        let (ok, listed, err) = grpcurl(&[
            "-plaintext",
            "-d",
            &format!(r#"{{"meta": {{"tenant_id": {tenant}}}}}"#),
            &addr,
            "toolplane.v1.DiscoveryService/ListServices",
        ]);
        assert!(ok, "{err}");
        listed.contains("story-generator")
    };

    let (ok, _, err) = register("toolplane-tenant-id: 3");
    assert!(!ok);
    for said in [
        "InvalidArgument",
        "names tenant 3, but the envelope names tenant 7",
        r#""field":"meta.tenant_id""#,
        r#""reason":"VALIDATION_FIELD""#,
    ] {
        assert!(err.contains(said), "{said} not in {err}");
    }
    let (ok, _, err) = register("toolplane-tenant-id: seven");
    assert!(!ok);
    assert!(
        err.contains("InvalidArgument") && err.contains(r#""field":"toolplane-tenant-id""#),
        "{err}"
    );
    assert!(!services_of("3") && !services_of("7"), "nothing registered");

    let (ok, _, err) = register("toolplane-tenant-id: 7");
    assert!(ok, "{err}");
    assert!(services_of("7"));
}

/// The README's walk-through: server, example provider, preflight, invoke with the CLI and with
/// grpcurl, records; an invocation whose deadline passes.
#[test]
fn example_provider_walkthrough() {
    use common::process::{ChildGuard, toolplane_cli};
    if peer("venv/bin/grpcurl").is_none() {
        return;
    }
    let server = ServerProcess::start(&[]);
    let endpoint = server.endpoint();
    let _provider = ChildGuard::structs_provider(&endpoint);
    common::process::wait_for_structs_provider(&endpoint);

    common::process::invoke_structs_damage(&["--endpoint", &endpoint]);

    // The input read from a file (`@FILE`).
    let inputs = tempfile::tempdir().expect("temp dir");
    let input_file = inputs.path().join("input.json");
    std::fs::write(&input_file, r#"{"id": 11}"#).expect("input written");
    let (code, _, stderr) = toolplane_cli(&[
        "invoke",
        "structs_validate_entity_id",
        "--endpoint",
        &endpoint,
        "--input",
        &format!("@{}", input_file.display()),
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("input/id") && stderr.contains("VALIDATION_INPUT"),
        "{stderr}"
    );

    let body = r#"{"meta": {"correlation_id": "walkthrough"}, "tool_name": "structs_calculate_proof_of_work",
                   "input": {"action_type": "ore_miner_complete", "entity_id": "5-42", "age": 14000, "difficulty": 14000}}"#;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("traceparent: 00-{trace_id}-b7ad6b7169203331-01");
    let (ok, answer, err) = grpcurl(&[
        "-plaintext",
        "-H",
        &traceparent,
        "-d",
        body,
        &server.addr,
        "toolplane.v1.ToolInvokeService/InvokeTool",
    ]);
    assert!(ok, "{err}");
    let answer: serde_json::Value = serde_json::from_str(&answer).expect("JSON answer");
    assert_eq!(answer["output"]["valid"], true, "{answer}");
    assert_eq!(answer["record"]["status"], "INVOCATION_STATUS_SUCCEEDED");
    assert_eq!(answer["record"]["correlationId"], "walkthrough");

    let (code, stdout, _) = toolplane_cli(&["records", "--endpoint", &endpoint, "--json"]);
    assert_eq!(code, 0);
    let records: serde_json::Value = serde_json::from_str(&stdout).expect("records JSON");
    assert_eq!(records.as_array().map(Vec::len), Some(3), "{records}");
    let (code, stdout, stderr) = toolplane_cli(&[
        "records",
        "--endpoint",
        &endpoint,
        "--service",
        "structs",
        "--status",
        "succeeded",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let succeeded: serde_json::Value = serde_json::from_str(&stdout).expect("records JSON");
    let of_structs = (records.as_array().expect("a list").iter())
        .filter(|record| record["service_name"] == "structs" && record["status"] == "succeeded")
        .count();
    assert!((1..3).contains(&of_structs), "{records}");
    assert_eq!(
        succeeded.as_array().map(Vec::len),
        Some(of_structs),
        "{succeeded} of {records}"
    );

    // From the grpcurl call's trace to its record.
    let (code, stdout, stderr) = toolplane_cli(&[
        "records",
        "--endpoint",
        &endpoint,
        "--trace-id",
        trace_id,
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let traced: serde_json::Value = serde_json::from_str(&stdout).expect("records JSON");
    assert_eq!(traced.as_array().map(Vec::len), Some(1), "{traced}");
    assert_eq!(traced[0]["correlation_id"], "walkthrough", "{traced}");
    assert_eq!(traced[0]["trace_id"], trace_id, "{traced}");
    let (code, stdout, stderr) = toolplane_cli(&[
        "records",
        "--endpoint",
        &endpoint,
        "--correlation-id",
        "walkthrough",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let correlated: serde_json::Value = serde_json::from_str(&stdout).expect("records JSON");
    assert_eq!(correlated.as_array().map(Vec::len), Some(1), "{correlated}");
    assert_eq!(
        correlated[0]["correlation_id"], "walkthrough",
        "{correlated}"
    );

    // A deadline that passes before any answer is DEADLINE_EXCEEDED, whichever side's timer
    // ends the call (tonic's own says CANCELLED).
    let (code, _, stderr) = toolplane_cli(&[
        "invoke",
        "structs_calculate_power",
        "--endpoint",
        &endpoint,
        "--input",
        r#"{"alpha_matter": 100, "generator_type": "reactor"}"#,
        "--timeout",
        "1ns",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("DeadlineExceeded"), "{stderr}");
    assert_eq!(server.terminate().code(), Some(0));
}
