//! Flushing the record log's file to the disk: [`RecordSync`].
//!
//! Each record is written to the file before its call is answered, so a crash of the server
//! loses none; what the kernel has not yet written out is lost on a power failure. Flushing
//! (`fdatasync`) at every record would cost each call a disk round trip, so a thread of its own
//! flushes the file once every [`SYNC_INTERVAL`] while records come in (a group commit): a power
//! failure loses at most the records of the last interval. A rotated file is flushed by the
//! same thread before the file that took its place (with the directory, for its new name), so
//! a rotation waits on no disk while it holds the log; the file is flushed once more when the
//! log is closed.
//!
//! A thread, not a tokio task: `fdatasync` blocks, and the log is also opened outside the
//! server's runtime (tests, tools).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the thread flushes the file while records come in.
pub(super) const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// The thread flushing the record log's current file to the disk, stopped (after a last
/// flush) when dropped.
#[derive(Debug)]
pub(super) struct RecordSync {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    /// The file records are appended to now, and the files rotated from it not flushed since.
    files: Mutex<Files>,
    /// The log's path: its directory is flushed after a rotation renamed a file in it.
    path: PathBuf,
    /// The sequence of the last record written to the file.
    written: AtomicU64,
    /// The sequence of the last record known to be on the disk.
    synced: AtomicU64,
    /// How many flushes failed.
    failures: AtomicU64,
    /// Set when the log closes.
    stop: Mutex<bool>,
    wake: Condvar,
}

#[derive(Debug)]
struct Files {
    current: Arc<File>,
    /// Files rotated away from the log's path (each holding records before the current
    /// file's), not flushed yet.
    rotated: Vec<Arc<File>>,
}

impl Shared {
    /// Flushes the files rotated since the last flush, then the current file when records
    /// were written since the last flush.
    fn flush(&self) {
        let written = self.written.load(Ordering::Acquire);
        let (current, rotated) = {
            let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
            (
                Arc::clone(&files.current),
                std::mem::take(&mut files.rotated),
            )
        };
        if !rotated.is_empty() {
            for file in rotated {
                // Not tried again when it fails: the kernel may have dropped what it could
                // not write, and the file takes no more records.
                if let Err(error) = file.sync_data() {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%error, "cannot flush a rotated invocation record log to the disk");
                }
            }
            sync_directory_of(&self.path);
        }
        if written <= self.synced.load(Ordering::Acquire) {
            return;
        }
        match current.sync_data() {
            Ok(()) => {
                self.synced.fetch_max(written, Ordering::AcqRel);
            }
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "cannot flush the invocation record log to the disk; trying again in a second");
            }
        }
    }
}

impl RecordSync {
    /// Starts flushing `file`, the log at `path`, to which records up to `written` (a
    /// sequence) were written (and are taken as on the disk already).
    pub(super) fn start(file: Arc<File>, path: &Path, written: u64) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            files: Mutex::new(Files {
                current: file,
                rotated: Vec::new(),
            }),
            path: path.to_owned(),
            written: AtomicU64::new(written),
            synced: AtomicU64::new(written),
            failures: AtomicU64::new(0),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let flushing = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("toolplane-record-sync".to_owned())
            .spawn(move || {
                loop {
                    let stop = flushing.stop.lock().unwrap_or_else(|p| p.into_inner());
                    let (stop, _) = (flushing.wake)
                        .wait_timeout_while(stop, SYNC_INTERVAL, |stop| !*stop)
                        .unwrap_or_else(|p| p.into_inner());
                    let stopping = *stop;
                    drop(stop);
                    flushing.flush();
                    if stopping {
                        return;
                    }
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Notes that records up to `sequence` were written to the file.
    pub(super) fn written(&self, sequence: u64) {
        self.shared.written.store(sequence, Ordering::Release);
    }

    /// Goes on with `file` in place of the file just rotated away, which is flushed (with
    /// its directory) at the next flush, before `file`.
    pub(super) fn switch(&self, file: Arc<File>) {
        let mut files = self.shared.files.lock().unwrap_or_else(|p| p.into_inner());
        let rotated = std::mem::replace(&mut files.current, file);
        files.rotated.push(rotated);
    }

    /// How many flushes failed (the current file's is tried again an interval later, a rotated
    /// file's is not; a record written before a failed flush may be lost on a power failure
    /// even if a later flush succeeds, since the kernel may drop what it could not write).
    pub(super) fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// The sequence of the last record known to be on the disk.
    #[cfg(test)]
    pub(super) fn synced(&self) -> u64 {
        self.shared.synced.load(Ordering::Acquire)
    }
}

impl Drop for RecordSync {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Flushes the entries of the directory holding `path` to the disk (a file created or renamed
/// there stays so after a power failure); a failure is logged, since the records themselves
/// are written.
pub(super) fn sync_directory_of(path: &Path) {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if let Err(error) = File::open(directory).and_then(|directory| directory.sync_all()) {
        tracing::error!(directory = %directory.display(), %error, "cannot flush the record log's directory to the disk");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_file() -> (tempfile::TempDir, PathBuf, Arc<File>) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("records.jsonl");
        let file = File::create(&path).expect("created");
        (directory, path, Arc::new(file))
    }

    /// /dev/null, which cannot be flushed (fdatasync answers EINVAL).
    fn unflushable() -> Arc<File> {
        Arc::new(File::open("/dev/null").expect("opened"))
    }

    /// Records written are flushed within about an interval, and the rest when it stops.
    #[test]
    fn written_records_are_flushed_within_an_interval_and_at_the_stop() {
        let (_directory, path, file) = temporary_file();
        let sync = RecordSync::start(Arc::clone(&file), &path, 4).expect("started");
        assert_eq!(sync.synced(), 4, "what was there at the start");
        sync.written(5);
        let waited = std::time::Instant::now();
        while sync.synced() < 5 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sync.synced(), 5, "flushed by the thread");
        sync.switch(Arc::clone(&file));
        sync.written(9);
        let shared = Arc::clone(&sync.shared);
        drop(sync);
        assert_eq!(
            shared.synced.load(Ordering::Acquire),
            9,
            "flushed at the stop"
        );
    }

    /// A flush that fails is counted and tried again; nothing is taken as on the disk.
    #[test]
    fn a_failed_flush_is_counted_and_tried_again() {
        let sync =
            RecordSync::start(unflushable(), Path::new("records.jsonl"), 0).expect("started");
        sync.written(1);
        let waited = std::time::Instant::now();
        while sync.failures() < 2 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sync.failures() >= 2, "{} failures", sync.failures());
        assert_eq!(sync.synced(), 0);
    }

    /// A file rotated away is flushed by the thread, once, even when no record comes after.
    #[test]
    fn a_rotated_file_is_flushed_once_by_the_thread() {
        let (_directory, path, file) = temporary_file();
        let sync = RecordSync::start(unflushable(), &path, 0).expect("started");
        sync.switch(file);
        let waited = std::time::Instant::now();
        while sync.failures() == 0 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            sync.failures(),
            1,
            "the rotated file's flush, with no record written"
        );
        let shared = Arc::clone(&sync.shared);
        drop(sync);
        assert_eq!(
            shared.failures.load(Ordering::Relaxed),
            1,
            "not tried again at the stop"
        );
    }
}
