//! The record log's file: JSON lines, each written whole or not at all.
//!
//! A write cut short by a crash or a full disk leaves a last line without its newline. Left
//! there, the next record would be written onto the end of it, and both lines would be lost to
//! the chain for good. So [`LogFile::open`] removes such a torn tail (it was never a whole
//! record, and nothing after it was written), and a failed [`LogFile::append_line`] puts the
//! file back to its last whole line before anything else is written to it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record_sync::sync_directory_of;
use super::records::InvocationRecord;

/// Where the log's lines go: a file, or a stand-in in unit tests.
pub(super) trait Sink: Write {
    /// Cuts the sink back to its first `len` bytes.
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

/// The log's open file, shared with the thread that flushes it to the disk
/// (`record_sync`).
#[derive(Debug)]
pub(super) struct SharedFile(Arc<File>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

impl Sink for SharedFile {
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
}

/// An open record log file, appended to one whole line at a time.
#[derive(Debug)]
pub(super) struct LogFile<S = SharedFile> {
    path: PathBuf,
    sink: S,
    /// The length of the file's whole lines: where the next line starts.
    len: u64,
    /// A write failed and the file could not be cut back to `len` then.
    damaged: bool,
}

impl LogFile {
    /// Opens (or creates) the file at `path`, handing each whole line to `line` in order and
    /// removing a torn last line.
    pub(super) fn open(path: &Path, mut line: impl FnMut(&[u8])) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let mut reader = BufReader::new(&file);
        let mut buf = Vec::new();
        let mut whole = 0u64;
        loop {
            buf.clear();
            let read = reader.read_until(b'\n', &mut buf)?;
            if read == 0 || buf.last() != Some(&b'\n') {
                break;
            }
            whole += read as u64;
            line(&buf);
        }
        let torn = buf.len();
        if torn > 0 {
            tracing::warn!(
                path = %path.display(),
                bytes = torn,
                tail = %String::from_utf8_lossy(&buf),
                "the invocation record log ends in a torn line (a write cut short); removing it"
            );
            file.set_len(whole)?;
        }
        sync_directory_of(path);
        Ok(Self::new(
            path.to_owned(),
            SharedFile(Arc::new(file)),
            whole,
        ))
    }

    /// The open file, for flushing it to the disk.
    pub(super) fn shared(&self) -> Arc<File> {
        Arc::clone(&self.sink.0)
    }
}

impl LogFile {
    /// Moves the file to `to` and goes on in a new, empty file at the log's path. When the new
    /// file cannot be opened, the old one is moved back and writing goes on there.
    pub(super) fn rotate(&mut self, to: &Path) -> std::io::Result<()> {
        // A rename would replace a file already there: never lose a rotated log that way.
        if to.try_exists()? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists already", to.display()),
            ));
        }
        // The file rotated, and the directory for its new name, are flushed to the disk by
        // the log's flushing thread (`RecordSync::switch`), not here under the log's lock.
        std::fs::rename(&self.path, to)?;
        let opened = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path);
        match opened {
            Ok(file) => {
                self.sink = SharedFile(Arc::new(file));
                self.len = 0;
                self.damaged = false;
                Ok(())
            }
            Err(error) => {
                // The open handle still writes to the moved file; give it its name back.
                std::fs::rename(to, &self.path)?;
                Err(error)
            }
        }
    }
}

/// How many digits a rotated file's first sequence number is written with: every `u64`, so
/// that sorting the names sorts the files in chain order (what a shell glob does).
const SEQUENCE_DIGITS: usize = 20;

/// The name a log file at `path` is rotated to when its first record has `first_sequence`:
/// `records.jsonl` becomes `records.jsonl.00000000000000000001`.
pub(super) fn rotated_path(path: &Path, first_sequence: u64) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{first_sequence:0SEQUENCE_DIGITS$}"));
    PathBuf::from(name)
}

/// The sequence of the first record of a file rotated to `path` (as [`rotated_path`] names
/// it), read from its name.
pub(super) fn rotated_first_sequence(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let (_, digits) = name.rsplit_once('.')?;
    (digits.len() == SEQUENCE_DIGITS)
        .then(|| digits.parse().ok())
        .flatten()
}

