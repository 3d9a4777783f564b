//! Reads of the record log's files past what memory holds, as the real server does them: the
//! current file, and a rotated file read whole once, are skipped by lookups and listings that
//! cannot find anything in them (`toolplane_invocation_record_file_read_bytes_total` counts
//! what is read).

use crate::common;

use common::invoke_fixture::get_record;
use common::provider::start_structs_provider;
use common::*;
use serde_json::json;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::tool_invoke_service_client::ToolInvokeServiceClient;

const READ_BYTES: &str = "toolplane_invocation_record_file_read_bytes_total";

/// A listing of a tenant without records reads the rotated files once, and nothing the second
/// time; a lookup of an unknown id then reads less than them (files that cannot hold what is
/// asked for are skipped, the current file included). Every record is still found, and
/// listed. Before, each such read read every file.
#[tokio::test(flavor = "multi_thread")]
async fn rotated_files_read_once_are_skipped_when_they_cannot_hold_what_is_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let options = ServerOptions {
        records_path: Some(path.clone()),
        records_in_memory: 1,
        // A record line is several hundred bytes: each file holds one or two.
        records_rotate_bytes: 1000,
        ..test_options()
    };
    let (server, metrics) = TestServer::start_with_metrics(options).await;
    let url = format!("http://{metrics}/metrics");
    let http = http_client();
    let provider = start_structs_provider(&server).await;
    let mut client = ToolInvokeServiceClient::new(server.channel().await);
    let mut made = Vec::new();
    for grams in 1..=6 {
        let input = json!({"alpha_matter": grams, "generator_type": "reactor"});
        let answer = client
            .invoke_tool(pb::InvokeToolRequest {
                meta: meta(0),
                tool_name: "structs_calculate_power".into(),
                input: toolplane::json::json_to_struct(&input),
                ..Default::default()
            })
            .await
            .expect("succeeds")
            .into_inner();
        made.push(answer.record.expect("a record"));
    }
    let rotated = rotated_sizes(dir.path());
    assert!(rotated.len() >= 3, "the records span files: {rotated:?}");
    let rotated_bytes: u64 = rotated.iter().sum();
    let mut read = Vec::new();
    for _ in 0..2 {
        let before = scraped(&http, &url, READ_BYTES).await;
        let listed = client
            .list_invocation_records(pb::ListInvocationRecordsRequest {
                meta: meta(7),
                ..Default::default()
            })
            .await
            .expect("listed")
            .into_inner();
        assert!(listed.records.is_empty());
        read.push(scraped(&http, &url, READ_BYTES).await - before);
    }
    assert_eq!(
        read[0], rotated_bytes as f64,
        "the first listing reads the rotated files"
    );
    assert_eq!(read[1], 0.0, "the second reads no file");

    let before = scraped(&http, &url, READ_BYTES).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let status = get_record(&server, 0, &unknown).await.expect_err("unknown");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    let read = scraped(&http, &url, READ_BYTES).await - before;
    // A rotated file answers "may hold" for about one in 65,000 ids it does not hold (and is
    // read then): every one of them answering so is not to be expected.
    assert!(
        read < rotated_bytes as f64,
        "a lookup of an unknown id read {read} bytes"
    );

    for record in &made {
        let found = get_record(&server, 0, &record.invocation_id)
            .await
            .expect("found");
        assert_eq!(found.record_sha256, record.record_sha256);
    }
    let listed = client
        .list_invocation_records(pb::ListInvocationRecordsRequest {
            meta: meta(0),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner();
    let sequences: Vec<u64> = listed
        .records
        .iter()
        .map(|record| record.sequence)
        .collect();
    assert_eq!(sequences, [6, 5, 4, 3, 2, 1]);
    provider.stop().await;
    server.stop().await;
}

/// The sizes of the files rotated from `records.jsonl` in `dir`.
pub(crate) fn rotated_sizes(dir: &std::path::Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| entry.expect("entry"))
        .filter(|entry| (entry.file_name().to_string_lossy()).starts_with("records.jsonl."))
        .map(|entry| entry.metadata().expect("a file").len())
        .collect()
}
