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

/// Where the log's lines go: a file, or a stand-in in unit tests.
pub(super) trait Sink: Write {
    /// Cuts the sink back to its first `len` bytes.
    fn truncate(&mut self, len: u64) -> std::io::Result<()>;
}

impl Sink for File {
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// An open record log file, appended to one whole line at a time.
#[derive(Debug)]
pub(super) struct LogFile<S = File> {
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
        Ok(Self::new(path.to_owned(), file, whole))
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
        std::fs::rename(&self.path, to)?;
        let opened = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path);
        match opened {
            Ok(file) => {
                self.sink = file;
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

/// The last whole line of the newest file rotated from the log at `path`, and that file: where
/// a log reopened after a rotation goes on from.
pub(super) fn last_rotated_line(path: &Path) -> std::io::Result<Option<(PathBuf, Vec<u8>)>> {
    let Some(rotated) = newest_rotated(path)? else {
        return Ok(None);
    };
    let line = last_line(&rotated).map_err(|error| {
        std::io::Error::new(error.kind(), format!("{}: {error}", rotated.display()))
    })?;
    Ok(line.map(|line| (rotated, line)))
}

/// The newest file rotated from the log at `path` (the highest first sequence), if any.
fn newest_rotated(path: &Path) -> std::io::Result<Option<PathBuf>> {
    let Some(file_name) = path.file_name().and_then(|name| name.to_str()) else {
        return Ok(None);
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let mut newest: Option<String> = None;
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_rotated = name
            .strip_prefix(file_name)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|digits| {
                digits.len() == SEQUENCE_DIGITS && digits.bytes().all(|b| b.is_ascii_digit())
            });
        if is_rotated && newest.as_deref().is_none_or(|newest| name > newest) {
            newest = Some(name.to_owned());
        }
    }
    Ok(newest.map(|name| dir.join(name)))
}

/// How much of a rotated file's end is read to find its last line; a longer line is found by
/// reading the whole file.
const TAIL_WINDOW: u64 = 64 * 1024;

/// The last whole line of the file at `path` (with its newline), if it has one. Only the end of
/// the file is read, so that a restart does not read a whole rotated file for one line.
fn last_line(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut start = len.saturating_sub(TAIL_WINDOW);
    loop {
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        // Whole lines only: what follows the last newline is a torn line.
        let Some(end) = tail.iter().rposition(|&b| b == b'\n') else {
            if start == 0 {
                return Ok(None);
            }
            start = 0;
            continue;
        };
        match tail[..end].iter().rposition(|&b| b == b'\n') {
            Some(before) => return Ok(Some(tail[before + 1..=end].to_vec())),
            // The window began inside the line: it may be longer than the window.
            None if start > 0 => start = 0,
            None => return Ok(Some(tail[..=end].to_vec())),
        }
    }
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
    fn the_last_whole_line_is_found_from_the_end_of_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        let long = "x".repeat(TAIL_WINDOW as usize + 10);
        let cases: [(String, Option<String>); 6] = [
            (String::new(), None),
            ("torn".into(), None),
            ("a\nb\n".into(), Some("b\n".into())),
            ("a\nb\ntorn".into(), Some("b\n".into())),
            (format!("{long}\n"), Some(format!("{long}\n"))),
            (format!("a\n{long}\n"), Some(format!("{long}\n"))),
        ];
        for (text, last) in cases {
            std::fs::write(&path, &text).expect("write");
            let found = last_line(&path).expect("read");
            assert_eq!(
                found.map(|line| String::from_utf8(line).expect("utf-8")),
                last,
                "{:?}",
                &text[..text.len().min(20)]
            );
        }
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
