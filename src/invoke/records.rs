//! Invocation records (the seed 001 proof bundle) and their tamper-evident log; checking a log
//! is [`super::audit`]'s job.
//!
//! Each record is one line of canonical JSON carrying `record_sha256`, the sha256 of its own
//! canonical JSON without that field, and `prev_record_sha256`, the `record_sha256` of the
//! record before it (64 zeros for the first). An edited line no longer matches its own hash; a
//! removed or reordered line breaks the link of the line after it; [`verify_file`](super::audit::verify_file) names the
//! first bad line. A removed *last* line leaves no trace in the chain itself: compare the head
//! hash `verify` prints with one kept elsewhere to catch that.
//!
//! Records go to a JSON-lines file when a path is configured, and always to a bounded ring in
//! memory that serves listing (`record_ring`, indexed by tenant and id). A new process opening
//! an existing file continues its chain and loads the latest records back for listing, from
//! the rotated files too when needed.
//! A file past its size is rotated (see [`RecordLog::open`]); the chain runs on across files.
//! The file is flushed to the disk by a thread of its own (`record_sync`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::audit::ChainCheck;
use super::record_canonical::rfc3339;
pub use super::record_canonical::{content_sha256, record_line};
pub(super) use super::record_file::parse_line;
use super::record_file::{LogFile, last_lines, rotated_files, rotated_path};
pub use super::record_filter::RecordFilter;
use super::record_index::{CurrentHoldings, FileIndexes, Wanted};
use super::record_lookup::{CurrentFile, HeldPage, continue_below};
use super::record_readers::{FileRead, FileReaders};
use super::record_replay::Replay;
use super::record_ring::RecordRing;
use super::record_stats::InvocationStats;
pub use super::record_status::InvocationStatus;
use super::record_sync::RecordSync;
use crate::envelope::TenantId;

/// The previous-record hash of the first record.
pub const GENESIS_SHA256: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// The default number of records kept in memory for listing.
pub const DEFAULT_RING_CAPACITY: usize = 10_000;
/// The default size at which the log file is rotated (256 MiB). A restart reads the current
/// file back whole, so this also bounds that.
pub const DEFAULT_ROTATE_BYTES: u64 = 256 * 1024 * 1024;

/// One invocation, as written to the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationRecord {
    /// Position in the log, from 1.
    pub sequence: u64,
    /// The record's id (UUID v4).
    pub invocation_id: String,
    /// The caller's tenant.
    pub tenant_id: u64,
    /// The caller's correlation id.
    pub correlation_id: String,
    /// The tool asked for.
    pub tool_name: String,
    /// The service that offered it; empty when unresolved.
    pub service_name: String,
    /// The tool's definition hash; empty when unresolved.
    pub definition_sha256: String,
    /// sha256 of the canonical JSON of the input.
    pub input_sha256: String,
    /// sha256 of the canonical JSON of the output; empty when none.
    pub output_sha256: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time.
    pub finished_at: String,
    /// Duration in microseconds.
    pub duration_us: u64,
    /// How many times the provider was called.
    pub attempts: u32,
    /// How it ended.
    pub status: InvocationStatus,
    /// The ErrorInfo reason of a failure; empty on success.
    pub error_reason: String,
    /// The `record_sha256` of the previous record.
    pub prev_record_sha256: String,
    /// sha256 of this record's canonical JSON without this field.
    pub record_sha256: String,
    /// The W3C trace id of the caller's `traceparent`; empty without one, and then not in the
    /// line at all, as in lines written before the field existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub trace_id: String,
}

/// A record before the log gives it its sequence and chain hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDraft {
    /// The record's id.
    pub invocation_id: String,
    /// The caller's tenant.
    pub tenant: TenantId,
    /// The caller's correlation id.
    pub correlation_id: String,
    /// The tool asked for.
    pub tool_name: String,
    /// The service that offered it.
    pub service_name: String,
    /// The tool's definition hash.
    pub definition_sha256: String,
    /// sha256 of the input.
    pub input_sha256: String,
    /// sha256 of the output.
    pub output_sha256: String,
    /// When it started.
    pub started_at: std::time::SystemTime,
    /// When it ended.
    pub finished_at: std::time::SystemTime,
    /// How many provider calls.
    pub attempts: u32,
    /// How it ended.
    pub status: InvocationStatus,
    /// The failure reason.
    pub error_reason: String,
    /// The W3C trace id of the caller's trace context; empty without one.
    pub trace_id: String,
}

