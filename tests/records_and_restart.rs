//! The invocation record log across restarts (a torn last line included) and `toolplane audit
//! verify`, and a provider that registers again by itself when the control plane restarts.

use crate::common;

use std::time::{Duration, Instant};

use common::invoke_fixture::{get_record, invoke_power, tenant_records};
use common::process::toolplane_cli;
use common::provider::{TestProvider, start_structs_provider};
use common::*;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;
use toolplane::provider::structs::structs_tools;

fn write_lines(path: &std::path::Path, lines: &[&str]) {
    std::fs::write(
        path,
        lines
            .iter()
            .map(|line| format!("{line}\n"))
            .collect::<String>(),
    )
    .expect("write log");
}

/// Where `dir`'s record log is, and server options that write it.
fn logging_to(dir: &tempfile::TempDir) -> (std::path::PathBuf, ServerOptions) {
    let log = dir.path().join("records.jsonl");
    let options = ServerOptions {
        records_path: Some(log.clone()),
        ..test_options()
    };
    (log, options)
}

/// Records of every outcome go to the log; a restarted server continues the chain; `audit
/// verify` passes the intact log and names the first bad line of a deleted or edited one.
#[tokio::test(flavor = "multi_thread")]
async fn record_log_survives_restart_and_audit_catches_tampering() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, options) = logging_to(&dir);

    let first = TestServer::start_with(options.clone()).await;
    let provider = start_structs_provider(&first).await;
    invoke_power(&first, 100).await.expect("succeeds");
    invoke_power(&first, -5)
        .await
        .expect_err("invalid input is recorded too");
    provider.stop().await;
    first.stop().await;

    let second = TestServer::start_with(options).await;
    let answer = invoke_power(&second, 1)
        .await
        .expect_err("no provider now: rejected, and recorded");
    assert_eq!(answer.code(), tonic::Code::NotFound);
    second.stop().await;

    let path = log.to_string_lossy().into_owned();
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", &path]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("3 records, chain intact"),
        "the second server continued the chain: {stdout}"
    );

    let original = std::fs::read_to_string(&log).expect("read log");
    let lines: Vec<&str> = original.lines().collect();
    let records: Vec<serde_json::Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
        .collect();
    assert_eq!(
        records
            .iter()
            .map(|r| r["sequence"].as_u64().expect("sequence"))
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        records
            .iter()
            .map(|r| r["status"].as_str().expect("status"))
            .collect::<Vec<_>>(),
        ["succeeded", "invalid_input", "rejected"]
    );

    write_lines(&log, &[lines[0], lines[2]]);
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", &path]);
    assert_eq!(code, 1);
    assert!(stdout.contains("line 2"), "deleted line named: {stdout}");

    let edited = lines[1].replace("\"attempts\":0", "\"attempts\":1");
    assert_ne!(edited, lines[1]);
    write_lines(&log, &[lines[0], &edited, lines[2]]);
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", &path]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("line 2") && stdout.contains("edited"),
        "edited line named: {stdout}"
    );
}

/// A server killed while writing a record leaves a torn last line, which `audit verify` tells
/// of without failing the log; the next server removes it, goes on from the last whole record,
/// and `audit verify` passes the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_torn_last_line_is_removed_on_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, options) = logging_to(&dir);
    let first = TestServer::start_with(options.clone()).await;
    for _ in 0..2 {
        invoke_power(&first, 1)
            .await
            .expect_err("no such tool: recorded");
    }
    first.stop().await;
    let whole = std::fs::read_to_string(&log).expect("read log");
    let last = whole.lines().last().expect("a line");
    std::fs::write(&log, format!("{whole}{}", &last[..last.len() / 2])).expect("tear");
    let path = log.to_string_lossy().into_owned();
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", &path]);
    assert_eq!(code, 0, "a torn last line is not tampering: {stdout}");
    assert!(
        stdout.contains("2 records, chain intact")
            && stdout.contains("the last line")
            && stdout.contains("not checked"),
        "{stdout}"
    );

    let second = TestServer::start_with(options).await;
    invoke_power(&second, 1).await.expect_err("recorded");
    second.stop().await;
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", &path]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("3 records, chain intact"), "{stdout}");
    assert!(
        !stdout.contains("the last line"),
        "removed on restart: {stdout}"
    );
}

/// `audit verify` of a log the server goes on writing: the files named before a rotation (the
/// current file then held records now in a rotated file) still verify as one chain, the
/// rotated file checked in its place and told of.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_verified_as_the_server_rotates_it_still_verifies() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, mut options) = logging_to(&dir);
    // Records (rejected calls of an unknown tool) are about 700 bytes: two a file.
    options.records_rotate_bytes = 1_600;
    let server = TestServer::start_with(options).await;
    for _ in 0..3 {
        invoke_power(&server, 1).await.expect_err("recorded");
    }
    let rotated = |log: &std::path::Path| {
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").path().to_string_lossy().into_owned())
            .filter(|file| file.starts_with(&format!("{}.", log.display())))
            .collect();
        files.sort();
        files
    };
    // The files as a shell names them (`records.jsonl.* records.jsonl`), before a rotation.
    let mut named = rotated(&log);
    assert_eq!(named.len(), 1, "{named:?}");
    named.push(log.to_string_lossy().into_owned());
    for _ in 0..2 {
        invoke_power(&server, 1).await.expect_err("recorded");
    }
    server.stop().await;
    assert_eq!(rotated(&log).len(), 2, "rotated once more since");

    let mut args = vec!["audit", "verify"];
    args.extend(named.iter().map(String::as_str));
    let (code, stdout, _) = toolplane_cli(&args);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("5 records, chain intact") && stdout.contains("was not named but checked"),
        "{stdout}"
    );
}

