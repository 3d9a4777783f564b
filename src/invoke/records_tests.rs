//! Unit tests of the record log: chaining, the canonical form, reopening, and listing.

use super::super::record_file::rotated_path;
use super::*;
use crate::invoke::FILE_BYTES_PER_PAGE;
use crate::invoke::audit::{verify_file, verify_files, verify_files_after};
use std::time::SystemTime;

/// A succeeded call of `tool` of service `svc`, for tenant 1.
pub(in crate::invoke) fn draft(tool: &str) -> RecordDraft {
    RecordDraft {
        invocation_id: uuid::Uuid::new_v4().to_string(),
        tenant: TenantId(1),
        correlation_id: "c".into(),
        tool_name: tool.into(),
        service_name: "svc".into(),
        definition_sha256: "d".repeat(64),
        input_sha256: "i".repeat(64),
        output_sha256: String::new(),
        started_at: SystemTime::now(),
        finished_at: SystemTime::now(),
        attempts: 1,
        status: InvocationStatus::Succeeded,
        error_reason: String::new(),
        trace_id: String::new(),
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write(path: &Path, lines: &[String]) {
    std::fs::write(
        path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .expect("write");
}

#[test]
fn record_lines_and_hashes_are_the_canonical_json_of_the_record() {
    let log = RecordLog::in_memory(4);
    let mut odd = draft("t\u{e9}ol.\"quoted\"/\\");
    odd.correlation_id = "line\nbreak \u{1F600} \u{7f} <&>".into();
    odd.error_reason = "\u{0}".into();
    odd.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736".into();
    let record = log.append(odd).expect("append");
    let mut value = serde_json::to_value(&*record).expect("serializes");
    assert_eq!(record_line(&record), crate::json::canonical_json(&value));
    value
        .as_object_mut()
        .expect("an object")
        .remove("record_sha256");
    assert_eq!(
        record.record_sha256,
        crate::json::canonical_sha256(&value),
        "record_sha256 is the sha256 of the canonical JSON without that field"
    );
    assert!(record_line(&record).contains("\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\""));
}

/// A record without a trace id is written as records were before the field existed (no
/// `trace_id` key), so older logs verify and hash as they did.
#[test]
fn a_record_without_a_trace_id_is_written_as_before_the_field() {
    let record = RecordLog::in_memory(1).append(draft("t")).expect("append");
    let line = record_line(&record);
    assert!(!line.contains("trace_id"), "{line}");
    let read: InvocationRecord = serde_json::from_str(&line).expect("reads back");
    assert_eq!(read, *record);
    assert_eq!(content_sha256(&read), record.record_sha256);
}

#[test]
fn chain_verifies_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 0).expect("open");
    for tool in ["a", "b", "c"] {
        log.append(draft(tool)).expect("append");
    }
    drop(log);
    let reopened = RecordLog::open(&path, 10, 0).expect("reopen");
    let fourth = reopened.append(draft("d")).expect("append");
    assert_eq!(fourth.sequence, 4);
    assert_eq!(
        reopened
            .list(TenantId(1), &RecordFilter::default(), None, 10)
            .len(),
        4
    );
    let verified = verify_file(&path).expect("chain intact");
    assert_eq!(verified.records, 4);
}

#[test]
fn deleted_reordered_and_edited_lines_are_named() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 0).expect("open");
    for tool in ["a", "b", "c", "d"] {
        log.append(draft(tool)).expect("append");
    }
    let original = lines(&path);

    let mut deleted = original.clone();
    deleted.remove(1);
    write(&path, &deleted);
    assert_eq!(verify_file(&path).expect_err("deleted").line, 2);

    let mut reordered = original.clone();
    reordered.swap(1, 2);
    write(&path, &reordered);
    assert_eq!(verify_file(&path).expect_err("reordered").line, 2);

    let mut edited = original.clone();
    edited[2] = edited[2].replace("\"tool_name\":\"c\"", "\"tool_name\":\"x\"");
    write(&path, &edited);
    assert_eq!(verify_file(&path).expect_err("edited").line, 3);

    let mut reformatted = original;
    reformatted[3] = reformatted[3].replace("\"tool_name\":\"d\"", "\"tool_name\": \"d\"");
    write(&path, &reformatted);
    assert_eq!(verify_file(&path).expect_err("edited last line").line, 4);
}

