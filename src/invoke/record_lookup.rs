//! Reading records memory no longer holds from the log's files: one record by id, and pages of
//! a listing past what memory holds.
//!
//! Memory holds the latest `records_in_memory` records; the files hold every one. The files are
//! read newest first (the current file, then the rotated ones), line by line, and only lines
//! that can be what is asked for are parsed: for an id, a line holding the id's exact JSON
//! (`"invocation_id":"..."`, as every record line writes it); for a listing, a line of the
//! tenant (`,"tenant_id":N,`) whose sequence (`,"sequence":N,`) lies below the page's start.
//! (A string value holds a quote only escaped, so these cannot match inside one.) So a lookup
//! or a page costs a sequential read of the files, no more.
//! At most two file reads run at once, one per tenant (`record_readers`), so callers asking
//! for old records cannot make the server read its files many times over at once, and one
//! tenant's reads do not hold up another's. A read whose caller has stopped waiting (its
//! deadline passed, or it went: `invoke::heavy::blocking`) stops at its next line, and one
//! that waited for its turn meanwhile leaves the line: a lookup of an id the files do not hold
//! reads every file, gigabytes in a long history.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use same_file::Handle;

use super::record_file::{rotated_files, rotated_first_sequence, rotated_path};
use super::record_filter::RecordFilter;
use super::records::{InvocationRecord, RecordError, RecordLog, parse_line};
use crate::envelope::TenantId;
use crate::registry::stop_check::is_given_up;

/// The read buffer of a file being searched.
const READ_BUFFER_BYTES: usize = 256 * 1024;

impl RecordLog {
    /// One record of `tenant`: from memory, else from the log's files. Blocking (it may read
    /// the files): call it off the serving threads.
    pub fn find(
        &self,
        tenant: TenantId,
        invocation_id: &str,
    ) -> Result<Option<Arc<InvocationRecord>>, RecordError> {
        if let Some(record) = self.get(tenant, invocation_id) {
            return Ok(Some(record));
        }
        let Some(_turn) = self.file_read(tenant) else {
            return Ok(None);
        };
        let Some(current) = self.open_current_file()? else {
            return Ok(None);
        };
        let id = serde_json::to_string(invocation_id).expect("a string always serializes");
        let needle = format!("\"invocation_id\":{id}");
        let finder = memchr::memmem::Finder::new(needle.as_bytes());
        for file in files_newest_first(current)? {
            let mut found = None;
            each_line(&file.path, file.opened, |line| {
                if finder.find(line).is_none() {
                    return !is_given_up();
                }
                if let Ok((_, record)) = parse_line(line)
                    && record.invocation_id == invocation_id
                    && record.tenant_id == tenant.0
                {
                    found = Some(record);
                    return false;
                }
                true
            })
            .map_err(io_error(&file.path))?;
            if let Some(record) = found {
                return Ok(Some(Arc::new(record)));
            }
        }
        Ok(None)
    }

