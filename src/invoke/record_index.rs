//! What each record file holds, kept in memory so that a read of the files
//! (`record_lookup`) skips the files that cannot hold what it looks for: a lookup of an id the
//! files do not hold read every file, gigabytes in a long history, and a listing of a tenant
//! with few records read them too, a page's byte budget at a time.
//!
//! A rotated file is never written again, so what it holds is worked out once and kept while
//! the file stays as it was then (its length, modification time and inode): for a file this
//! process rotated, from what was noted as its records were written ([`CurrentHoldings`],
//! below), made into an index as it is rotated; for one rotated before the process started,
//! when a read of the files reads it whole (a lookup of an id it does not hold, a listing
//! going past it). A file's index holds:
//! - the ids of its records, in a binary fuse filter of 16-bit fingerprints (`xorf`): about
//!   18 bits a record; it may answer "may hold" for an id the file does not hold (about one in
//!   65,000 of them: that file is read), never "does not hold" for one it holds;
//! - the tenants of its records;
//! - where its lines lie (`record_checkpoints`), for listings to read only the part of it
//!   that holds a page.
//!
//! Indexes are kept for at most [`INDEX_BYTES`] in all (about 60 million records, tens of
//! gigabytes of files), the least used dropped first; a file without one is read as before,
//! and indexed again as it is.
//!
//! The current file is written to as it is read, so it has no such index: what it holds is
//! noted exactly as each record is written to it, and as a restart reads it back
//! ([`CurrentHoldings`]: a hash set of 64-bit keys, 9-18 bytes a record, about 5 MiB for a
//! file of the default 256 MiB, for at most [`CURRENT_HOLDINGS_MAX`] records), and made into
//! the rotated file's index when it is rotated (on a thread of its own: a filter of a file's
//! 400,000 ids takes tens of milliseconds, which the append rotating it does not wait for; a
//! read of the file meanwhile waits for it rather than reading the file).
//!
//! The index is made of the same bytes the reads match, so that no read skips a file it would
//! have found something in: a lookup parses a line only where it holds
//! `"invocation_id":<the id as JSON>`, and a listing only where it holds `,"tenant_id":N,`. The
//! index holds every JSON string that follows `"invocation_id":` in a line, as written, and
//! every number that follows `"tenant_id":`, so whatever a read would match is in it (a line
//! edited by hand can only add more).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use memchr::memmem::Finder;

use super::record_checkpoints::{Checkpoints, SequenceReader};
use xorf::{BinaryFuse16, Filter};

/// The most bytes of file indexes kept at once.
pub(super) const INDEX_BYTES: u64 = 128 * 1024 * 1024;

const ID_FIELD: &[u8] = b"\"invocation_id\":";
const TENANT_FIELD: &[u8] = b"\"tenant_id\":";

/// What a read of the files looks for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wanted {
    /// A record of the id of this key ([`LineKeys::id_key`]).
    Id(u64),
    /// A record of this tenant.
    Tenant(u64),
}

/// The indexes of the rotated files, by path.
pub(super) struct FileIndexes {
    indexes: moka::sync::Cache<PathBuf, Arc<FileIndex>>,
    /// What the files this process rotated hold, until it is made into their indexes.
    rotated: Arc<Mutex<HashMap<PathBuf, RotatedHoldings>>>,
    keys: LineKeys,
}

/// What a file held as it was rotated, and the file as it was then.
type RotatedHoldings = (Stamp, CurrentHoldings);

impl Default for FileIndexes {
    fn default() -> Self {
        Self {
            indexes: moka::sync::Cache::builder()
                .max_capacity(INDEX_BYTES)
                .weigher(|_, index: &Arc<FileIndex>| {
                    u32::try_from(index.bytes()).unwrap_or(u32::MAX)
                })
                .build(),
            rotated: Arc::default(),
            keys: LineKeys {
                hasher: ahash::RandomState::new(),
                id_field: Finder::new(ID_FIELD),
                tenant_field: Finder::new(TENANT_FIELD),
            },
        }
    }
}

impl fmt::Debug for FileIndexes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileIndexes")
            .field("files", &self.indexes.entry_count())
            .field("bytes", &self.indexes.weighted_size())
            .finish()
    }
}

