//! The record log's file: JSON lines, each written whole or not at all.
//!
//! A write cut short by a crash or a full disk leaves a last line without its newline. Left
//! there, the next record would be written onto the end of it, and both lines would be lost to
//! the chain for good. So [`LogFile::open`] removes such a torn tail (it was never a whole
//! record, and nothing after it was written), and a failed [`LogFile::append_line`] puts the
//! file back to its last whole line before anything else is written to it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
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
