//! What code under a unit test logs, kept: toolplane's JSON log lines, every level shown.

use std::sync::{Arc, Mutex};

/// What a log writes, kept.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Kept {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `run` answers, and the JSON log lines it writes (on this thread).
pub(crate) fn logged<T>(run: impl FnOnce() -> T) -> (T, String) {
    let kept = Kept::default();
    let writer = kept.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let answer = tracing::subscriber::with_default(subscriber, run);
    let text = String::from_utf8(kept.0.lock().expect("the buffer").clone()).expect("UTF-8");
    (answer, text)
}