/// When the control plane restarts (losing its in-memory registry) while the provider keeps
/// running, the provider registers again by itself within about one heartbeat.
#[tokio::test(flavor = "multi_thread")]
async fn provider_registers_again_after_control_plane_restart() {
    let first = TestServer::start().await;
    let addr = first.addr;
    let ttl = Duration::from_millis(900);
    let provider = TestProvider::start(
        structs_tools().expect("tools"),
        &first.endpoint(),
        "structs",
        ttl,
    )
    .await;
    wait_registered(&first, "structs").await;
    first.stop().await;

    let restarted_at = Instant::now();
    let second = TestServer::start_at(addr, test_options()).await;
    wait_registered(&second, "structs").await;
    eprintln!(
        "registered again {:?} after the restart (heartbeat interval {:?})",
        restarted_at.elapsed(),
        ttl / 3
    );
    invoke_power(&second, 7).await.expect("tools usable again");
    provider.stop().await;
}

/// A log past `records_rotate_bytes` is moved to `PATH.<first sequence>` and goes on in a new
/// file, across a restart too, whose server still lists the records of the rotated files;
/// `audit verify` checks the files, oldest first, as one chain, names the file a break is in,
/// and checks what is left after the oldest file is archived away against its head hash.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_record_log_verifies_as_one_chain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, mut options) = logging_to(&dir);
    // A record line is several hundred bytes: each file holds one or two.
    options.records_rotate_bytes = 1000;

    let first = TestServer::start_with(options.clone()).await;
    let provider = start_structs_provider(&first).await;
    for grams in [1, 2, 3] {
        invoke_power(&first, grams).await.expect("succeeds");
    }
    provider.stop().await;
    first.stop().await;
    let second = TestServer::start_with(options).await;
    let listed = tenant_records(&second, 0).await;
    let sequences: Vec<u64> = listed.iter().map(|r| r.sequence).collect();
    assert_eq!(
        sequences,
        [3, 2, 1],
        "the restarted server lists the records of the rotated files too"
    );
    invoke_power(&second, 4).await.expect_err("no provider now");
    second.stop().await;

    let mut rotated: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .map(|entry| entry.expect("entry").path().to_string_lossy().into_owned())
        .filter(|path| path.contains("records.jsonl."))
        .collect();
    rotated.sort();
    assert!(rotated.len() >= 2, "rotated: {rotated:?}");
    assert!(
        rotated[0].ends_with("records.jsonl.00000000000000000001"),
        "{rotated:?}"
    );
    let current = log.to_string_lossy().into_owned();
    let mut files: Vec<&str> = rotated.iter().map(String::as_str).collect();
    files.push(&current);

    let mut args = vec!["audit", "verify"];
    args.extend(&files);
    let (code, stdout, _) = toolplane_cli(&args);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("4 records, chain intact"),
        "the files are one chain, across the restart: {stdout}"
    );

    let mut missing = vec!["audit", "verify"];
    missing.extend(files.iter().skip(1));
    let (code, stdout, _) = toolplane_cli(&missing);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(files[1]) && stdout.contains("line 1") && stdout.contains("--after"),
        "the break is named with its file, and what to do: {stdout}"
    );

    // The oldest file archived away: the rest verifies from the head hash it verified to.
    let (code, stdout, _) = toolplane_cli(&["audit", "verify", files[0]]);
    assert_eq!(code, 0, "{stdout}");
    let head = stdout
        .trim()
        .rsplit(' ')
        .next()
        .expect("the head hash ends the line")
        .to_owned();
    let mut after = vec!["audit", "verify", "--after", &head];
    after.extend(files.iter().skip(1));
    let (code, stdout, _) = toolplane_cli(&after);
    assert_eq!(code, 0, "{stdout}");
    let (code, _, stderr) = toolplane_cli(&["audit", "verify", "--after", "abc", files[0]]);
    assert_eq!(code, 2, "a head hash that is not one: {stderr}");
    assert!(stderr.contains("64 lowercase hex digits"), "{stderr}");
}

