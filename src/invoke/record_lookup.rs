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
//! What the current file holds is noted as it is written, and a rotated file is indexed as
//! it is rotated, or, when this process did not rotate it, as a read reads it whole
//! (`record_index`): reads skip the files that hold no record of the
//! id, or of the tenant, they look for; and a page reads a file whose lines' places are known
//! (`record_checkpoints`) backwards from where it starts, not from the file's start.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use same_file::Handle;

use super::record_checkpoints::{Checkpoints, SequenceReader};
use super::record_file::{rotated_files, rotated_first_sequence, rotated_path};
use super::record_filter::RecordFilter;
use super::record_index::Wanted;
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
        let wanted = Wanted::Id(self.file_indexes.keys().id_key(invocation_id));
        let Some(current) = self.open_current_file(wanted)? else {
            return Ok(None);
        };
        let id = serde_json::to_string(invocation_id).expect("a string always serializes");
        let needle = format!("\"invocation_id\":{id}");
        let finder = memchr::memmem::Finder::new(needle.as_bytes());
        for file in files_newest_first(current)? {
            let Some(reading) = self.may_hold(&file, wanted) else {
                continue;
            };
            let mut found = None;
            self.read_lines(file, reading.indexed(), &[(0, None)], |line| {
                let Some(line) = line else {
                    return false;
                };
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
            })?;
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
    /// One call reads files newest first (whole, or backwards from `below` a stretch at a
    /// time where their checkpoints are known), and no further file once it has read
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
        let of_tenant = Wanted::Tenant(tenant.0);
        let Some(current) = self.open_current_file(of_tenant)? else {
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
            let Some(reading) = self.may_hold(&file, of_tenant) else {
                below = below.min(first_sequence);
                continue;
            };
            if bytes_read >= byte_budget {
                page.resume_below = Some(below);
                break;
            }
            // Lines run in sequence order: the newest `wanted` matches below `below` are the
            // last ones seen before the first line at or past it. The file is read from its
            // start, or, where its checkpoints say, a stretch at a time backwards from there.
            let stretches = (reading.checkpoints.as_ref())
                .and_then(|checkpoints| checkpoints.stretches_below(below))
                .unwrap_or_else(|| vec![(0, None)]);
            let mut wanted = wanted;
            let mut newest = VecDeque::with_capacity(wanted);
            bytes_read += self.read_lines(file, reading.indexed(), &stretches, |line| {
                let Some(line) = line else {
                    // A stretch read: its newest matches go on the page, older ones' after.
                    page.records.extend(newest.drain(..).rev());
                    wanted = limit - page.records.len();
                    return wanted > 0 && !is_given_up();
                };
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
            })?;
            // What is older than this file is in the files after it.
            below = below.min(first_sequence);
        }
        Ok(page)
    }

    /// `None` when `file` holds nothing `wanted`, as the current file's holdings or a rotated
    /// file's kept index say; else how to read it.
    fn may_hold(&self, file: &FileToRead, wanted: Wanted) -> Option<Reading> {
        if let Some((may_hold, checkpoints)) = &file.current {
            return may_hold.then(|| Reading {
                checkpoints: Some(checkpoints.clone()),
            });
        }
        match self.file_indexes.of(&file.path) {
            Some(index) => index.may_hold(wanted).then(|| Reading {
                checkpoints: Some(index.checkpoints().clone()),
            }),
            None => Some(Reading { checkpoints: None }),
        }
    }

    /// Reads the `stretches` of `file` (offsets from and to, `None` to its end) in turn, as
    /// [`each_line`] does, calling `each` with `None` after each stretch (answering whether to
    /// read the next one), and counts the bytes read. A rotated file not `indexed` yet, read
    /// from its start, is indexed as it is read, its index kept when it was read whole.
    fn read_lines(
        &self,
        file: FileToRead,
        indexed: bool,
        stretches: &[(u64, Option<u64>)],
        mut each: impl FnMut(Option<&[u8]>) -> bool,
    ) -> Result<u64, RecordError> {
        let rotated = file.current.is_none();
        let opened = match file.opened.map_or_else(|| File::open(&file.path), Ok) {
            Ok(opened) => opened,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(io_error(&file.path)(error)),
        };
        let mut index = (rotated && !indexed && stretches == [(0, None)])
            .then(|| self.file_indexes.start(&opened))
            .flatten();
        let (mut whole, mut total) = (true, 0);
        for &(from, to) in stretches {
            let stretch = (&opened).seek(SeekFrom::Start(from)).and_then(|_| {
                let length = to.map_or(u64::MAX, |to| to.saturating_sub(from));
                each_line((&opened).take(length), |line| {
                    if let Some(index) = index.as_mut() {
                        index.line(line);
                    }
                    whole = each(Some(line));
                    whole
                })
            });
            let read = stretch.map_err(io_error(&file.path))?;
            self.file_bytes_read.fetch_add(read, Ordering::Relaxed);
            total += read;
            if !each(None) {
                break;
            }
        }
        if let (true, Some(index)) = (whole, index) {
            self.file_indexes.keep(&file.path, index);
        }
        Ok(total)
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

/// How to read one of the log's files.
struct Reading {
    /// Where its lines lie, when it is indexed already (or needs no index: the current file).
    checkpoints: Option<Checkpoints>,
}

impl Reading {
    /// Whether the file is indexed already (or needs no index).
    fn indexed(&self) -> bool {
        self.checkpoints.is_some()
    }
}

/// The log's current file, as [`RecordLog::open_current_file`] answers it.
#[derive(Debug)]
pub(super) struct CurrentFile {
    /// Where it is.
    pub(super) path: PathBuf,
    /// The sequence of its first record (of the next one while it is empty).
    pub(super) first_sequence: u64,
    /// Whether it may hold what the read opening it looks for.
    pub(super) may_hold: bool,
    /// Where its lines lie.
    pub(super) checkpoints: Checkpoints,
}

/// One of the log's files, to be read.
struct FileToRead {
    path: PathBuf,
    /// The sequence of its first record.
    first_sequence: u64,
    /// The file, when it was opened already (the current one).
    opened: Option<File>,
    /// When it is the current one: whether it may hold what is looked for, and where its
    /// lines lie.
    current: Option<(bool, Checkpoints)>,
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
        current: Some((current.may_hold, current.checkpoints)),
    }];
    files.extend(rotated.into_iter().rev().filter_map(|path| {
        let first_sequence = rotated_first_sequence(&path).unwrap_or(0);
        (!(opened_since_renamed && path == renamed)).then_some(FileToRead {
            path,
            first_sequence,
            opened: None,
            current: None,
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

/// Calls `each` with every whole line of `source` (line ending included) until it answers
/// `false`; answers how many bytes were read. A last line without its newline is being
/// written, not a record yet.
fn each_line(source: impl Read, mut each: impl FnMut(&[u8]) -> bool) -> std::io::Result<u64> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, source);
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

#[cfg(test)]
#[path = "record_lookup_tests.rs"]
mod tests;