impl FileIndexes {
    /// The index of the rotated file at `path`, when one is kept (or being made from what it
    /// held as it was rotated) and the file is as it was when it was indexed.
    pub(super) fn of(&self, path: &Path) -> Option<Arc<FileIndex>> {
        let index = (self.indexes)
            .optionally_get_with_by_ref(path, || made_of_rotated(&self.rotated, path))?;
        let stamp = std::fs::metadata(path)
            .ok()
            .map(|metadata| Stamp::of(&metadata));
        if stamp.as_ref() == Some(&index.stamp) {
            Some(index)
        } else {
            self.indexes.invalidate(path);
            None
        }
    }

    /// How the keys of lines are read.
    pub(super) fn keys(&self) -> &LineKeys {
        &self.keys
    }

    /// Starts the index of the rotated file `file`, to be fed its lines as they are read;
    /// `None` when the file cannot be looked at.
    pub(super) fn start(&self, file: &File) -> Option<IndexBuilder> {
        Some(IndexBuilder {
            stamp: Stamp::of(&file.metadata().ok()?),
            keys: self.keys.clone(),
            ids: Vec::new(),
            tenants: Vec::new(),
            checkpoints: Checkpoints::default(),
            offset: 0,
            sequences: SequenceReader::default(),
        })
    }

    /// Makes the index of the file just rotated to `path` from what it held (`holdings`, noted
    /// as its records were written), on a thread of its own; a read of the file meanwhile
    /// waits for it. Holdings let go past their bound make none: the file is indexed as a
    /// read reads it whole.
    pub(super) fn rotated(&self, path: &Path, holdings: CurrentHoldings) {
        if holdings.overflowed {
            return;
        }
        let Ok(metadata) = std::fs::metadata(path) else {
            return;
        };
        let mut rotated = lock(&self.rotated);
        rotated.insert(path.to_owned(), (Stamp::of(&metadata), holdings));
        drop(rotated);
        let (indexes, rotated, file) = (
            self.indexes.clone(),
            Arc::clone(&self.rotated),
            path.to_owned(),
        );
        let spawned = std::thread::Builder::new()
            .name("record-index".into())
            .spawn(move || {
                indexes.optionally_get_with_by_ref(&file, || made_of_rotated(&rotated, &file));
                // A read that found the file before its holdings were handed over indexed it
                // as it read it whole: they are not needed.
                lock(&rotated).remove(&file);
            });
        if spawned.is_err() {
            // The holdings are let go rather than kept for a read that may never come (a few
            // MiB a file): the first read of the file indexes it as it reads it whole.
            lock(&self.rotated).remove(path);
        }
    }

    /// Keeps the index of the file at `path`, fed every line of it.
    pub(super) fn keep(&self, path: &Path, built: IndexBuilder) {
        if let Some(index) = built.finish() {
            self.indexes.insert(path.to_owned(), Arc::new(index));
        }
    }
}

/// The index of the file rotated to `path`, made of what it held as it was rotated, when
/// that was noted and the index is not made yet.
fn made_of_rotated(
    rotated: &Mutex<HashMap<PathBuf, RotatedHoldings>>,
    path: &Path,
) -> Option<Arc<FileIndex>> {
    let (stamp, holdings) = lock(rotated).remove(path)?;
    let ids: Vec<u64> = holdings.ids.into_iter().collect();
    let mut tenants: Vec<u64> = holdings.tenants.into_iter().collect();
    tenants.sort_unstable();
    let index = FileIndex::new(stamp, &ids, tenants, holdings.checkpoints)?;
    Some(Arc::new(index))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing that could panic runs under it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What one rotated file holds.
pub(super) struct FileIndex {
    stamp: Stamp,
    /// The keys of its ids ([`LineKeys::id_key`]); `None` when it holds none.
    ids: Option<BinaryFuse16>,
    /// Its tenants, in order.
    tenants: Box<[u64]>,
    /// Where its lines lie.
    checkpoints: Checkpoints,
}

impl FileIndex {
    /// The index of a file of the keys `ids` (without repeats) and the tenants `tenants`
    /// (sorted, without repeats); `None` when the filter cannot be made of them.
    fn new(stamp: Stamp, ids: &[u64], tenants: Vec<u64>, checkpoints: Checkpoints) -> Option<Self> {
        let ids = if ids.is_empty() {
            None
        } else {
            Some(BinaryFuse16::try_from(ids).ok()?)
        };
        Some(Self {
            stamp,
            ids,
            tenants: tenants.into_boxed_slice(),
            checkpoints,
        })
    }

    /// Whether the file may hold what is `wanted`: `false` only when it holds none (a
    /// tenant's records are known exactly, an id's may be answered `true` wrongly).
    pub(super) fn may_hold(&self, wanted: Wanted) -> bool {
        match wanted {
            Wanted::Id(key) => self.ids.as_ref().is_some_and(|ids| ids.contains(&key)),
            Wanted::Tenant(tenant) => self.tenants.binary_search(&tenant).is_ok(),
        }
    }

    /// Where its lines lie.
    pub(super) fn checkpoints(&self) -> &Checkpoints {
        &self.checkpoints
    }

    /// About how much memory it takes.
    fn bytes(&self) -> usize {
        let ids = self
            .ids
            .as_ref()
            .map_or(0, |ids| size_of_val(&*ids.fingerprints));
        size_of::<Self>() + ids + size_of_val(&*self.tenants) + self.checkpoints.bytes()
    }
}

/// A file as it was when it was indexed.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64),
}

