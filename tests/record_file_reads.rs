//! Reads of the record log's files past what memory holds, as the real server does them: the
//! current file, and the rotated files (indexed as the server rotates them, or, after a
//! restart, as a read reads them whole), are skipped by lookups and listings that cannot find
//! anything in them (`toolplane_invocation_record_file_read_bytes_total` counts what is read).

use crate::common;

use common::invoke_fixture::{get_record, invoke_power, tenant_records};
use common::provider::start_structs_provider;
use common::*;
use toolplane::grpc::ServerOptions;

const READ_BYTES: &str = "toolplane_invocation_record_file_read_bytes_total";

/// The bytes of the record files one listing of tenant 7 (which has no records) reads.
async fn empty_listing_reads(server: &TestServer, url: &str) -> f64 {
    let http = http_client();
    let before = scraped(&http, url, READ_BYTES).await;
    assert!(tenant_records(server, 7).await.is_empty());
    scraped(&http, url, READ_BYTES).await - before
}

/// The bytes of the record files a lookup of an id the log does not hold reads.
async fn unknown_lookup_reads(server: &TestServer, url: &str) -> f64 {
    let http = http_client();
    let before = scraped(&http, url, READ_BYTES).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let status = get_record(server, 0, &unknown).await.expect_err("unknown");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    scraped(&http, url, READ_BYTES).await - before
}

/// A listing of a tenant without records, and a lookup of an unknown id, read no file of a
/// server that rotated them (each file was indexed as it was rotated); after a restart, the
/// first listing reads the rotated files once, and nothing the second time, and a lookup of
/// an unknown id then reads less than them. Every record is still found, and listed. Before,
/// each such read read every file.
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
    let (server, metrics) = TestServer::start_with_metrics(options.clone()).await;
    let url = format!("http://{metrics}/metrics");
    let provider = start_structs_provider(&server).await;
    let mut made = Vec::new();
    for grams in 1..=6 {
        let answer = invoke_power(&server, grams).await.expect("succeeds");
        made.push(answer.record.expect("a record"));
    }
    let rotated = rotated_sizes(dir.path());
    assert!(rotated.len() >= 3, "the records span files: {rotated:?}");
    let rotated_bytes: u64 = rotated.iter().sum();
    let indexed = "indexed as they were rotated";
    assert_eq!(empty_listing_reads(&server, &url).await, 0.0, "{indexed}");
    // A rotated file answers "may hold" for about one in 65,000 ids it does not hold (and is
    // read then): every one of them answering so is not to be expected.
    let read = unknown_lookup_reads(&server, &url).await;
    assert!(
        read < rotated_bytes as f64,
        "an unknown id read {read} bytes"
    );
    provider.stop().await;
    server.stop().await;

    let (server, metrics) = TestServer::start_with_metrics(options).await;
    let url = format!("http://{metrics}/metrics");
    let read = [
        empty_listing_reads(&server, &url).await,
        empty_listing_reads(&server, &url).await,
    ];
    let once = "after a restart, the first listing reads the rotated files";
    assert_eq!(read[0], rotated_bytes as f64, "{once}");
    assert_eq!(read[1], 0.0, "the second reads no file");
    let read = unknown_lookup_reads(&server, &url).await;
    assert!(
        read < rotated_bytes as f64,
        "an unknown id read {read} bytes"
    );

    for record in &made {
        let found = get_record(&server, 0, &record.invocation_id)
            .await
            .expect("found");
        assert_eq!(found.record_sha256, record.record_sha256);
    }
    let listed = tenant_records(&server, 0).await;
    let sequences: Vec<u64> = listed.iter().map(|record| record.sequence).collect();
    assert_eq!(sequences, [6, 5, 4, 3, 2, 1]);
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