/// The record log cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Reading or writing the file failed.
    #[error("invocation record log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct LogState {
    ring: RecordRing,
    file: Option<LogFile>,
    /// The file is rotated before a line would take it past this many bytes; 0 never.
    rotate_bytes: u64,
    /// The sequence of the file's first record (of the next one, while it is empty).
    file_first_sequence: u64,
    /// What the file holds, for reads of it to skip it (`record_index`).
    holdings: CurrentHoldings,
    last_sha256: String,
    next_sequence: u64,
    /// The invocations appended since the log was opened.
    stats: InvocationStats,
}

/// The append-only, hash-chained log of invocation records.
#[derive(Debug)]
pub struct RecordLog {
    state: Mutex<LogState>,
    /// Who may read the files now (`record_lookup`): a few at once, one per tenant.
    file_readers: FileReaders,
    /// What the rotated files hold (`record_index`).
    pub(super) file_indexes: FileIndexes,
    /// The bytes of the files read by lookups and listings.
    pub(super) file_bytes_read: AtomicU64,
    /// Flushes the file to the disk, when there is one.
    sync: Option<RecordSync>,
}

impl RecordLog {
    /// A log kept only in memory, holding the latest `capacity` records.
    pub fn in_memory(capacity: usize) -> Self {
        Self {
            state: Mutex::new(LogState {
                ring: RecordRing::new(capacity),
                file: None,
                rotate_bytes: 0,
                file_first_sequence: 1,
                holdings: CurrentHoldings::default(),
                last_sha256: GENESIS_SHA256.to_owned(),
                next_sequence: 1,
                stats: InvocationStats::default(),
            }),
            file_readers: FileReaders::default(),
            file_indexes: FileIndexes::default(),
            file_bytes_read: AtomicU64::new(0),
            sync: None,
        }
    }

