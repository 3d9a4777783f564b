//! Flushing the record log's file to the disk: [`RecordSync`].
//!
//! Each record is written to the file before its call is answered, so a crash of the server
//! loses none; what the kernel has not yet written out is lost on a power failure. Flushing
//! (`fdatasync`) at every record would cost each call a disk round trip, so a thread of its own
//! flushes the file once every [`SYNC_INTERVAL`] while records come in (a group commit): a power
//! failure loses at most the records of the last interval. A rotated file is flushed as it is
//! rotated, and the file is flushed once more when the log is closed.
//!
//! A thread, not a tokio task: `fdatasync` blocks, and the log is also opened outside the
//! server's runtime (tests, tools).

use std::fs::File;
use std::path::Path;
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
    /// The file records are appended to now.
    file: Mutex<Arc<File>>,
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

impl Shared {
    /// Flushes the current file when records were written since the last flush.
    fn flush(&self) {
        let written = self.written.load(Ordering::Acquire);
        if written <= self.synced.load(Ordering::Acquire) {
            return;
        }
        let file = Arc::clone(&self.file.lock().unwrap_or_else(|p| p.into_inner()));
        match file.sync_data() {
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
    /// Starts flushing `file`, to which records up to `written` (a sequence) were written (and
    /// are taken as on the disk already).
    pub(super) fn start(file: Arc<File>, written: u64) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            file: Mutex::new(file),
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

    /// Goes on with `file` in place of the file just rotated (which the rotation flushed).
    pub(super) fn switch(&self, file: Arc<File>) {
        *self.shared.file.lock().unwrap_or_else(|p| p.into_inner()) = file;
    }

    /// How many flushes failed (each is tried again an interval later; a record written
    /// before a failed flush may be lost on a power failure even if a later flush succeeds,
    /// since the kernel may drop what it could not write).
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

    fn temporary_file() -> (tempfile::TempDir, Arc<File>) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let file = File::create(directory.path().join("records.jsonl")).expect("created");
        (directory, Arc::new(file))
    }

    /// Records written are flushed within about an interval, and the rest when it stops.
    #[test]
    fn written_records_are_flushed_within_an_interval_and_at_the_stop() {
        let (_directory, file) = temporary_file();
        let sync = RecordSync::start(Arc::clone(&file), 4).expect("started");
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
        // /dev/null cannot be flushed (fdatasync answers EINVAL).
        let file = Arc::new(File::open("/dev/null").expect("opened"));
        let sync = RecordSync::start(file, 0).expect("started");
        sync.written(1);
        let waited = std::time::Instant::now();
        while sync.failures() < 2 && waited.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sync.failures() >= 2, "{} failures", sync.failures());
        assert_eq!(sync.synced(), 0);
    }
}