    /// Up to `limit` records of `tenant` matching `filter` with sequences below `below`, newest
    /// first, read from the log's files (see [`HeldPage::files_continue_below`]). Blocking: call it
    /// off the serving threads.
    ///
    /// One call reads whole files, newest first, and no further file once it has read
    /// `byte_budget` bytes ([`FILE_BYTES_PER_PAGE`] for a listing): a page of a tenant with few
    /// records in a long history stops there, short, and says where the next page goes on
    /// ([`FilePage::resume_below`]).
    pub fn list_in_files(
        &self,
        tenant: TenantId,
        filter: &RecordFilter,
        (mut below, limit): (u64, usize),
        byte_budget: u64,
    ) -> Result<FilePage, RecordError> {
        let mut page = FilePage::default();
        let Some(_turn) = self.file_read(tenant) else {
            return Ok(page);
        };
        let Some(current) = self.open_current_file()? else {
            return Ok(page);
        };
        let needle = format!(",\"tenant_id\":{},", tenant.0);
        let finder = memchr::memmem::Finder::new(needle.as_bytes());
        let sequence_of = SequenceReader::default();
        let mut bytes_read = 0;
        for file in files_newest_first(current)? {
            let first_sequence = file.first_sequence;
            let wanted = limit - page.records.len();
            if wanted == 0 {
                break;
            }
            if first_sequence >= below {
                continue;
            }
            if bytes_read >= byte_budget {
                page.resume_below = Some(below);
                break;
            }
            // Lines run in sequence order: the newest `wanted` matches below `below` are the
            // last ones seen before the first line at or past it.
            let mut newest = VecDeque::with_capacity(wanted);
            bytes_read += each_line(&file.path, file.opened, |line| {
                let Some(sequence) = sequence_of.line(line) else {
                    return true;
                };
                if sequence >= below {
                    return false;
                }
                if finder.find(line).is_some()
                    && let Ok((_, record)) = parse_line(line)
                    && record.tenant_id == tenant.0
                    && filter.matches(&record)
                {
                    if newest.len() == wanted {
                        newest.pop_front();
                    }
                    newest.push_back(record);
                }
                !is_given_up()
            })
            .map_err(io_error(&file.path))?;
            page.records.extend(newest.into_iter().rev());
            // What is older than this file is in the files after it.
            below = below.min(first_sequence);
        }
        Ok(page)
    }
}

/// Where a listing whose page starts below `before` (from the top without one) goes on in the
/// files once memory's records are listed, when memory's oldest record is `oldest_held`: below
/// it. `None` when memory holds no record, or every record below `before` that the log has.
pub(super) fn continue_below(oldest_held: Option<u64>, before: Option<u64>) -> Option<u64> {
    let below = oldest_held?.min(before.unwrap_or(u64::MAX));
    (below > 1).then_some(below)
}

/// A page of the records memory holds ([`RecordLog::list_held`]).
#[derive(Debug)]
pub struct HeldPage {
    /// The records, newest first.
    pub records: Vec<Arc<InvocationRecord>>,
    /// Where the listing goes on in the files once these are listed (below the oldest record
    /// memory held when they were read); `None` when the log has no files, or memory held
    /// every record of the listing that the log has.
    pub files_continue_below: Option<u64>,
}

/// How many bytes of record files one page of a listing reads at most before it stops at the
/// end of a file (a file is always read whole, so one page may read a file more).
pub const FILE_BYTES_PER_PAGE: u64 = 64 * 1024 * 1024;

/// Records read from the files for one page of a listing.
#[derive(Debug, Default)]
pub struct FilePage {
    /// The records, newest first.
    pub records: Vec<InvocationRecord>,
    /// Where the listing goes on when the page stopped at its byte budget with files left to
    /// read: below this sequence.
    pub resume_below: Option<u64>,
}

/// The log's current file, as [`RecordLog::open_current_file`] answers it.
#[derive(Debug)]
pub(super) struct CurrentFile {
    /// Where it is.
    pub(super) path: PathBuf,
    /// The sequence of its first record (of the next one while it is empty).
    pub(super) first_sequence: u64,
}

/// One of the log's files, to be read.
struct FileToRead {
    path: PathBuf,
    /// The sequence of its first record.
    first_sequence: u64,
    /// The file, when it was opened already (the current one).
    opened: Option<File>,
}