    /// Opens (or creates) a JSON-lines log and continues its chain. The latest `capacity`
    /// records are loaded for listing: the file's, then, while there is room, the latest of the
    /// files rotated from it (read from their ends, newest file first). A torn last line (a write cut short by a
    /// crash) is removed. A chain that does not verify is logged as a warning and continued
    /// from its last line: `toolplane audit verify` still reports the break.
    ///
    /// With `rotate_bytes` above 0, the file is moved to `PATH.<first sequence, 20 digits>`
    /// before a record would take it past that size, and the chain goes on in a new file at
    /// `PATH`; a log opened after a rotation goes on from the newest rotated file's last record.
    pub fn open(path: &Path, capacity: usize, rotate_bytes: u64) -> Result<Self, RecordError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| RecordError::Io { path, source }
        };
        let mut log = Self::in_memory(capacity);
        let mut chain = ChainCheck::default();
        let rotated = rotated_files(path).map_err(io(path))?;
        if let Some(newest) = rotated.last()
            && let Some(line) = last_lines(newest, 1).map_err(io(newest))?.pop()
        {
            match parse_line(&line) {
                Ok((_, record)) => {
                    chain = ChainCheck::after(&record);
                    let state = log.state_mut();
                    state.last_sha256.clone_from(&record.record_sha256);
                    state.next_sequence = record.sequence + 1;
                }
                Err(problem) => {
                    tracing::warn!(path = %newest.display(), %problem, "the newest rotated invocation record log does not end in a record; the chain starts again");
                }
            }
        }
        // Each whole line is read once: through the chain's check, into what the file holds,
        // and the latest into the ring.
        let state = log.state_mut();
        state.rotate_bytes = rotate_bytes;
        state.file_first_sequence = state.next_sequence;
        let room = state.ring.room();
        let holdings = CurrentHoldings::for_file(rotate_bytes);
        let keys = log.file_indexes.keys().clone();
        let mut replay = Replay::new(keys, chain, holdings, room);
        let file = LogFile::open(path, |bytes| replay.line(bytes)).map_err(io(path))?;
        let replayed = replay.finish();
        let state = log.state_mut();
        state.holdings = replayed.holdings;
        if let Some(first) = replayed.first_sequence {
            state.file_first_sequence = first;
        }
        if let Some(last) = replayed.latest.back() {
            state.last_sha256.clone_from(&last.record_sha256);
            state.next_sequence = last.sequence + 1;
        }
        for record in replayed.latest {
            state.ring.push_newest(record);
        }
        if let Some(problem) = replayed.broken {
            tracing::warn!(path = %path.display(), %problem, "existing invocation record log does not verify; continuing its chain from the last line");
        }
        let written = log.state_mut().next_sequence - 1;
        log.sync = Some(RecordSync::start(file.shared(), path, written).map_err(io(path))?);
        let state = log.state_mut();
        state.file = Some(file);
        fill_ring_from_rotated(state, &rotated);
        Ok(log)
    }

    /// The state of a log not shared yet (being opened): no lock to take.
    fn state_mut(&mut self) -> &mut LogState {
        self.state
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        // Every change to the state happens after the file write succeeded, so a panic
        // elsewhere leaves nothing half-changed.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends a record: gives it the next sequence and the previous line's hash, writes it to
    /// the file (when there is one), then keeps it for listing. Only the chaining, the hash,
    /// the write and the ring update happen under the log's lock; the record is built before
    /// it, and a record pushed out of the ring is dropped after it.
    pub fn append(&self, draft: RecordDraft) -> Result<Arc<InvocationRecord>, RecordError> {
        let duration = draft
            .finished_at
            .duration_since(draft.started_at)
            .unwrap_or_default();
        let mut record = InvocationRecord {
            sequence: 0,
            invocation_id: draft.invocation_id,
            tenant_id: draft.tenant.0,
            correlation_id: draft.correlation_id,
            tool_name: draft.tool_name,
            service_name: draft.service_name,
            definition_sha256: draft.definition_sha256,
            input_sha256: draft.input_sha256,
            output_sha256: draft.output_sha256,
            started_at: rfc3339(draft.started_at),
            finished_at: rfc3339(draft.finished_at),
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            attempts: draft.attempts,
            status: draft.status,
            error_reason: draft.error_reason,
            prev_record_sha256: String::new(),
            record_sha256: String::new(),
            trace_id: draft.trace_id,
        };
        // Noted under the key of what the file holds (only a log with a file has one).
        let id_key =
            (self.sync.is_some()).then(|| self.file_indexes.keys().id_key(&record.invocation_id));
        let mut guard = self.lock();
        let state = &mut *guard;
        record.sequence = state.next_sequence;
        record.prev_record_sha256.clone_from(&state.last_sha256);
        record.record_sha256 = content_sha256(&record);
        if let Some(file) = state.file.as_mut() {
            let mut line = record_line(&record);
            line.push('\n');
            let size = file.len() + line.len() as u64;
            if state.rotate_bytes > 0 && file.len() > 0 && size > state.rotate_bytes {
                let to = rotated_path(file.path(), state.file_first_sequence);
                match file.rotate(&to) {
                    Ok(()) => {
                        self.file_indexes.rotated(&to, state.holdings.rotated());
                        if let Some(sync) = &self.sync {
                            sync.switch(file.shared());
                        }
                        tracing::info!(to = %to.display(), "invocation record log rotated");
                    }
                    // The record still goes to the current file; rotation is tried again on
                    // the next one.
                    Err(error) => {
                        tracing::warn!(to = %to.display(), %error, "cannot rotate the invocation record log")
                    }
                }
            }
            if file.len() == 0 {
                state.file_first_sequence = record.sequence;
            }
            let offset = file.len();
            if let Err(source) = file.append_line(line.as_bytes()) {
                state.stats.write_failures += 1;
                return Err(RecordError::Io {
                    path: file.path().to_owned(),
                    source,
                });
            }
            if let Some(sync) = &self.sync {
                sync.written(record.sequence);
            }
            if let Some(id_key) = id_key {
                state.holdings.note(id_key, record.tenant_id);
                state.holdings.place(record.sequence, offset);
            }
        }
        state.stats.observe(record.status, record.duration_us);
        state.last_sha256.clone_from(&record.record_sha256);
        state.next_sequence += 1;
        let record = Arc::new(record);
        let evicted = state.ring.push_newest(Arc::clone(&record));
        drop(guard);
        drop(evicted);
        Ok(record)
    }

    /// Up to `limit` records of `tenant` passing `filter`, newest first, older than
    /// `before_sequence` when given.
    pub fn list(
        &self,
        tenant: TenantId,
        filter: &RecordFilter,
        before_sequence: Option<u64>,
        limit: usize,
    ) -> Vec<Arc<InvocationRecord>> {
        self.list_held(tenant, filter, before_sequence, limit)
            .records
    }

    /// As [`Self::list`], and where the listing goes on in the files once memory's records are
    /// listed, both read at one moment: records written meanwhile push the oldest out of
    /// memory, and the files must go on below the oldest this page could have held, or they
    /// would list again what it did.
    pub fn list_held(
        &self,
        tenant: TenantId,
        filter: &RecordFilter,
        before_sequence: Option<u64>,
        limit: usize,
    ) -> HeldPage {
        let state = self.lock();
        let records = state.ring.page(tenant, filter, before_sequence, limit);
        let oldest_held = state.ring.oldest().map(|record| record.sequence);
        let files_continue_below =
            (state.file.as_ref()).and_then(|_| continue_below(oldest_held, before_sequence));
        HeldPage {
            records,
            files_continue_below,
        }
    }

    /// The invocations appended since the log was opened (records read back from an existing
    /// file are not counted).
    pub fn stats(&self) -> InvocationStats {
        let mut stats = self.lock().stats.clone();
        stats.sync_failures = self.sync.as_ref().map_or(0, RecordSync::failures);
        stats.file_bytes_read = self.file_bytes_read.load(Ordering::Relaxed);
        stats
    }

    /// The current file, opened for reading under the log's lock, so that the file opened is
    /// the one whose first sequence, and whether it holds what is `wanted`, are answered with
    /// it: a rotation after this renames the file opened, which is read all the same. `None`
    /// when the log has no file.
    pub(super) fn open_current_file(
        &self,
        wanted: Wanted,
    ) -> Result<Option<(CurrentFile, File)>, RecordError> {
        let state = self.lock();
        let Some(file) = state.file.as_ref() else {
            return Ok(None);
        };
        let opened = File::open(file.path()).map_err(|source| RecordError::Io {
            path: file.path().to_owned(),
            source,
        })?;
        let current = CurrentFile {
            path: file.path().to_owned(),
            first_sequence: state.file_first_sequence,
            may_hold: state.holdings.may_hold(wanted),
            checkpoints: state.holdings.checkpoints(),
        };
        Ok(Some((current, opened)))
    }

    /// Waits for `tenant`'s turn to read the files ([`FileReaders::start`]); `None` when the
    /// work was given up first.
    pub(super) fn file_read(&self, tenant: TenantId) -> Option<FileRead<'_>> {
        self.file_readers.start(tenant)
    }

    /// One record of `tenant` still held in memory.
    pub fn get(&self, tenant: TenantId, invocation_id: &str) -> Option<Arc<InvocationRecord>> {
        self.lock().ring.get(tenant, invocation_id)
    }
}

