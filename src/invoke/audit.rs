//! Checking an invocation record log: `toolplane audit verify FILE...`.
//!
//! Every line must be a record in canonical form that matches its own `record_sha256`, with
//! consecutive sequence numbers, each linked to the record before it by `prev_record_sha256`.
//! The first line that breaks a rule is named. The files of a rotated log are checked as one
//! chain, in the order given. A log may be checked while the server writes it: a last line
//! without its newline that is not a whole record (being written, or torn by a crash) is left
//! unchecked and told of, not taken for tampering; and when the log was rotated after its
//! files were named, so that the current file (named last) starts past the records the chain
//! expects next, the rotated file holding those (`FILE.<sequence>`) is checked first.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::record_canonical::is_canonical_line_of;
use super::record_file::rotated_path;
use super::records::{GENESIS_SHA256, InvocationRecord};

/// A log that verifies: how many records, and the hash of the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedLog {
    /// How many records.
    pub records: u64,
    /// `record_sha256` of the last record (the genesis hash for an empty log).
    pub head_sha256: String,
    /// The size in bytes of the last file's last line when it has no newline and is not a
    /// whole record, so was not checked: a record being written, or one torn by a crash (which
    /// a restarted server removes).
    pub unfinished_last_line: Option<u64>,
    /// Files not named that were checked before the last file named: the log was rotated after
    /// its files were named, moving the records the chain expected next there.
    pub rotated_meanwhile: Vec<PathBuf>,
}

/// Why a log does not verify: the first bad line (1-based) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ChainBroken {
    /// The first bad line, counted from 1.
    pub line: u64,
    /// What is wrong.
    pub problem: String,
}

/// Verifies a JSON-lines record log: every line a record in canonical form matching its own
/// hash, sequences consecutive, and each record linked to the one before it.
pub fn verify_file(path: &Path) -> Result<VerifiedLog, ChainBroken> {
    verify_files(&[path]).map_err(|(_, broken)| broken)
}

/// Verifies the files of a rotated record log as one chain, oldest first: the first file
/// starts the chain and each file's first record links to the last record of the file before.
/// A bad line is named with its file.
pub fn verify_files<P: AsRef<Path>>(paths: &[P]) -> Result<VerifiedLog, (PathBuf, ChainBroken)> {
    verify_files_after(paths, None)
}

/// As [`verify_files`], the first file continuing the chain whose last record's
/// `record_sha256` is `after`: the head hash a verification of the earlier files printed,
/// for when those files are no longer at hand (shipped to an archive, removed). `None`
/// starts from the beginning of the chain.
pub fn verify_files_after<P: AsRef<Path>>(
    paths: &[P],
    after: Option<&str>,
) -> Result<VerifiedLog, (PathBuf, ChainBroken)> {
    let mut chain = after.map_or_else(ChainCheck::default, ChainCheck::continuing);
    let mut unfinished = None;
    let mut rotated_meanwhile = Vec::new();
    for (index, path) in paths.iter().enumerate() {
        let path = path.as_ref();
        let last = index + 1 == paths.len();
        unfinished = loop {
            let checked = check_path(&mut chain, path, last);
            // The log was rotated after its files were named: the records the chain expects
            // next were moved from the current file (named last) to a rotated one. Those first.
            let rotated = match &checked {
                Err((_, broken)) if last && broken.line == 1 => chain.rotated_away(path),
                _ => None,
            };
            let Some(rotated) = rotated else {
                break checked?;
            };
            let count = chain.count;
            check_path(&mut chain, &rotated, false)?;
            if chain.count == count {
                break checked?; // an empty file: no rotation wrote it
            }
            rotated_meanwhile.push(rotated);
        };
    }
    Ok(VerifiedLog {
        unfinished_last_line: unfinished,
        rotated_meanwhile,
        ..chain.verified()
    })
}

/// Puts each line of the file at `path` through `chain` (see [`check_file`]).
fn check_path(
    chain: &mut ChainCheck,
    path: &Path,
    last: bool,
) -> Result<Option<u64>, (PathBuf, ChainBroken)> {
    let file = File::open(path).map_err(|error| {
        let problem = format!("cannot open {}: {error}", path.display());
        (path.to_owned(), ChainBroken { line: 0, problem })
    })?;
    check_file(chain, BufReader::new(file), last).map_err(|broken| (path.to_owned(), broken))
}