/// The log's files, newest first: the current file, opened (see
/// [`RecordLog::open_current_file`]), then the rotated ones. Opening the current file before
/// listing the rotated ones makes a rotation at any moment harmless: the file is read once,
/// through the handle opened, whatever it is named by the time it is read (reading it by its
/// name after listing the rotated files would miss it when it was rotated in between; it is
/// left out of the listing when it was rotated before, rather than read twice).
fn files_newest_first(
    (current, opened): (CurrentFile, File),
) -> Result<Vec<FileToRead>, RecordError> {
    let rotated = rotated_files(&current.path).map_err(io_error(&current.path))?;
    // A rotation renames the current file to this name.
    let renamed = rotated_path(&current.path, current.first_sequence);
    let opened_since_renamed = rotated.contains(&renamed) && is_same_file(&opened, &renamed);
    let mut files = vec![FileToRead {
        path: current.path,
        first_sequence: current.first_sequence,
        opened: Some(opened),
    }];
    files.extend(rotated.into_iter().rev().filter_map(|path| {
        let first_sequence = rotated_first_sequence(&path).unwrap_or(0);
        (!(opened_since_renamed && path == renamed)).then_some(FileToRead {
            path,
            first_sequence,
            opened: None,
        })
    }));
    Ok(files)
}

/// Whether `path` names the file `opened` (false when either cannot be looked at).
fn is_same_file(opened: &File, path: &Path) -> bool {
    let handles = opened.try_clone().and_then(Handle::from_file);
    handles.is_ok_and(|opened| Handle::from_path(path).is_ok_and(|named| named == opened))
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError {
    let path = path.to_owned();
    move |source| RecordError::Io { path, source }
}

/// Calls `each` with every whole line of the file at `path` (line ending included; `opened`
/// when it is open already) until it answers `false`; answers how many bytes were read. A last
/// line without its newline is being written, not a record yet; a file gone meanwhile has no
/// lines.
fn each_line(
    path: &Path,
    opened: Option<File>,
    mut each: impl FnMut(&[u8]) -> bool,
) -> std::io::Result<u64> {
    let file = match opened.map_or_else(|| File::open(path), Ok) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
    let mut line = Vec::new();
    let mut read = 0;
    loop {
        line.clear();
        let length = reader.read_until(b'\n', &mut line)?;
        read += length as u64;
        if length == 0 || line.last() != Some(&b'\n') || !each(&line) {
            return Ok(read);
        }
    }
}

/// Reads a record line's sequence without parsing the line.
struct SequenceReader {
    field: memchr::memmem::Finder<'static>,
}

impl Default for SequenceReader {
    fn default() -> Self {
        Self {
            field: memchr::memmem::Finder::new(b",\"sequence\":"),
        }
    }
}

impl SequenceReader {
    /// The sequence of a record line (`,"sequence":N,` among its canonical fields); `None` for
    /// a line without one.
    fn line(&self, line: &[u8]) -> Option<u64> {
        let at = self.field.find(line)? + self.field.needle().len();
        let rest = &line[at..];
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::records::tests::{draft, line_size};
    use super::*;

    /// The sequences of the log's files' records as a lookup reads them, when `between` runs
    /// after the lookup opened the current file and before it lists the rotated ones.
    fn read_with(log: &RecordLog, between: impl FnOnce()) -> Vec<u64> {
        let current = log.open_current_file().expect("opens").expect("a file");
        between();
        let mut read = Vec::new();
        for file in files_newest_first(current).expect("listed") {
            each_line(&file.path, file.opened, |line| {
                read.push(parse_line(line).expect("a record").1.sequence);
                true
            })
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
        let files = (log.list_in_files(TenantId(1), &filter, (below, 10), FILE_BYTES_PER_PAGE))
            .expect("read");
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

    #[test]
    fn a_line_s_sequence_is_read_without_parsing_it() {
        let reader = SequenceReader::default();
        let line = br#"{"prev_record_sha256":"00","sequence":42,"service_name":"s"}"#;
        assert_eq!(reader.line(line), Some(42));
        // A value holding the field's name holds its quotes escaped.
        let line = br#"{"correlation_id":"x\",\"sequence\":1","sequence":7}"#;
        assert_eq!(reader.line(line), Some(7));
        assert_eq!(reader.line(br#"{"sequence":42}"#), None);
        assert_eq!(reader.line(br#"{"a":1,"sequence":,}"#), None);
    }
}
