//! The record log under concurrent appends: threads append while the log rotates its file
//! many times and its flush thread takes the rotated files over. The records must form one
//! chain across the files, in sequence, none lost or written twice, and the ring must hold
//! the latest.

use std::collections::BTreeSet;

use super::tests::draft;
use super::*;
use crate::invoke::audit::verify_files;

const THREADS: usize = 4;
const APPENDS_PER_THREAD: usize = 300;

#[test]
fn concurrent_appends_across_rotations_make_one_chain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("records.jsonl");
    // A few records a file, so the appends rotate it about a hundred times.
    let log = Arc::new(RecordLog::open(&path, 64, 4096).expect("open"));
    let appended: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let log = Arc::clone(&log);
                scope.spawn(move || {
                    (0..APPENDS_PER_THREAD)
                        .map(|_| log.append(draft("t")).expect("append").sequence)
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        (threads.into_iter())
            .map(|thread| thread.join().expect("an appending thread"))
            .collect()
    });
    let total = (THREADS * APPENDS_PER_THREAD) as u64;

    // Each thread saw its own sequences go up, and together they are 1..=total, once each.
    for sequences in &appended {
        assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]));
    }
    let every: BTreeSet<u64> = appended.iter().flatten().copied().collect();
    assert_eq!(every, (1..=total).collect());

    // The rotated files (named by their first sequence, zero-padded), then the current one.
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the log's folder")
        .map(|entry| entry.expect("listed").path())
        .filter(|file| *file != path)
        .collect();
    files.sort();
    assert!(files.len() > 10, "rotated {} times", files.len());
    files.push(path.clone());
    let verified = verify_files(&files).expect("one chain across the files");
    assert_eq!(verified.records, total);

    let latest = log.list(TenantId(1), &RecordFilter::default(), None, 64);
    let sequences: Vec<u64> = latest.iter().map(|record| record.sequence).collect();
    assert_eq!(sequences, (total - 63..=total).rev().collect::<Vec<_>>());
    assert_eq!(latest[0].record_sha256, verified.head_sha256);
}