/// Puts each line of a file through `chain`; the first bad one is named. In the `last` file, a
/// last line without its newline that is not a whole record is left unchecked: its size is
/// answered.
pub(super) fn check_file(
    chain: &mut ChainCheck,
    mut reader: impl BufRead,
    last: bool,
) -> Result<Option<u64>, ChainBroken> {
    let mut bytes = Vec::new();
    for number in 1.. {
        let broken = |problem: String| ChainBroken {
            line: number,
            problem,
        };
        bytes.clear();
        let read = (reader.read_until(b'\n', &mut bytes))
            .map_err(|error| broken(format!("cannot read: {error}")))?;
        if read == 0 {
            break;
        }
        let whole = bytes.ends_with(b"\n");
        let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let record = std::str::from_utf8(text)
            .map_err(|error| error.to_string())
            .and_then(|line| {
                let record = serde_json::from_str::<InvocationRecord>(line);
                record
                    .map(|record| (line, record))
                    .map_err(|e| e.to_string())
            });
        match record {
            Err(_) if last && !whole => return Ok(Some(read as u64)),
            Err(error) => return Err(broken(format!("not an invocation record: {error}"))),
            Ok((line, record)) => chain.check(line, &record).map_err(broken)?,
        }
    }
    Ok(None)
}

/// The chain's rules applied one line at a time, for [`verify_files_after`] and for a log being
/// reopened (which reads each line once, for its ring and for this check).
#[derive(Debug)]
pub(crate) struct ChainCheck {
    previous: String,
    expected_sequence: Option<u64>,
    count: u64,
}

impl Default for ChainCheck {
    fn default() -> Self {
        Self {
            previous: GENESIS_SHA256.to_owned(),
            expected_sequence: None,
            count: 0,
        }
    }
}

/// What is wrong with `record`, read from `line` (without its line ending), by itself: a line
/// other than the record as the log writes it, or a hash other than its content's. It does not
/// depend on the lines around it, so lines can be checked so on several threads at once, and
/// then in order with [`ChainCheck::follows`].
pub(crate) fn content_fault(line: &str, record: &InvocationRecord) -> Option<String> {
    (!is_canonical_line_of(line, record)).then(|| EDITED.to_owned())
}

/// What [`content_fault`] says of a line that is not its record's.
pub(crate) const EDITED: &str = "the record does not match its record_sha256: the line was edited";

impl ChainCheck {
    /// A check of lines that continue the chain after `record` (the last of a rotated file).
    pub(crate) fn after(record: &InvocationRecord) -> Self {
        Self {
            previous: record.record_sha256.clone(),
            expected_sequence: Some(record.sequence + 1),
            count: 0,
        }
    }

    /// A check of lines that continue the chain after the record whose hash is `head`, with
    /// any sequence.
    pub(crate) fn continuing(head: &str) -> Self {
        Self {
            previous: head.to_owned(),
            expected_sequence: None,
            count: 0,
        }
    }

    /// Checks the next `record`, read from `line` (without its line ending): what is wrong
    /// with it, if anything.
    pub(crate) fn check(&mut self, line: &str, record: &InvocationRecord) -> Result<(), String> {
        if let Some(fault) = content_fault(line, record) {
            return Err(fault);
        }
        self.follows(record)
    }

    /// Checks that `record`, whose line [`content_fault`] found nothing wrong with, continues
    /// the chain after the records checked so far: what is wrong with it, if anything.
    pub(crate) fn follows(&mut self, record: &InvocationRecord) -> Result<(), String> {
        self.links(
            &record.prev_record_sha256,
            record.sequence,
            &record.record_sha256,
        )
    }

    /// As [`Self::follows`], for the record of `sequence` whose `prev_record_sha256` is
    /// `previous` and whose `record_sha256` is `own`.
    pub(crate) fn links(&mut self, previous: &str, sequence: u64, own: &str) -> Result<(), String> {
        if previous != self.previous
            && self.count == 0
            && self.previous == GENESIS_SHA256
            && sequence > 1
        {
            return Err(format!(
                "the first record is sequence {sequence}: the records before it are not in the files \
                 named; name the earlier files first, or, if they are gone, give the head hash \
                 their verification printed (`audit verify --after HASH`)"
            ));
        }
        if previous != self.previous {
            return Err(format!(
                "prev_record_sha256 is {previous} but the record before is {}: a record before it was removed or reordered",
                self.previous
            ));
        }
        if let Some(expected) = self.expected_sequence
            && sequence != expected
        {
            return Err(format!(
                "sequence {sequence} follows {}: a record is missing",
                expected - 1
            ));
        }
        self.expected_sequence = Some(sequence + 1);
        own.clone_into(&mut self.previous);
        self.count += 1;
        Ok(())
    }

    /// The file a rotation moved the next records the chain expects to, when the log at
    /// `path` was rotated since its files were named (a server may write it meanwhile).
    fn rotated_away(&self, path: &Path) -> Option<PathBuf> {
        let rotated = rotated_path(path, self.expected_sequence?);
        rotated.is_file().then_some(rotated)
    }

    /// What the lines checked so far come to.
    pub(crate) fn verified(self) -> VerifiedLog {
        VerifiedLog {
            records: self.count,
            head_sha256: self.previous,
            unfinished_last_line: None,
            rotated_meanwhile: Vec::new(),
        }
    }
}
