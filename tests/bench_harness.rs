//! The benchmark harness's options, run in `--quick` mode: it repeats its measurements as
//! asked, and runs every connection over TLS. (The test script runs the whole quick run once.)

use crate::common;

use common::process::run_binary;

/// `toolplane-bench run --repetitions N` repeats every measurement N times, and refuses 0.
#[test]
fn bench_repeats_each_measurement_as_asked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("rows.json");
    let bench = env!("CARGO_BIN_EXE_toolplane-bench");
    let json_path = json.to_str().expect("a UTF-8 temp path");
    let args = [
        "run",
        "--quick",
        "--only",
        "4",
        "--repetitions",
        "2",
        "--json",
        json_path,
    ];
    let (code, _, stderr) = run_binary(bench, &args);
    assert_eq!(code, 0, "{stderr}");
    let rows = bench_json_rows(&json);
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(row["toolplane"].as_array().map(Vec::len), Some(2), "{row}");
    }
    let (code, _, stderr) = run_binary(bench, &["run", "--quick", "--repetitions", "0"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--repetitions"));
}

/// The rows a `toolplane-bench run --json FILE` wrote.
fn bench_json_rows(json: &std::path::Path) -> Vec<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(json).expect("the JSON file")).expect("JSON rows")
}

/// `toolplane-bench run --tls` runs every connection over TLS with certificates made for the
/// run: every invocation path (through toolplane, through the pass-through, straight to the
/// provider) answers, since a measurement with a failed call fails the run.
#[test]
fn bench_runs_every_connection_over_tls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("rows.json");
    let json_path = json.to_str().expect("a UTF-8 temp path");
    let args = [
        "run", "--quick", "--tls", "--only", "2", "--json", json_path,
    ];
    let (code, _, stderr) = run_binary(env!("CARGO_BIN_EXE_toolplane-bench"), &args);
    assert_eq!(code, 0, "{stderr}");
    let rows = bench_json_rows(&json);
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(row["scenario"], "2 invoke (TLS)", "{row}");
    }
}
