//! Unit tests of reading records from the log's files: rotations during a read, listings
//! going on from memory, reads given up, and reads of two tenants.

use super::super::records::tests::{draft, line_size};
use super::*;

/// The sequences of the log's files' records as a lookup reads them, when `between` runs
/// after the lookup opened the current file and before it lists the rotated ones.
fn read_with(log: &RecordLog, between: impl FnOnce()) -> Vec<u64> {
    let wanted = super::super::record_index::Wanted::Tenant(1);
    let current = log
        .open_current_file(wanted)
        .expect("opens")
        .expect("a file");
    between();
    let mut read = Vec::new();
    for file in files_newest_first(current).expect("listed") {
        (log.read_lines(file, true, &[(0, None)], |line| {
            if let Some(line) = line {
                read.push(parse_line(line).expect("a record").1.sequence);
            }
            true
        }))
        .expect("read");
    }
    read
}

/// A rotation while a lookup reads the files neither hides records from it nor shows it
/// any twice: the current file opened is read once, under whatever name it has by then.
#[test]
fn a_rotation_during_a_lookup_neither_hides_nor_doubles_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    // Two records a file; memory holds one.
    let log = RecordLog::open(&path, 1, line_size() * 5 / 2).expect("open");
    let append = |count| {
        for _ in 0..count {
            log.append(draft("t")).expect("append");
        }
    };
    append(3);
    assert_eq!(
        read_with(&log, || {}),
        [3, 1, 2],
        "files 1-2 rotated, 3 current"
    );
    // 4 joins the current file, 5 rotates it (3-4) and starts the next.
    let read = read_with(&log, || append(2));
    assert_eq!(read, [3, 4, 1, 2], "the file opened, then the older ones");
    assert_eq!(read_with(&log, || {}), [5, 3, 4, 1, 2]);
}

/// Records written between a page's reading of memory and its reading of the files push
/// the oldest out of memory; the files go on below what memory held when the page read
/// it, so the page lists no record twice and skips none.
#[test]
fn a_listing_goes_on_in_the_files_below_what_its_memory_page_held() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = RecordLog::open(&dir.path().join("records.jsonl"), 2, 0).expect("open");
    let append = |count| {
        for _ in 0..count {
            log.append(draft("t")).expect("append");
        }
    };
    append(4);
    let filter = RecordFilter::default();
    let held = log.list_held(TenantId(1), &filter, None, 10);
    append(2); // 5 and 6 push 3 and 4 out of memory
    let below = held
        .files_continue_below
        .expect("older records in the files");
    let files =
        (log.list_in_files(TenantId(1), &filter, (below, 10), FILE_BYTES_PER_PAGE)).expect("read");
    let listed: Vec<u64> = (held.records.iter().map(|record| record.sequence))
        .chain(files.records.iter().map(|record| record.sequence))
        .collect();
    assert_eq!(listed, [4, 3, 2, 1]);
}

/// A read whose caller has stopped waiting reads nothing more: a record the files hold is
/// not looked for, and a listing lists none. Before, a lookup read every file whatever
/// became of its caller, holding up the reads after it.
#[test]
fn a_read_given_up_reads_no_further() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Memory holds one record; the first is in the files alone.
    let log = RecordLog::open(&dir.path().join("records.jsonl"), 1, 0).expect("open");
    let first = log.append(draft("t")).expect("append");
    log.append(draft("t")).expect("append");
    let tenant = TenantId(first.tenant_id);
    let find = || log.find(tenant, &first.invocation_id).expect("read");
    let list = || {
        let below = (2, 10);
        (log.list_in_files(tenant, &RecordFilter::default(), below, FILE_BYTES_PER_PAGE))
            .expect("read")
            .records
            .len()
    };
    assert!(find().is_some());
    assert_eq!(list(), 1);
    let given_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    use crate::registry::stop_check::watching;
    assert!(watching(&given_up, find).is_none());
    assert_eq!(watching(&given_up, list), 0);
}

/// While one tenant's read of the files goes on, another tenant's finds its record; the
/// first tenant's next read waits for its first. Before, reads ran one at a time whoever
/// asked, so one tenant's read of every file held up every other tenant's.
#[test]
fn one_tenants_read_of_the_files_does_not_hold_up_anothers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = RecordLog::open(&dir.path().join("records.jsonl"), 1, 0).expect("open");
    let mut of_two = draft("t");
    of_two.tenant = TenantId(2);
    let first = log.append(of_two).expect("append");
    let of_one = log.append(draft("t")).expect("append");
    log.append(draft("t")).expect("append");
    let long_read = log.file_read(TenantId(1)).expect("not given up");
    let (two, heard_two) = std::sync::mpsc::channel();
    let (one, heard_one) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let found = log.find(TenantId(2), &first.invocation_id).expect("read");
            two.send(found.is_some()).expect("heard");
        });
        scope.spawn(|| {
            let found = log.find(TenantId(1), &of_one.invocation_id).expect("read");
            one.send(found.is_some()).expect("heard");
        });
        let wait = std::time::Duration::from_secs(10);
        let waited = "tenant 2's read waited for tenant 1's";
        assert_eq!(heard_two.recv_timeout(wait), Ok(true), "{waited}");
        let not_yet = std::time::Duration::from_millis(300);
        let twice = "tenant 1 read twice at once";
        assert!(heard_one.recv_timeout(not_yet).is_err(), "{twice}");
        drop(long_read);
        assert_eq!(heard_one.recv_timeout(wait), Ok(true));
    });
}
