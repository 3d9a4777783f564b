//! The call limits (`rate_limit_per_second`, `rate_limit_burst`, `[tool_rate_limits]`)
//! changed in the configuration file of a running `toolplane serve` apply to the calls after,
//! without a restart, against the example provider: a service limit raised, a tool limit
//! added, and a file that does not check refused with the limits in force kept; and SIGHUP
//! reads the file again at once.

use crate::common;

use common::process::{
    ChildGuard, ServerProcess, replace_file, wait_for_structs_provider, wait_until,
};
use common::reason;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

const HEADER: &str = "tls_reload_interval = \"200ms\"\n";

/// Calls `tool` of the example provider with an input it takes.
async fn call(
    invoker: &mut ToolInvokeServiceClient<Channel>,
    tool: &str,
) -> Result<pb::InvokeToolResponse, tonic::Status> {
    let input = match tool {
        "structs_calculate_power" => json!({"alpha_matter": 10, "generator_type": "reactor"}),
        _ => json!({"attacker": {"weapon_type": "laser", "power": 100},
                    "defender": {"armor": 50, "defense": 25}}),
    };
    invoker
        .invoke_tool(common::invoke_fixture::request(tool, input))
        .await
        .map(tonic::Response::into_inner)
}

/// Whether `count` calls of `tool` in a row are let through.
async fn let_through(
    invoker: &mut ToolInvokeServiceClient<Channel>,
    tool: &str,
    count: usize,
) -> bool {
    for _ in 0..count {
        if call(invoker, tool).await.is_err() {
            return false;
        }
    }
    true
}

fn refused_by(status: &tonic::Status, scope: &str) -> bool {
    status.code() == Code::ResourceExhausted
        && reason(status) == "RATE_LIMIT_EXCEEDED"
        && status.message().contains(scope)
}

/// A service limit raised and a tool limit added in the file apply to the calls after; a
/// malformed tool limit is refused and the limits in force stay; nothing is logged as waiting
/// for a restart.
#[tokio::test(flavor = "multi_thread")]
async fn limits_follow_the_configuration_file_without_a_restart() {
    let tight = format!("{HEADER}rate_limit_per_second = 1\nrate_limit_burst = 1\n");
    let (server, dir) = ServerProcess::start_with_config(&tight, &[], &[]);
    let file = dir.path().join("toolplane.toml");
    let _provider = ChildGuard::structs_provider(&server.endpoint());
    wait_for_structs_provider(&server.endpoint());
    let mut invoker = ToolInvokeServiceClient::connect(server.endpoint())
        .await
        .expect("connects");
    // One call a second for the service: a second call at once is refused (the pre-flight
    // checks above called nothing).
    call(&mut invoker, "structs_calculate_damage")
        .await
        .expect("the first call");
    let refused = call(&mut invoker, "structs_calculate_damage")
        .await
        .expect_err("over the limit");
    assert!(refused_by(&refused, "service structs"), "{refused:?}");

    // The service limit raised, and a limit for one tool added.
    let loose = format!(
        "{HEADER}rate_limit_per_second = 1000\nrate_limit_burst = 2000\n\
         [tool_rate_limits.\"structs/structs_calculate_power\"]\nper_second = 1\nburst = 1\n"
    );
    replace_file(&file, &loose);
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !let_through(&mut invoker, "structs_calculate_damage", 10).await {
        assert!(
            std::time::Instant::now() < give_up,
            "the limit was never raised"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    call(&mut invoker, "structs_calculate_power")
        .await
        .expect("the tool's first call");
    let refused = call(&mut invoker, "structs_calculate_power")
        .await
        .expect_err("over the tool's limit");
    assert!(
        refused_by(&refused, "tool structs/structs_calculate_power"),
        "{refused:?}"
    );

    // A tool limit not keyed SERVICE/TOOL: refused, and the limits in force stay.
    replace_file(
        &file,
        &format!(
            "{HEADER}rate_limit_per_second = 1\n[tool_rate_limits.nonsense]\nper_second = 1\nburst = 1\n"
        ),
    );
    wait_until("the file refused", || {
        server
            .log_lines_with("cannot be used")
            .iter()
            .any(|line| line.contains("rate limits"))
    });
    assert!(let_through(&mut invoker, "structs_calculate_damage", 10).await);
    assert!(
        server.log_lines_with("next restart").is_empty(),
        "limits need no restart: {:?}",
        server.log_lines_with("next restart")
    );
}

/// With `tls_reload_interval = "0s"` the configuration file is read only at the start and when
/// the server is sent SIGHUP, which reads it again at once (a limit changed in it is put in
/// force) and leaves it serving (SIGHUP's default action ended the process, undrained).
#[test]
fn sighup_reads_the_configuration_file_again_at_once() {
    let config =
        |rate: u32| format!("tls_reload_interval = \"0s\"\nrate_limit_per_second = {rate}\n");
    let (server, dir) = ServerProcess::start_with_config(&config(1), &[], &[]);
    replace_file(&dir.path().join("toolplane.toml"), &config(5));
    let changed = "rate limits changed in the configuration file put in force";
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        server.log_lines_with(changed).is_empty(),
        "not read again unasked"
    );
    server.hang_up();
    wait_until("the file was read again", || {
        !server.log_lines_with(changed).is_empty()
    });
    assert_eq!(
        server
            .log_lines_with("SIGHUP: reading the watched files again")
            .len(),
        1
    );
    assert_eq!(
        server.terminate().code(),
        Some(0),
        "served on, then drained"
    );
}