impl Stamp {
    fn of(metadata: &Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        Self {
            len: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            inode: (metadata.dev(), metadata.ino()),
        }
    }
}

/// Reads the keys of record lines: the ids and tenants a read of the files may match.
#[derive(Clone)]
pub(super) struct LineKeys {
    /// Keys ids, with keys drawn at random for this process.
    hasher: ahash::RandomState,
    id_field: Finder<'static>,
    tenant_field: Finder<'static>,
}

impl LineKeys {
    /// The key of the id `id`, as a line holds it (written as a JSON string).
    pub(super) fn id_key(&self, id: &str) -> u64 {
        let json = serde_json::to_string(id).expect("a string always serializes");
        self.hasher.hash_one(json.as_bytes())
    }

    /// Calls `id` with the key of every JSON string following `"invocation_id":` in `line`,
    /// and `tenant` with every number following `"tenant_id":`.
    pub(super) fn each(&self, line: &[u8], mut id: impl FnMut(u64), mut tenant: impl FnMut(u64)) {
        for at in self.id_field.find_iter(line) {
            if let Some(text) = json_string(&line[at + ID_FIELD.len()..]) {
                id(self.hasher.hash_one(text));
            }
        }
        for at in self.tenant_field.find_iter(line) {
            let rest = &line[at + TENANT_FIELD.len()..];
            let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
            let number = std::str::from_utf8(&rest[..digits]).ok();
            if let Some(number) = number.and_then(|digits| digits.parse().ok()) {
                tenant(number);
            }
        }
    }
}

/// The most records of the current file its holdings note: about 18 MiB of keys at most (a
/// file of the default 256 MiB holds some 400,000 records). Past them the holdings are let go
/// and every read reads the file, until it is rotated: a log that is never rotated
/// (`records_rotate_bytes` 0) does not grow them without end.
pub(super) const CURRENT_HOLDINGS_MAX: usize = 1_000_000;

/// What the current file holds, exactly: noted as records are written to it.
#[derive(Debug)]
pub(super) struct CurrentHoldings {
    ids: HashSet<u64>,
    tenants: HashSet<u64>,
    /// Where its lines lie (kept past the bound: a few bytes a MiB of the file).
    checkpoints: Checkpoints,
    /// The most of either noted before they are let go.
    max: usize,
    /// Whether they were let go, the file holding more.
    overflowed: bool,
}

impl Default for CurrentHoldings {
    fn default() -> Self {
        Self {
            ids: HashSet::new(),
            tenants: HashSet::new(),
            checkpoints: Checkpoints::default(),
            max: CURRENT_HOLDINGS_MAX,
            overflowed: false,
        }
    }
}

/// About the bytes of a record line, for sizing the current file's holdings: lines run from
/// about 600 bytes (short names, no correlation id) up.
const RECORD_LINE_BYTES: u64 = 700;