/// A log verified while a record is being written (or after a crash tore one): a last line
/// without its newline that is not a whole record is told of and not checked; the same bytes
/// with a newline, or in a file before the last, break the chain.
#[test]
fn a_record_being_written_is_not_taken_for_tampering() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 0).expect("open");
    for tool in ["a", "b"] {
        log.append(draft(tool)).expect("append");
    }
    let whole = std::fs::read(&path).expect("read");
    let intact = verify_file(&path).expect("intact");
    assert_eq!((intact.records, intact.unfinished_last_line), (2, None));
    let mut unicode = draft("c");
    unicode.correlation_id = "caf\u{e9}".into();
    let third = record_line(&log.append(unicode).expect("append"));
    // Cut at each end, and inside its "é" (two bytes).
    let e_at = third.find('\u{e9}').expect("an é") + 1;
    for cut in [1, e_at, third.len() - 1] {
        let mut torn = whole.clone();
        torn.extend_from_slice(&third.as_bytes()[..cut]);
        std::fs::write(&path, &torn).expect("write");
        let verified = verify_file(&path).expect("the whole records verify");
        assert_eq!(verified.records, 2);
        assert_eq!(verified.head_sha256, intact.head_sha256);
        assert_eq!(verified.unfinished_last_line, Some(cut as u64));

        torn.push(b'\n');
        std::fs::write(&path, &torn).expect("write");
        assert_eq!(verify_file(&path).expect_err("a line").line, 3);
        torn.pop();
        std::fs::write(&path, &torn).expect("write");
        let next = dir.path().join("records.jsonl.next");
        std::fs::write(&next, b"").expect("write");
        let (file, broken) = verify_files(&[&path, &next]).expect_err("not the last file");
        assert_eq!((file, broken.line), (path.clone(), 3));
    }
    // A whole record lacking only its newline is checked as a record.
    let mut unended = whole;
    unended.extend_from_slice(third.as_bytes());
    std::fs::write(&path, &unended).expect("write");
    let verified = verify_file(&path).expect("intact");
    assert_eq!((verified.records, verified.unfinished_last_line), (3, None));
}

#[test]
fn ring_is_bounded_and_filters_by_tenant() {
    let log = RecordLog::in_memory(2);
    for tool in ["a", "b", "c"] {
        log.append(draft(tool)).expect("append");
    }
    let listed = log.list(TenantId(1), &RecordFilter::default(), None, 10);
    assert_eq!(
        listed
            .iter()
            .map(|r| r.tool_name.as_str())
            .collect::<Vec<_>>(),
        ["c", "b"]
    );
    assert!(
        log.list(TenantId(2), &RecordFilter::default(), None, 10)
            .is_empty()
    );
}

/// A write cut short (a crash, a full disk) leaves a last line without its newline; reopening
/// removes that torn tail, so the next record starts a line of its own and the chain goes on
/// from the last whole record. A torn multi-byte character does not stop the log opening.
#[test]
fn a_torn_last_line_is_removed_when_the_log_reopens() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 0).expect("open");
    let mut unicode = draft("a");
    unicode.correlation_id = "caf\u{e9} \u{1F600}".into();
    log.append(unicode).expect("append");
    let second = log.append(draft("b")).expect("append");
    drop(log);
    let whole = std::fs::read(&path).expect("read");
    let third = record_line(&RecordLog::in_memory(1).append(draft("c")).expect("append"));
    for cut in [1, 40, third.len() - 1] {
        let mut torn = whole.clone();
        torn.extend_from_slice(&third.as_bytes()[..cut]);
        std::fs::write(&path, &torn).expect("write");
        let reopened = RecordLog::open(&path, 10, 0).expect("reopen");
        let next = reopened.append(draft("d")).expect("append");
        assert_eq!(next.sequence, 3);
        assert_eq!(next.prev_record_sha256, second.record_sha256);
        let verified = verify_file(&path).expect("chain intact");
        assert_eq!(verified.records, 3);
    }

    // The first record's line cut inside its "é" (2 bytes) and "😀" (4 bytes).
    let first_line_len = whole.iter().position(|&b| b == b'\n').expect("a line");
    let cut_in_char = (0..first_line_len)
        .filter(|&i| std::str::from_utf8(&whole[..i]).is_err())
        .collect::<Vec<_>>();
    assert!(!cut_in_char.is_empty());
    for cut in cut_in_char {
        std::fs::write(&path, &whole[..cut]).expect("write");
        let reopened = RecordLog::open(&path, 10, 0).expect("reopen");
        let first = reopened.append(draft("e")).expect("append");
        assert_eq!(first.sequence, 1);
        assert_eq!(verify_file(&path).expect("chain intact").records, 1);
    }
}

/// The size of one record line as `draft` makes them, newline included.
pub(in crate::invoke) fn line_size() -> u64 {
    let record = RecordLog::in_memory(1).append(draft("t")).expect("append");
    record_line(&record).len() as u64 + 1
}

fn sequences(path: &Path) -> Vec<u64> {
    lines(path)
        .iter()
        .map(|line| {
            serde_json::from_str::<InvocationRecord>(line)
                .expect("a record")
                .sequence
        })
        .collect()
}