/// Fills the room the current file left in the ring with the latest records of the rotated
/// files, newest file first, so that a restart lists the latest records whichever file holds
/// them. Only the ends of the files are read. A record is kept only when it is older than
/// every record already held, so the ring stays in sequence order; a file that cannot be read
/// is skipped with a warning (listing is all it serves).
fn fill_ring_from_rotated(state: &mut LogState, rotated: &[PathBuf]) {
    for file in rotated.iter().rev() {
        let room = state.ring.room();
        if room == 0 {
            break;
        }
        let lines = match last_lines(file, room) {
            Ok(lines) => lines,
            Err(error) => {
                tracing::warn!(path = %file.display(), %error, "cannot read a rotated invocation record log; its records are not listed");
                continue;
            }
        };
        let mut unread = 0;
        for line in lines.iter().rev() {
            let Ok((_, record)) = parse_line(line) else {
                unread += 1;
                continue;
            };
            let older = (state.ring.oldest()).map_or(state.next_sequence, |first| first.sequence);
            if record.sequence < older {
                state.ring.push_oldest(Arc::new(record));
            } else {
                unread += 1;
            }
        }
        if unread > 0 {
            tracing::warn!(path = %file.display(), lines = unread, "lines of a rotated invocation record log that are not records in chain order are not listed");
        }
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
pub(super) mod tests;

#[cfg(test)]
#[path = "records_concurrency_tests.rs"]
mod concurrency_tests;