/// GetInvocationRecord finds a record memory no longer holds in the log's files (a rotated
/// one included), before and after a restart; another tenant's and an unknown id are
/// NOT_FOUND, and an id that is not a UUID (here one that would match text in a line) is
/// INVALID_ARGUMENT.
#[tokio::test(flavor = "multi_thread")]
async fn an_old_record_is_found_in_the_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, mut options) = logging_to(&dir);
    options.records_in_memory = 2;
    options.records_rotate_bytes = 1000;
    let server = TestServer::start_with(options.clone()).await;
    let provider = start_structs_provider(&server).await;
    let mut made = Vec::new();
    for grams in 1..=5 {
        let answer = invoke_power(&server, grams).await.expect("succeeds");
        made.push(answer.record.expect("record"));
    }
    let oldest = &made[0];
    let found = get_record(&server, 0, &oldest.invocation_id)
        .await
        .expect("found in a rotated file");
    assert_eq!(found.record_sha256, oldest.record_sha256);
    assert_eq!(found.sequence, 1);
    let newest = made.last().expect("made");
    let found = get_record(&server, 0, &newest.invocation_id)
        .await
        .expect("in memory");
    assert_eq!(found.record_sha256, newest.record_sha256);
    for (tenant, id) in [
        (7, oldest.invocation_id.as_str()),
        (0, "00000000-0000-0000-0000-000000000000"),
    ] {
        let status = get_record(&server, tenant, id)
            .await
            .expect_err("not found");
        assert_eq!(status.code(), tonic::Code::NotFound, "{id}: {status:?}");
        assert_eq!(reason(&status), "RESOURCE_NOT_FOUND");
    }
    let status = get_record(&server, 0, "\",\"tenant_id\":0,\"x\":\"")
        .await
        .expect_err("not an id");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    provider.stop().await;
    server.stop().await;

    let restarted = TestServer::start_with(options).await;
    let found = get_record(&restarted, 0, &made[1].invocation_id)
        .await
        .expect("found after a restart");
    assert_eq!(found.record_sha256, made[1].record_sha256);
    restarted.stop().await;
}

/// One page of ListInvocationRecords for `tenant` (`correlation_id` filters when not empty).
async fn list_page(
    server: &TestServer,
    tenant: u64,
    correlation_id: &str,
    page_token: String,
) -> pb::ListInvocationRecordsResponse {
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    client
        .list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(tenant),
            correlation_id: correlation_id.to_owned(),
            page_size: 3,
            page_token,
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner()
}

/// Every page of ListInvocationRecords for `tenant`, as the records' sequences.
async fn list_all(server: &TestServer, tenant: u64, correlation_id: &str) -> Vec<Vec<u64>> {
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = list_page(server, tenant, correlation_id, token).await;
        pages.push(page.records.iter().map(|record| record.sequence).collect());
        if page.next_page_token.is_empty() {
            return pages;
        }
        token = page.next_page_token;
    }
}

/// ListInvocationRecords pages on past the records memory holds into the log's files (the
/// current one and the rotated ones), newest first, with its filters and the caller's tenant
/// only, before and after a restart.
#[tokio::test(flavor = "multi_thread")]
async fn listing_pages_on_into_the_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, mut options) = logging_to(&dir);
    options.records_in_memory = 2;
    options.records_rotate_bytes = 2000;
    let server = TestServer::start_with(options.clone()).await;
    let provider = start_structs_provider(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    for grams in 1..=7 {
        let parity = if grams % 2 == 0 { "even" } else { "odd" };
        let input = json!({"alpha_matter": grams, "generator_type": "reactor"});
        client
            .invoke_tool(pb::InvokeToolRequest {
                meta: Some(toolplane::envelope::request_meta(
                    toolplane::envelope::TenantId(0),
                    parity,
                )),
                tool_name: "structs_calculate_power".into(),
                input: toolplane::json::json_to_struct(&input),
                ..Default::default()
            })
            .await
            .expect("succeeds");
    }
    // Sequence 8: tenant 5's, refused (no such tool there).
    client
        .invoke_tool(pb::InvokeToolRequest {
            meta: meta(5),
            tool_name: "structs_calculate_power".into(),
            ..Default::default()
        })
        .await
        .expect_err("tenant 5 has no tools");
    let rotated = crate::record_file_reads::rotated_sizes(dir.path()).len();
    assert!(rotated >= 2, "the records span files: {rotated} rotated");
    let expected: Vec<Vec<u64>> = vec![vec![7, 6, 5], vec![4, 3, 2], vec![1]];
    assert_eq!(list_all(&server, 0, "").await, expected);
    assert_eq!(list_all(&server, 0, "odd").await, [vec![7, 5, 3], vec![1]]);
    assert_eq!(list_all(&server, 0, "even").await, [vec![6, 4, 2]]);
    assert_eq!(list_all(&server, 5, "").await, [vec![8]]);
    assert_eq!(list_all(&server, 6, "").await, [Vec::<u64>::new()]);
    let client = toolplane::client::ToolplaneClient::connect(
        &server.endpoint(),
        toolplane::envelope::TenantId(0),
    )
    .await
    .expect("connected");
    let filter = toolplane::client::RecordFilter::default();
    let records = client.records(&filter, 5).await.expect("listed");
    let sequences: Vec<u64> = records.iter().map(|record| record.sequence).collect();
    assert_eq!(
        sequences,
        [7, 6, 5, 4, 3],
        "the Rust client reaches into the files too"
    );
    provider.stop().await;
    server.stop().await;

    let restarted = TestServer::start_with(options).await;
    assert_eq!(list_all(&restarted, 0, "").await, expected);
    restarted.stop().await;
}