#[test]
fn a_rotated_log_is_one_chain_across_its_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    // Two records fit in a file; a third would take it past the size.
    let rotate = line_size() * 5 / 2;
    let log = RecordLog::open(&path, 10, rotate).expect("open");
    for _ in 0..5 {
        log.append(draft("t")).expect("append");
    }
    let (first, second) = (rotated_path(&path, 1), rotated_path(&path, 3));
    assert_eq!(
        first.file_name().and_then(|n| n.to_str()),
        Some("records.jsonl.00000000000000000001")
    );
    assert_eq!(sequences(&first), [1, 2]);
    assert_eq!(sequences(&second), [3, 4]);
    assert_eq!(sequences(&path), [5]);
    for file in [&first, &second, &path] {
        assert!(std::fs::metadata(file).expect("exists").len() <= rotate);
    }
    let verified = verify_files(&[&first, &second, &path]).expect("one chain");
    assert_eq!(verified.records, 5);

    // Named before 3-4 were rotated away from the current file, as a server goes on writing.
    let rotated_since = verify_files(&[&first, &path]).expect("the rotated file found");
    assert_eq!(rotated_since.records, 5);
    assert_eq!(
        rotated_since.rotated_meanwhile,
        std::slice::from_ref(&second)
    );
    let archived_second = dir.path().join("elsewhere");
    std::fs::rename(&second, &archived_second).expect("move");
    let (file, broken) = verify_files(&[&first, &path]).expect_err("a file left out");
    assert_eq!((file.as_path(), broken.line), (path.as_path(), 1));
    std::fs::write(&second, b"").expect("an empty file in its place");
    let (file, broken) = verify_files(&[&first, &path]).expect_err("no records there");
    assert_eq!((file.as_path(), broken.line), (path.as_path(), 1));
    std::fs::rename(&archived_second, &second).expect("move back");
    let (file, broken) = verify_files(&[&first, &path, &second]).expect_err("out of order");
    assert_eq!(
        (file.as_path(), broken.line),
        (path.as_path(), 1),
        "only the last is current"
    );
    let (file, broken) = verify_files(&[&second, &path]).expect_err("the first file left out");
    assert_eq!(file, second, "the chain starts at the first file");
    assert!(
        broken.problem.contains("first record is sequence 3") && broken.problem.contains("--after"),
        "{broken}"
    );
    // With the first file archived away, the rest verifies from the head it verified to.
    let archived = verify_file(&first)
        .expect("the first file alone")
        .head_sha256;
    let rest = verify_files_after(&[&second, &path], Some(&archived)).expect("continues");
    assert_eq!(rest.records, 3);
    let (file, broken) =
        verify_files_after(&[&second, &path], Some(&format!("{}1", "0".repeat(63))))
            .expect_err("not the head it continues");
    assert_eq!((file, broken.line), (second.clone(), 1));

    drop(log);
    let reopened = RecordLog::open(&path, 10, rotate).expect("reopen");
    assert_eq!(reopened.append(draft("t")).expect("append").sequence, 6);
    assert_eq!(
        verify_files(&[&first, &second, &path])
            .expect("the chain goes on")
            .records,
        6
    );
}

#[test]
fn a_log_reopened_right_after_a_rotation_goes_on_from_the_rotated_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 0).expect("open");
    log.append(draft("t")).expect("append");
    let last = log.append(draft("t")).expect("append");
    drop(log);
    // As a server stopped between moving the file and writing the next record leaves it.
    let rotated = rotated_path(&path, 1);
    std::fs::rename(&path, &rotated).expect("rename");

    let reopened = RecordLog::open(&path, 10, 0).expect("reopen");
    let next = reopened.append(draft("t")).expect("append");
    assert_eq!(next.sequence, 3);
    assert_eq!(next.prev_record_sha256, last.record_sha256);
    verify_files(&[&rotated, &path]).expect("one chain");
}

#[test]
fn a_rotation_never_replaces_a_file_already_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, 1).expect("open");
    let taken = rotated_path(&path, 1);
    log.append(draft("t")).expect("append");
    std::fs::write(&taken, "someone else's\n").expect("write");
    log.append(draft("t"))
        .expect("written to the current file when the rotation cannot be made");
    assert_eq!(
        std::fs::read_to_string(&taken).expect("read"),
        "someone else's\n"
    );
    assert_eq!(sequences(&path), [1, 2]);
}

