//! Unit tests of the rotated files' indexes: what a line adds to one, and the reads of the
//! record log that skip files by them.

use std::path::Path;

use super::super::record_file::rotated_files;
use super::super::records::tests::{draft, line_size};
use super::super::records::{RecordFilter, RecordLog};
use super::*;
use crate::envelope::TenantId;
use crate::invoke::FILE_BYTES_PER_PAGE;

/// The index of `lines`, as a file of them would be indexed.
fn index_of(indexes: &FileIndexes, lines: &[&[u8]]) -> FileIndex {
    let file = tempfile::tempfile().expect("a file");
    let mut builder = indexes.start(&file).expect("looked at");
    for line in lines {
        builder.line(line);
    }
    builder.finish().expect("made")
}

/// What a lookup of `id` looks for.
fn id_wanted(indexes: &FileIndexes, id: &str) -> Wanted {
    Wanted::Id(indexes.keys().id_key(id))
}

#[test]
fn a_json_string_is_read_to_its_closing_quote() {
    assert_eq!(json_string(br#""abc","x":1"#), Some(&br#""abc""#[..]));
    assert_eq!(json_string(br#""a\"b\\","#), Some(&br#""a\"b\\""#[..]));
    assert_eq!(json_string(br#""\\\"""#), Some(&br#""\\\"""#[..]));
    assert_eq!(json_string(br#""unclosed\""#), None);
    assert_eq!(json_string(br#" "spaced""#), None);
    assert_eq!(json_string(b"42,"), None);
    assert_eq!(json_string(b""), None);
}

/// Whatever a lookup would match in a line (`"invocation_id":` and the id as JSON), and a
/// listing (`,"tenant_id":N,`), the line's index holds: odd ids, several in a line, tenants
/// written oddly.
#[test]
fn an_index_holds_every_id_and_tenant_a_read_would_match() {
    let indexes = FileIndexes::default();
    let odd_ids = ["a\"b", "back\\slash", "\u{e9}t\u{e9}", "line\nbreak", ""];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut ids = Vec::new();
    for (number, id) in odd_ids.iter().enumerate() {
        let json = serde_json::to_string(id).expect("serializes");
        lines.push(
            format!(r#"{{"invocation_id":{json},"sequence":{number},"tenant_id":{number},"x":1}}"#)
                .into_bytes(),
        );
        ids.push((*id).to_owned());
    }
    let record = RecordLog::in_memory(1).append(draft("t")).expect("append");
    lines.push(crate::invoke::records::record_line(&record).into_bytes());
    ids.push(record.invocation_id.clone());
    lines.push(
        br#"{"invocation_id":"one","invocation_id":"two","tenant_id":0077,"tenant_id":9}"#.to_vec(),
    );
    ids.extend(["one".to_owned(), "two".to_owned()]);
    let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    let index = index_of(&indexes, &lines);
    for id in &ids {
        assert!(index.may_hold(id_wanted(&indexes, id)), "{id:?}");
    }
    for tenant in [0, 1, 2, 3, 4, record.tenant_id, 77, 9] {
        assert!(index.may_hold(Wanted::Tenant(tenant)), "{tenant}");
    }
    assert!(!index.may_hold(Wanted::Tenant(5)));
    // An id not written as a string, or cut short, is not one a lookup matches.
    let index = index_of(&indexes, &[br#"{"invocation_id":7,"invocation_id":"cut"#]);
    assert!(!index.may_hold(id_wanted(&indexes, "cut")));
}

/// Ids a file does not hold are almost all answered so (its filter's false positives are
/// about one in 65,000), in about 18 bits a record (more for fewer records); a file of one
/// record, or of none, is indexed too.
#[test]
fn an_index_answers_ids_it_does_not_hold_almost_always_no() {
    let indexes = FileIndexes::default();
    let lines: Vec<Vec<u8>> = (0..10_000)
        .map(|_| format!(r#"{{"invocation_id":"{}"}}"#, uuid::Uuid::new_v4()).into_bytes())
        .collect();
    let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
    let index = index_of(&indexes, &lines);
    let wrong = (0..10_000)
        .filter(|_| index.may_hold(id_wanted(&indexes, &uuid::Uuid::new_v4().to_string())))
        .count();
    assert!(wrong < 10, "{wrong} of 10,000 ids not held answered held");
    let bytes = index.bytes() - size_of::<FileIndex>();
    assert!(bytes < 30_000, "{bytes} bytes for 10,000 ids");
    let one = index_of(&indexes, &[br#"{"invocation_id":"only","tenant_id":3}"#]);
    assert!(one.may_hold(id_wanted(&indexes, "only")));
    let none = index_of(&indexes, &[b"not a record\n"]);
    assert!(!none.may_hold(id_wanted(&indexes, "only")));
    assert!(!none.may_hold(Wanted::Tenant(3)));
}

/// Holdings past their bound are let go: the file may then hold anything, until it is
/// rotated and they start again.
#[test]
fn the_current_files_holdings_past_their_bound_are_let_go() {
    let indexes = FileIndexes::default();
    let mut holdings = CurrentHoldings {
        max: 3,
        ..CurrentHoldings::default()
    };
    let key = |id: &str| indexes.keys().id_key(id);
    for (id, tenant) in [("a", 1), ("b", 2), ("c", 1)] {
        holdings.note(key(id), tenant);
    }
    assert!(holdings.may_hold(Wanted::Id(key("a"))));
    assert!(!holdings.may_hold(Wanted::Id(key("d"))));
    assert!(!holdings.may_hold(Wanted::Tenant(3)));
    holdings.line(indexes.keys(), br#"{"invocation_id":"d","tenant_id":3}"#);
    assert!(
        holdings.overflowed && holdings.ids.capacity() == 0,
        "let go"
    );
    assert!(holdings.may_hold(Wanted::Id(key("e"))));
    assert!(holdings.may_hold(Wanted::Tenant(4)));
    holdings.note(key("e"), 4);
    assert!(holdings.ids.is_empty(), "nothing noted past the bound");
    let handed_over = holdings.rotated();
    assert!(handed_over.overflowed && !holdings.overflowed && holdings.max == 3);
    holdings.note(key("f"), 5);
    assert!(holdings.may_hold(Wanted::Id(key("f"))));
    assert!(!holdings.may_hold(Wanted::Id(key("e"))));
}

/// The ids of a file of the default size are noted without growing their set (a rehash of
/// every key noted, under the log's lock), and the next file's set starts as large; a log
/// never rotated starts with none.
#[test]
fn the_current_files_holdings_start_as_large_as_its_records_need() {
    use crate::invoke::records::DEFAULT_ROTATE_BYTES;
    let mut holdings = CurrentHoldings::for_file(DEFAULT_ROTATE_BYTES);
    let capacity = holdings.ids.capacity();
    let records = DEFAULT_ROTATE_BYTES / RECORD_LINE_BYTES;
    for key in 0..records {
        holdings.note(key, key % 100);
    }
    assert_eq!(
        holdings.ids.capacity(),
        capacity,
        "grown for {records} records"
    );
    drop(holdings.rotated());
    assert_eq!(
        holdings.ids.capacity(),
        capacity,
        "the next file's as large"
    );
    assert_eq!(CurrentHoldings::for_file(0).ids.capacity(), 0);
}

/// A log of two records a file, one held in memory, with `count` records of tenant 1.
fn rotating_log(path: &Path, count: usize) -> (RecordLog, Vec<String>) {
    let log = RecordLog::open(path, 1, line_size() * 5 / 2).expect("open");
    let ids = (0..count)
        .map(|_| {
            log.append(draft("t"))
                .expect("append")
                .invocation_id
                .clone()
        })
        .collect();
    (log, ids)
}

fn bytes_read(log: &RecordLog, read: impl FnOnce()) -> u64 {
    let before = log.stats().file_bytes_read;
    read();
    log.stats().file_bytes_read - before
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).expect("a file").len()
}

fn rotated_size(path: &Path) -> u64 {
    let rotated = rotated_files(path).expect("listed");
    rotated.iter().map(|file| file_size(file)).sum()
}

/// An id not held by the log at `path`, nor (by mistake) by any kept index of its files;
/// a panic when some file has no index.
fn missing_id(log: &RecordLog, path: &Path) -> String {
    let rotated = rotated_files(path).expect("listed");
    std::iter::repeat_with(|| uuid::Uuid::new_v4().to_string())
        .take(1000)
        .find(|id| {
            let wanted = id_wanted(&log.file_indexes, id);
            (rotated.iter()).all(|file| {
                log.file_indexes
                    .of(file)
                    .is_some_and(|index| !index.may_hold(wanted))
            })
        })
        .expect("an id no index may hold: every rotated file indexed")
}

/// A lookup of an id the files do not hold reads none of them: the files this log rotated
/// were indexed as they were rotated, from what was noted as they were written (the current
/// file's holdings); after a restart, once a lookup has read the rotated files whole. Every
/// record is found all the same. Before, each such lookup read every file.
#[test]
fn a_lookup_reads_only_the_files_that_may_hold_its_id() {
    let restarted = tempfile::tempdir().expect("temp dir");
    let path = restarted.path().join("records.jsonl");
    drop(rotating_log(&path, 22));
    let (log, _) = rotating_log(&path, 0);
    let unknown = uuid::Uuid::new_v4().to_string();
    let read = bytes_read(&log, || {
        assert!(log.find(TenantId(1), &unknown).expect("read").is_none())
    });
    let once = "after a restart, the first lookup reads the rotated files";
    assert_eq!(read, rotated_size(&path), "{once}");

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let (log, ids) = rotating_log(&path, 22);
    assert_eq!(rotated_files(&path).expect("listed").len(), 10);
    let find = |id: &str| log.find(TenantId(1), id).expect("read");
    // One the indexes answer "does not hold" (they may answer "may hold" for one they do not).
    let missing = missing_id(&log, &path);
    let read = bytes_read(&log, || assert!(find(&missing).is_none()));
    assert_eq!(read, 0, "no file is read");
    for id in &ids {
        assert!(find(id).is_some(), "{id}");
    }
    assert!(find(&ids[0]).is_some_and(|record| record.sequence == 1));
    // 20 was written to the file rotated before 21: the current file forgot it then.
    let newest_rotated = rotated_files(&path).expect("listed").pop().expect("a file");
    let read = bytes_read(&log, || assert!(find(&ids[19]).is_some()));
    assert_eq!(
        read,
        file_size(&newest_rotated),
        "the current file is not read"
    );
    assert!(
        find(&ids[20]).is_some_and(|record| record.sequence == 21),
        "in the current file"
    );
}

/// Appends a record of tenant 1 with the id `id`; answers its sequence.
fn append_id(log: &RecordLog, id: &str) -> u64 {
    let mut record = draft("t");
    record.invocation_id = id.to_owned();
    log.append(record).expect("append").sequence
}

/// What the current file holds is noted as records are written to it and as a reopened log
/// reads it back, ids a JSON string escapes included, and forgotten when it is rotated.
#[test]
fn what_the_current_file_holds_is_known_across_rotations_and_restarts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let (log, _) = rotating_log(&path, 3);
    let odd_ids = [
        "quote \" and \\ and \u{e9}",
        "another \"odd\" one",
        "the last \"odd\" one",
        "after \\ it",
        "the \u{1F600} \"current\" one",
    ];
    let find = |log: &RecordLog, id: &str| {
        let found = log.find(TenantId(1), id).expect("read");
        found.map(|record| record.sequence)
    };
    assert_eq!(append_id(&log, odd_ids[0]), 4);
    log.append(draft("t")).expect("append"); // 5 rotates 3-4; in memory
    assert_eq!(find(&log, odd_ids[0]), Some(4));
    assert_eq!(append_id(&log, odd_ids[1]), 6);
    log.append(draft("t")).expect("append"); // 7 rotates 5-6
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(find(&log, &unknown), None);
    let missing = missing_id(&log, &path);
    assert_eq!(
        bytes_read(&log, || assert!(find(&log, &missing).is_none())),
        0
    );
    assert_eq!(find(&log, odd_ids[1]), Some(6));
    drop(log);
    let rotated_before_the_restart = rotated_size(&path);

    let reopened = RecordLog::open(&path, 1, line_size() * 5 / 2).expect("open");
    assert_eq!(append_id(&reopened, odd_ids[2]), 8); // current with 7
    reopened.append(draft("t")).expect("append"); // 9 rotates 7-8
    assert_eq!(append_id(&reopened, odd_ids[3]), 10);
    assert_eq!(append_id(&reopened, odd_ids[4]), 11); // rotates 9-10
    let read = bytes_read(&reopened, || assert!(find(&reopened, &unknown).is_none()));
    let no_index = "a restart keeps no index of the files rotated before it";
    assert_eq!(read, rotated_before_the_restart, "{no_index}");
    for (id, sequence) in odd_ids.iter().zip([4, 6, 8, 10]) {
        assert_eq!(find(&reopened, id), Some(sequence), "{id}");
    }
    drop(reopened);
    // A restart reads the current file's lines back: 11, in memory no longer, is found there.
    let reopened = RecordLog::open(&path, 1, 0).expect("open");
    reopened.append(draft("t")).expect("append"); // 12, pushing 11 out of memory
    let read = bytes_read(&reopened, || {
        assert_eq!(find(&reopened, odd_ids[4]), Some(11))
    });
    let up_to_it = "the current file is read up to it";
    assert!(read > 0 && read < file_size(&path), "{up_to_it}");
    let read = bytes_read(&reopened, || assert!(find(&reopened, &unknown).is_none()));
    let lacking = "not the current file, which lacks the id";
    assert_eq!(read, rotated_size(&path), "{lacking}");
    let read = bytes_read(&reopened, || assert!(find(&reopened, &unknown).is_none()));
    assert_eq!(read, 0, "the rotated files read whole were indexed");
}

/// A listing of a tenant whose records the files do not hold reads none of them once the
/// rotated ones are indexed (as they are rotated; after a restart, as a read reads them
/// whole); one whose records they hold lists them as before.
#[test]
fn a_listing_skips_the_files_without_its_tenant() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let (log, _) = rotating_log(&path, 20);
    let mut of_two = draft("t");
    of_two.tenant = TenantId(2);
    log.append(of_two).expect("append");
    log.append(draft("t")).expect("append");
    let list = |log: &RecordLog, tenant| {
        let below = (u64::MAX, 100);
        let filter = RecordFilter::default();
        (log.list_in_files(TenantId(tenant), &filter, below, FILE_BYTES_PER_PAGE))
            .expect("read")
            .records
    };
    let read = bytes_read(&log, || assert!(list(&log, 3).is_empty()));
    assert_eq!(
        read, 0,
        "no file is read: they were indexed as they were rotated"
    );
    drop(log);
    let log = RecordLog::open(&path, 1, line_size() * 5 / 2).expect("open");
    let read = bytes_read(&log, || assert!(list(&log, 3).is_empty()));
    let once = "after a restart, the rotated files are read once";
    assert_eq!(read, rotated_size(&path), "{once}");
    let read = bytes_read(&log, || assert!(list(&log, 3).is_empty()));
    assert_eq!(read, 0, "no file is read");
    let listed: Vec<u64> = list(&log, 2).iter().map(|r| r.sequence).collect();
    assert_eq!(listed, [21]);
    let listed: Vec<u64> = list(&log, 1).iter().map(|r| r.sequence).collect();
    assert_eq!(
        listed,
        (1..=22).rev().filter(|&n| n != 21).collect::<Vec<_>>()
    );
}

/// A file is indexed as it is rotated from what was noted as its records were written; not
/// when those holdings were let go past their bound (it is read, and indexed as it is read
/// whole, then). The index is dropped once the file changes.
#[test]
fn a_file_is_indexed_as_it_is_rotated_unless_its_holdings_were_let_go() {
    let dir = tempfile::tempdir().expect("temp dir");
    let indexes = FileIndexes::default();
    let key = |id: &str| indexes.keys().id_key(id);
    let (kept, let_go) = (dir.path().join("kept"), dir.path().join("let-go"));
    for (path, max) in [(&kept, 10), (&let_go, 1)] {
        std::fs::write(path, "the lines\n").expect("written");
        let mut holdings = CurrentHoldings {
            max,
            ..CurrentHoldings::default()
        };
        holdings.note(key("a"), 1);
        holdings.note(key("b"), 2);
        indexes.rotated(path, holdings.rotated());
    }
    let index = indexes.of(&kept).expect("indexed as it was rotated");
    assert!(index.may_hold(Wanted::Id(key("a"))) && index.may_hold(Wanted::Id(key("b"))));
    assert!(index.may_hold(Wanted::Tenant(1)) && index.may_hold(Wanted::Tenant(2)));
    assert!(!index.may_hold(Wanted::Tenant(3)));
    assert!(indexes.of(&let_go).is_none(), "let go: no index");
    std::fs::write(&kept, "other lines\n").expect("written");
    assert!(indexes.of(&kept).is_none(), "changed: no index");
}

/// A rotated file changed after it was indexed (edited by hand, restored from a copy) is read
/// again, and indexed anew.
#[test]
fn a_rotated_file_changed_since_it_was_indexed_is_read_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    let (log, ids) = rotating_log(&path, 5);
    let missing = uuid::Uuid::new_v4().to_string();
    assert!(log.find(TenantId(1), &missing).expect("read").is_none());
    let oldest = &rotated_files(&path).expect("listed")[0];
    let text = std::fs::read_to_string(oldest).expect("read");
    let copied = text
        .lines()
        .next()
        .expect("a line")
        .replace(&ids[0], &missing);
    std::fs::write(oldest, format!("{text}{copied}\n")).expect("write");
    let found = log.find(TenantId(1), &missing).expect("read");
    assert!(found.is_some_and(|record| record.invocation_id == missing));
}