/// A whole line of a log file (with its line ending) read as a record, and its text without
/// the line ending.
pub(super) fn parse_line(bytes: &[u8]) -> Result<(&str, InvocationRecord), String> {
    let text = line_text(bytes)?;
    let record = serde_json::from_str::<InvocationRecord>(text)
        .map_err(|error| format!("not an invocation record: {error}"))?;
    Ok((text, record))
}

/// The text of a whole line of a log file, without its line ending.
pub(super) fn line_text(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|error| format!("cannot read: {error}"))?;
    // As `BufRead::lines` ends a line, which `audit verify` reads with.
    let text = text.strip_suffix('\n').unwrap_or(text);
    Ok(text.strip_suffix('\r').unwrap_or(text))
}

/// The files rotated from the log at `path`, oldest first (by the first sequence in their
/// names, which sort in chain order).
pub(super) fn rotated_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let Some(file_name) = path.file_name().and_then(|name| name.to_str()) else {
        return Ok(Vec::new());
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut names = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_rotated = name
            .strip_prefix(file_name)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|digits| {
                digits.len() == SEQUENCE_DIGITS && digits.bytes().all(|b| b.is_ascii_digit())
            });
        if is_rotated {
            names.push(name.to_owned());
        }
    }
    names.sort_unstable();
    Ok(names.into_iter().map(|name| dir.join(name)).collect())
}

/// How much of a file is read at a time, from its end, when looking for its last lines.
const TAIL_CHUNK: u64 = 64 * 1024;

/// The last `count` whole lines of the file at `path` (each with its newline), oldest first;
/// fewer when the file has fewer. The file is read from its end, a chunk at a time, only as
/// far back as those lines reach, so that a restart does not read whole rotated files.
pub(super) fn last_lines(path: &Path, count: usize) -> std::io::Result<Vec<Vec<u8>>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut file = File::open(path)?;
    let mut start = file.metadata()?.len();
    // Newest first.
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut newlines = 0;
    // `count` lines are whole once the newline ending the line before them is read too.
    while start > 0 && newlines <= count {
        let from = start.saturating_sub(TAIL_CHUNK);
        let mut chunk = vec![0; usize::try_from(start - from).expect("a chunk fits in memory")];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk)?;
        newlines += chunk.iter().filter(|&&b| b == b'\n').count();
        chunks.push(chunk);
        start = from;
    }
    let tail: Vec<u8> = chunks.into_iter().rev().flatten().collect();
    // Whole lines only: what follows the last newline is a torn line, and what comes before
    // the first one (unless the file's start was read) ends a line that began before it.
    let Some(end) = tail.iter().rposition(|&b| b == b'\n') else {
        return Ok(Vec::new());
    };
    let mut whole = &tail[..=end];
    if start > 0 {
        let first = whole.iter().position(|&b| b == b'\n').unwrap_or(end);
        whole = &whole[first + 1..];
    }
    let lines: Vec<&[u8]> = whole.split_inclusive(|&b| b == b'\n').collect();
    let skip = lines.len().saturating_sub(count);
    Ok(lines[skip..].iter().map(|line| line.to_vec()).collect())
}

impl<S: Sink> LogFile<S> {
    fn new(path: PathBuf, sink: S, len: u64) -> Self {
        Self {
            path,
            sink,
            len,
            damaged: false,
        }
    }