#[test]
fn a_reopened_log_lists_its_latest_records_across_rotated_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    // Two records fit in a file; a third would take it past the size.
    let rotate = line_size() * 5 / 2;
    let log = RecordLog::open(&path, 10, rotate).expect("open");
    for _ in 0..7 {
        log.append(draft("t")).expect("append");
    }
    drop(log);
    assert_eq!(sequences(&path), [7], "files 1-2, 3-4, 5-6 rotated");
    let listed = |log: &RecordLog| -> Vec<u64> {
        log.list(TenantId(1), &RecordFilter::default(), None, 100)
            .iter()
            .map(|record| record.sequence)
            .collect()
    };

    let reopened = RecordLog::open(&path, 4, rotate).expect("reopen");
    assert_eq!(
        listed(&reopened),
        [7, 6, 5, 4],
        "the latest 4, from three files"
    );
    let newest = reopened.list(TenantId(1), &RecordFilter::default(), None, 1);
    let found = reopened.get(TenantId(1), &newest[0].invocation_id);
    assert_eq!(found.map(|record| record.sequence), Some(7));
    drop(reopened);

    let all = RecordLog::open(&path, 100, rotate).expect("reopen");
    assert_eq!(listed(&all), [7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(all.append(draft("t")).expect("append").sequence, 8);
    assert_eq!(listed(&all).len(), 8);
    drop(all);

    // A rotated file that is not the log's (a line out of chain order) adds nothing wrong.
    let second = rotated_path(&path, 3);
    let mut second_lines = lines(&second);
    second_lines.push(lines(&path)[0].clone());
    write(&second, &second_lines);
    let odd = RecordLog::open(&path, 100, rotate).expect("reopen");
    assert_eq!(listed(&odd), [8, 7, 6, 5, 4, 3, 2, 1]);
}

#[test]
fn a_status_is_named_as_the_record_writes_it() {
    for status in InvocationStatus::ALL {
        assert_eq!(
            serde_json::to_value(status).expect("serializes"),
            serde_json::Value::from(status.name())
        );
    }
}

/// Listing from the files reads whole files newest first and stops after its byte budget, its
/// page short, saying where the next goes on; followed to the end, the pages hold every record
/// of the tenant below memory, newest first, and no other tenant's.
#[test]
fn listing_the_files_stops_at_its_budget_and_goes_on_from_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    // Two records a file; memory holds two.
    let log = RecordLog::open(&path, 2, line_size() * 5 / 2).expect("open");
    for number in 0..9 {
        let tenant = if number % 3 == 2 { 2 } else { 1 };
        log.append(RecordDraft {
            tenant: TenantId(tenant),
            ..draft("t")
        })
        .expect("append");
    }
    let filter = RecordFilter::default();
    let below = (log
        .list_held(TenantId(1), &filter, None, 10)
        .files_continue_below)
        .expect("memory holds 8 and 9");
    assert_eq!(below, 8);
    let mut pages = Vec::new();
    let mut next = Some(below);
    while let Some(below) = next {
        // A budget of one byte: each page reads one file.
        let page = log
            .list_in_files(TenantId(1), &filter, (below, 10), 1)
            .expect("read");
        pages.push(page.records.iter().map(|r| r.sequence).collect::<Vec<_>>());
        next = page.resume_below;
    }
    assert_eq!(pages, [vec![7], vec![5], vec![4], vec![2, 1]]);
    let whole = log
        .list_in_files(TenantId(1), &filter, (below, 10), FILE_BYTES_PER_PAGE)
        .expect("read");
    let sequences: Vec<u64> = whole.records.iter().map(|r| r.sequence).collect();
    assert_eq!((sequences, whole.resume_below), (vec![7, 5, 4, 2, 1], None));
    let limited = log
        .list_in_files(TenantId(2), &filter, (below, 1), FILE_BYTES_PER_PAGE)
        .expect("read");
    assert_eq!(limited.records[0].sequence, 6);
    assert_eq!(limited.records.len(), 1);
}

/// A log with a file flushes what it writes to the disk (within about a second, by its own
/// thread), across a rotation too; a reopened log counts what the file held as flushed.
#[test]
fn written_records_are_flushed_to_the_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let log = RecordLog::open(&path, 10, line_size() * 5 / 2).expect("open");
    let synced = |log: &RecordLog| log.sync.as_ref().expect("a file to flush").synced();
    assert_eq!(synced(&log), 0);
    for _ in 0..3 {
        log.append(draft("t")).expect("append");
    }
    assert_eq!(sequences(&rotated_path(&path, 1)), [1, 2], "rotated");
    let waited = std::time::Instant::now();
    while synced(&log) < 3 && waited.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(synced(&log), 3);
    drop(log);
    assert_eq!(synced(&RecordLog::open(&path, 10, 0).expect("reopen")), 3);
    assert!(RecordLog::in_memory(10).sync.is_none());
}

/// A file that cannot be flushed to the disk has its failed flushes counted in the log's stats.
#[test]
fn failed_flushes_are_counted() {
    // Written to like a file, /dev/null cannot be flushed (fdatasync answers EINVAL).
    let log = RecordLog::open(Path::new("/dev/null"), 10, 0).expect("open");
    log.append(draft("t")).expect("append");
    let waited = std::time::Instant::now();
    while log.stats().sync_failures == 0 && waited.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(log.stats().sync_failures > 0);
}
