//! `toolplane agent`: its commands against the real server and the example provider.

use crate::common;

use common::process::{ServerProcess, toolplane_cli};

/// `toolplane agent create|list|show|chat|messages|delete` against the real server and example
/// provider: chat streams the answer to stdout and the steps of the turn to stderr; messages
/// shows the conversation; delete removes the agent.
#[test]
fn agent_commands() {
    use common::process::ChildGuard;
    // One worker thread: the runtime size comes from the configuration (worker_threads).
    let server = ServerProcess::start(&[("TOOLPLANE_WORKER_THREADS", "1")]);
    let endpoint = server.endpoint();
    let _provider = ChildGuard::structs_provider(&endpoint);
    common::process::wait_for_structs_provider(&endpoint);

    let (code, stdout, stderr) = toolplane_cli(&[
        "agent",
        "create",
        "helper",
        "--allow",
        "structs_calculate_power",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("helper") && stdout.contains("idle") && stdout.contains("(the server's)"),
        "an agent naming no model is shown as using the server's: {stdout}"
    );

    let (code, stdout, stderr) = toolplane_cli(&[
        "agent",
        "chat",
        "helper",
        "hello there",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "hello there");
    assert!(
        stderr.contains("[idle -> thinking]") && stderr.contains("[reflecting -> idle]"),
        "{stderr}"
    );

    let (code, stdout, stderr) = toolplane_cli(&[
        "agent",
        "chat",
        "helper",
        r#"call structs_calculate_power {"alpha_matter": 4, "generator_type": "continentalPowerPlant"}"#,
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"power_generated\":20"), "{stdout}");
    assert!(
        stderr.contains("[tool structs_calculate_power on structs: succeeded]"),
        "{stderr}"
    );

    let (code, stdout, _) =
        toolplane_cli(&["agent", "show", "helper", "--json", "--endpoint", &endpoint]);
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(shown[0]["messages_processed"], 2);
    assert_eq!(shown[0]["state"], "idle");
    // The table form shows the same agent in full: a field a line, then its transitions.
    let (code, stdout, stderr) =
        toolplane_cli(&["agent", "show", "helper", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    let field = |name: &str| {
        (stdout.lines())
            .find_map(|line| {
                line.strip_prefix(name)
                    .filter(|rest| rest.starts_with("   "))
            })
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} line in {stdout}"))
    };
    assert_eq!(field("messages processed"), "2");
    assert_eq!(field("tools"), "structs_calculate_power");
    assert_eq!(field("model"), "(the server's)");
    let transitions: Vec<_> = (stdout.lines())
        .skip_while(|line| !line.starts_with("FROM"))
        .skip(1)
        .map(|line| {
            line.split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" -> ")
        })
        .collect();
    assert_eq!(
        transitions[transitions.len() - 4..],
        [
            "idle -> thinking",
            "thinking -> toolcall",
            "toolcall -> reflecting",
            "reflecting -> idle"
        ],
        "{stdout}"
    );
    let (code, stdout, _) = toolplane_cli(&["agent", "list", "--json", "--endpoint", &endpoint]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout)
            .expect("JSON")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let (code, _, stderr) =
        toolplane_cli(&["agent", "chat", "nobody", "hi", "--endpoint", &endpoint]);
    assert_eq!(code, 2);
    assert!(stderr.contains("NotFound"), "{stderr}");

    let (code, stdout, stderr) = toolplane_cli(&[
        "agent",
        "messages",
        "helper",
        "--json",
        "--endpoint",
        &endpoint,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let said: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let roles: Vec<_> = (said.as_array().expect("a list").iter())
        .map(|message| message["role"].as_str().expect("a role"))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "system",
            "assistant"
        ]
    );
    assert_eq!(said[0]["content"], "hello there");
    assert!(
        said[4]["metadata"]["toolplane.tool_name"] == "structs_calculate_power",
        "{said}"
    );
    let (code, stdout, _) =
        toolplane_cli(&["agent", "messages", "helper", "--endpoint", &endpoint]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("TIME"), "{stdout}");
    assert!(
        (stdout.lines()).any(|line| line.contains("user") && line.ends_with("hello there")),
        "{stdout}"
    );

    let (code, stdout, stderr) =
        toolplane_cli(&["agent", "delete", "helper", "--endpoint", &endpoint]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "deleted agent helper");
    let (code, stdout, _) = toolplane_cli(&["agent", "list", "--json", "--endpoint", &endpoint]);
    assert_eq!(code, 0);
    assert_eq!(stdout.trim(), "[]");
    let (code, _, stderr) = toolplane_cli(&["agent", "delete", "helper", "--endpoint", &endpoint]);
    assert_eq!(code, 2);
    assert!(stderr.contains("NotFound"), "{stderr}");
}