    /// The file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The length of the file's whole lines.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Writes `line` (ending in a newline) whole, or leaves the file as it was and fails.
    pub(super) fn append_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.damaged {
            self.sink.truncate(self.len)?;
            self.damaged = false;
        }
        match self.sink.write_all(line).and_then(|()| self.sink.flush()) {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(error) => {
                if let Err(undo) = self.sink.truncate(self.len) {
                    tracing::error!(path = %self.path.display(), %undo, "cannot cut the invocation record log back to its last whole line; trying again before the next record");
                    self.damaged = true;
                }
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes `room` bytes, then fails every write; its truncation fails while `stuck`.
    struct FullDisk {
        bytes: Vec<u8>,
        room: usize,
        stuck: bool,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let take = buf.len().min(self.room.saturating_sub(self.bytes.len()));
            if take == 0 {
                return Err(std::io::Error::other("no space left"));
            }
            self.bytes.extend_from_slice(&buf[..take]);
            Ok(take)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink for FullDisk {
        fn truncate(&mut self, len: u64) -> std::io::Result<()> {
            if self.stuck {
                return Err(std::io::Error::other("cannot truncate"));
            }
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn the_last_whole_lines_are_found_from_the_end_of_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let long = "x".repeat(TAIL_CHUNK as usize + 10);
        let many: String = (0..20_000).map(|n| format!("{n}\n")).collect();
        let cases: [(String, usize, Vec<String>); 9] = [
            (String::new(), 1, vec![]),
            ("torn".into(), 1, vec![]),
            ("a\nb\n".into(), 1, vec!["b\n".into()]),
            ("a\nb\n".into(), 0, vec![]),
            ("a\nb\ntorn".into(), 1, vec!["b\n".into()]),
            ("a\nb\ntorn".into(), 5, vec!["a\n".into(), "b\n".into()]),
            (format!("{long}\n"), 1, vec![format!("{long}\n")]),
            (
                format!("a\n{long}\nb\n"),
                2,
                vec![format!("{long}\n"), "b\n".into()],
            ),
            // Many chunks back, and a chunk boundary inside a line.
            (
                many.clone(),
                15_000,
                many.lines().skip(5_000).map(|l| format!("{l}\n")).collect(),
            ),
        ];
        for (text, count, last) in cases {
            std::fs::write(&path, &text).expect("write");
            let found = last_lines(&path, count).expect("read");
            let found: Vec<String> = found
                .into_iter()
                .map(|line| String::from_utf8(line).expect("utf-8"))
                .collect();
            assert!(found == last, "{:?}, {count}", &text[..text.len().min(20)]);
        }
    }

    #[test]
    fn rotated_files_are_listed_in_chain_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("records.jsonl");
        for name in [
            rotated_path(&path, 12),
            rotated_path(&path, 3),
            dir.path().join("records.jsonl.7"),
            dir.path().join("other.jsonl.00000000000000000001"),
            path.clone(),
        ] {
            std::fs::write(name, "").expect("write");
        }
        assert_eq!(
            rotated_files(&path).expect("listed"),
            [rotated_path(&path, 3), rotated_path(&path, 12)]
        );
        assert!(
            rotated_files(&dir.path().join("none/records.jsonl"))
                .expect("a missing directory has none")
                .is_empty()
        );
    }

    #[test]
    fn a_line_that_does_not_fit_leaves_the_file_as_it_was() {
        let disk = FullDisk {
            bytes: Vec::new(),
            room: 10,
            stuck: false,
        };
        let mut file = LogFile::new(PathBuf::from("test"), disk, 0);
        file.append_line(b"first\n").expect("fits");
        file.append_line(b"second\n").expect_err("does not fit");
        assert_eq!(file.sink.bytes, b"first\n");
        file.sink.room = 100;
        file.append_line(b"third\n").expect("fits now");
        assert_eq!(file.sink.bytes, b"first\nthird\n");
    }

    #[test]
    fn a_file_that_cannot_be_cut_back_is_cut_before_the_next_line() {
        let disk = FullDisk {
            bytes: b"first\n".to_vec(),
            room: 10,
            stuck: true,
        };
        let mut file = LogFile::new(PathBuf::from("test"), disk, 6);
        file.append_line(b"second\n").expect_err("does not fit");
        assert_eq!(file.sink.bytes, b"first\nseco");
        file.sink.room = 100;
        file.append_line(b"third\n")
            .expect_err("still cannot cut it back");
        assert_eq!(file.sink.bytes, b"first\nseco");
        file.sink.stuck = false;
        file.append_line(b"third\n")
            .expect("cut back, then written");
        assert_eq!(file.sink.bytes, b"first\nthird\n");
    }
}