impl CurrentHoldings {
    /// The holdings of a file rotated before it passes `rotate_bytes` (0: never rotated): the
    /// set of ids made, at the start, as large as such a file's records need, so it is not
    /// grown as the file fills. Growing it rehashes every key noted while the log's lock is
    /// held for an append: 4-8 ms at a few hundred thousand keys, against well under a
    /// millisecond for the largest insert into a set made large enough (release builds).
    pub(super) fn for_file(rotate_bytes: u64) -> Self {
        let records = (rotate_bytes / RECORD_LINE_BYTES).min(CURRENT_HOLDINGS_MAX as u64);
        Self {
            ids: HashSet::with_capacity(usize::try_from(records).unwrap_or(0)),
            ..Self::default()
        }
    }

    /// Notes a record written: the key of its id ([`LineKeys::id_key`]) and its tenant.
    pub(super) fn note(&mut self, id_key: u64, tenant: u64) {
        if !self.overflowed {
            self.ids.insert(id_key);
            self.tenants.insert(tenant);
            self.bound();
        }
    }

    /// Notes where the record line of `sequence` lies in the file.
    pub(super) fn place(&mut self, sequence: u64, offset: u64) {
        self.checkpoints.line(sequence, offset);
    }

    /// Where the file's lines lie.
    pub(super) fn checkpoints(&self) -> Checkpoints {
        self.checkpoints.clone()
    }

    /// Notes what a line of the file read back holds.
    pub(super) fn line(&mut self, keys: &LineKeys, line: &[u8]) {
        if !self.overflowed {
            let (ids, tenants) = (&mut self.ids, &mut self.tenants);
            keys.each(
                line,
                |id| _ = ids.insert(id),
                |tenant| _ = tenants.insert(tenant),
            );
            self.bound();
        }
    }

    /// Lets the holdings go once they are past their bound.
    fn bound(&mut self) {
        if self.ids.len().max(self.tenants.len()) > self.max {
            self.ids = HashSet::new();
            self.tenants = HashSet::new();
            self.overflowed = true;
        }
    }

    /// Hands over what the file held, and starts again: the file was rotated. The sets start
    /// as large as the last file's ([`Self::for_file`] says why).
    pub(super) fn rotated(&mut self) -> Self {
        let empty = Self {
            ids: HashSet::with_capacity(self.ids.capacity()),
            tenants: HashSet::with_capacity(self.tenants.len()),
            max: self.max,
            ..Self::default()
        };
        std::mem::replace(self, empty)
    }

    /// Whether the file may hold what is `wanted`: `false` only when it holds none.
    pub(super) fn may_hold(&self, wanted: Wanted) -> bool {
        self.overflowed
            || match wanted {
                Wanted::Id(key) => self.ids.contains(&key),
                Wanted::Tenant(tenant) => self.tenants.contains(&tenant),
            }
    }
}

/// An index being made from a file's lines.
pub(super) struct IndexBuilder {
    stamp: Stamp,
    keys: LineKeys,
    ids: Vec<u64>,
    tenants: Vec<u64>,
    checkpoints: Checkpoints,
    /// Where the next line starts.
    offset: u64,
    sequences: SequenceReader,
}

impl IndexBuilder {
    /// Takes in the file's next line.
    pub(super) fn line(&mut self, line: &[u8]) {
        if self.checkpoints.wants(self.offset)
            && let Some(sequence) = self.sequences.line(line)
        {
            self.checkpoints.line(sequence, self.offset);
        }
        self.offset += line.len() as u64;
        let tenants = &mut self.tenants;
        self.keys.each(
            line,
            |id| self.ids.push(id),
            |tenant| {
                if tenants.last() != Some(&tenant) {
                    tenants.push(tenant);
                }
            },
        );
    }

    /// The index of the lines taken in; `None` when the filter cannot be made of them.
    fn finish(mut self) -> Option<FileIndex> {
        self.ids.sort_unstable();
        self.ids.dedup();
        self.tenants.sort_unstable();
        self.tenants.dedup();
        FileIndex::new(self.stamp, &self.ids, self.tenants, self.checkpoints)
    }
}

/// The JSON string `text` starts with, quotes included, as written; `None` when it does not
/// start with a whole one.
fn json_string(text: &[u8]) -> Option<&[u8]> {
    if text.first() != Some(&b'"') {
        return None;
    }
    let mut at = 1;
    while at < text.len() {
        match text[at] {
            b'\\' => at += 2,
            b'"' => return Some(&text[..=at]),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
#[path = "record_index_tests.rs"]
mod tests;
