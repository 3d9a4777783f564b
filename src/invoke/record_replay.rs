//! Reading the current record file back as the log opens (a restart): each line checked by
//! itself and against the chain, what the file holds noted ([`CurrentHoldings`]), and the
//! latest records kept for the ring.
//!
//! The server serves no call until the file is read, and a full file of the default 256 MiB
//! holds some 350,000 records. Each line's own check (its parse, its canonical form and its
//! hash: most of the work, and independent of the other lines) runs for a batch of lines on
//! every core (a rayon pool of the reading's own), while the batch before it is put in order
//! on the reading's thread (the links between lines checked, what the file holds noted). A
//! line's record is read with its strings borrowed from the line ([`CanonicalRecord`]), and
//! only the lines of the records the ring keeps are read into records, once the file is
//! read. Against reading one line at a time on one thread, this halves the time to open a
//! full file and costs memory while it runs (2 cores, BENCHMARKS.md item 55: 0.67-1.07 s
//! against 1.59-2.26 s; a peak of 41-53 MiB against 26). A batch is 256 KiB: batches of 128
//! KiB to 1 MiB took as long, and the larger ones held more (1 MiB: a peak of 65-71 MiB;
//! 8 MiB: 143-149 MiB). Most of the peak is what mimalloc keeps rather than what the reading
//! holds (the live heap peaked at about 21 MiB, profiled under glibc's allocator). Reading
//! the records with borrowed strings took a sixth off the CPU an open takes (item 55).

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, mpsc};

use rayon::prelude::*;

use super::audit::{ChainBroken, ChainCheck, EDITED, content_fault};
use super::record_canonical::CanonicalRecord;
use super::record_file::{line_text, parse_line};
use super::record_index::{CurrentHoldings, LineKeys};
use super::records::InvocationRecord;

/// At most how many bytes of lines are checked together (a longer line is a batch of its own).
const BATCH_BYTES: usize = 256 * 1024;

/// A line's own check: how its record links into the chain and what is wrong with it by
/// itself, or why it is no record.
type Checked = Result<Link, String>;

/// What putting a record's line in order takes of its record.
struct Link {
    sequence: u64,
    prev_record_sha256: Box<str>,
    record_sha256: Box<str>,
    /// What is wrong with the line by itself.
    fault: Option<String>,
}

/// Lines read one after another, and where each lies among them.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    lines: Vec<Range<usize>>,
}

/// A batch and each of its lines' own checks, in order.
type CheckedBatch = (Batch, Vec<Checked>);

/// The current file being read back, a line at a time ([`Replay::line`]).
pub(super) struct Replay {
    keys: LineKeys,
    chain: ChainCheck,
    replayed: Replayed,
    /// The most records [`Replayed::latest`] keeps.
    keep: usize,
    /// The lines of the latest records, read into records once the file is read.
    kept: VecDeque<(Arc<Batch>, Range<usize>)>,
    /// The lines read since the last batch was handed to the pool.
    batch: Batch,
    /// The batch before it, being checked on the pool meanwhile.
    checking: Option<mpsc::Receiver<CheckedBatch>>,
    /// The lines put in order so far.
    count: u64,
    /// Where the next line to put in order starts in the file.
    offset: u64,
    /// Checks the lines of a batch on every core, while the batch before is put in order on
    /// this thread; started with the first batch (an empty file starts no thread), `None`
    /// when no thread could be started (each batch is checked here).
    pool: OnceCell<Option<rayon::ThreadPool>>,
}

/// What reading the file back found.
pub(super) struct Replayed {
    /// What the file holds.
    pub(super) holdings: CurrentHoldings,
    /// The sequence of the file's first line, when that is a record.
    pub(super) first_sequence: Option<u64>,
    /// The latest records read, oldest first: the last one continues the chain.
    pub(super) latest: VecDeque<Arc<InvocationRecord>>,
    /// The first line that does not verify, if any.
    pub(super) broken: Option<ChainBroken>,
}

impl Replay {
    /// A reading checked by `chain`, its lines keyed by `keys` into `holdings`, keeping the
    /// latest `keep` records (at least one, so that the last continues the chain).
    pub(super) fn new(
        keys: LineKeys,
        chain: ChainCheck,
        holdings: CurrentHoldings,
        keep: usize,
    ) -> Self {
        Self {
            keys,
            chain,
            replayed: Replayed {
                holdings,
                first_sequence: None,
                latest: VecDeque::new(),
                broken: None,
            },
            keep: keep.max(1),
            kept: VecDeque::new(),
            batch: Batch::default(),
            checking: None,
            count: 0,
            offset: 0,
            pool: OnceCell::new(),
        }
    }

    /// The pool the batches are checked on, started the first time.
    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .thread_name(|n| format!("record-replay-{n}"))
                    .build()
                    .ok()
            })
            .as_ref()
    }

    /// Takes the file's next whole line (with its line ending).
    pub(super) fn line(&mut self, bytes: &[u8]) {
        if self.batch.bytes.len() + bytes.len() > BATCH_BYTES {
            self.hand_over();
        }
        if self.batch.bytes.capacity() == 0 {
            self.batch.bytes.reserve_exact(BATCH_BYTES.max(bytes.len()));
        }
        let start = self.batch.bytes.len();
        self.batch.bytes.extend_from_slice(bytes);
        self.batch.lines.push(start..self.batch.bytes.len());
    }

    /// What the lines handed over come to. The latest records are read from their lines
    /// here, on the pool when there is one; each batch is freed once its last kept line is
    /// read, so the batches and the records read from them are not all held at once.
    pub(super) fn finish(mut self) -> Replayed {
        self.hand_over();
        if let Some(checking) = self.checking.take() {
            self.put_in_order(checking);
        }
        let read = |(batch, range): (Arc<Batch>, Range<usize>)| {
            let (_, record) = parse_line(&batch.bytes[range]).ok()?;
            Some(Arc::new(record))
        };
        let kept = std::mem::take(&mut self.kept);
        self.replayed.latest = match self.pool.get().and_then(Option::as_ref) {
            Some(pool) => pool.install(|| kept.into_par_iter().filter_map(read).collect()),
            None => kept.into_iter().filter_map(read).collect(),
        };
        self.replayed
    }

    /// Hands the lines read to the pool to be checked, and puts the batch before them in
    /// order meanwhile.
    fn hand_over(&mut self) {
        if self.batch.lines.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let (sent, checked) = mpsc::sync_channel(1);
        let pool = self.pool();
        let on_the_pool = pool.is_some();
        let check = move || {
            let own_check = |range: &Range<usize>| own_check(&batch.bytes[range.clone()]);
            let checks = if on_the_pool {
                batch.lines.par_iter().map(own_check).collect()
            } else {
                batch.lines.iter().map(own_check).collect()
            };
            // The receiver waits for it unless the reading was given up (an I/O error).
            let _ = sent.send((batch, checks));
        };
        match pool {
            Some(pool) => pool.spawn(check),
            None => check(),
        }
        if let Some(before) = self.checking.replace(checked) {
            self.put_in_order(before);
        }
    }

    /// Puts the lines of the batch being checked in order, once checked: each against the
    /// chain, into what the file holds and among the latest records.
    fn put_in_order(&mut self, checking: mpsc::Receiver<CheckedBatch>) {
        // A check that panicked (out of memory) drops its sender: the open fails with it.
        let (batch, checks) = checking
            .recv()
            .expect("a batch of record lines is checked unless its check panicked");
        let batch = Arc::new(batch);
        for (range, checked) in batch.lines.iter().zip(&checks) {
            let bytes = &batch.bytes[range.clone()];
            self.count += 1;
            let at = self.offset;
            self.offset += bytes.len() as u64;
            let replayed = &mut self.replayed;
            replayed.holdings.line(&self.keys, bytes);
            let fault = match checked {
                Ok(link) => {
                    replayed.holdings.place(link.sequence, at);
                    // As `ChainCheck::check`: a line wrong by itself is not linked to.
                    let fault = link.fault.clone().or_else(|| {
                        let (previous, own) = (&link.prev_record_sha256, &link.record_sha256);
                        self.chain.links(previous, link.sequence, own).err()
                    });
                    if self.count == 1 {
                        replayed.first_sequence = Some(link.sequence);
                    }
                    if self.kept.len() == self.keep {
                        self.kept.pop_front();
                    }
                    self.kept.push_back((Arc::clone(&batch), range.clone()));
                    fault
                }
                Err(problem) => Some(problem.clone()),
            };
            if let (Some(problem), None) = (fault, &replayed.broken) {
                replayed.broken = Some(ChainBroken {
                    line: self.count,
                    problem,
                });
            }
        }
        // Freed on the pool, whose threads made them, while this thread goes on.
        let free = move || drop(checks);
        match self.pool() {
            Some(pool) => pool.spawn(free),
            None => free(),
        }
    }
}

/// A line's own check (its parse, its canonical form, its hash): its record read with its
/// strings borrowed from the line, so that a line takes no allocation but its two hashes.
fn own_check(bytes: &[u8]) -> Checked {
    let text = line_text(bytes)?;
    if let Some(record) = CanonicalRecord::read(text) {
        return Ok(Link {
            sequence: record.sequence(),
            prev_record_sha256: record.prev_record_sha256().into(),
            record_sha256: record.record_sha256().into(),
            fault: (!record.is_its_line(text)).then(|| EDITED.to_owned()),
        });
    }
    // Read as the record it is not, for why not (as `audit verify` says it).
    let (text, record) = parse_line(bytes)?;
    Ok(Link {
        sequence: record.sequence,
        fault: content_fault(text, &record),
        prev_record_sha256: record.prev_record_sha256.into(),
        record_sha256: record.record_sha256.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::record_index::{FileIndexes, Wanted};
    use crate::invoke::records::tests::draft;
    use crate::invoke::records::{DEFAULT_ROTATE_BYTES, RecordLog, record_line};

    /// The records of a chain of `count` calls, as the log appends them, and their lines
    /// (each with its line ending).
    fn chain_of(count: u64) -> (Vec<Arc<InvocationRecord>>, Vec<String>) {
        let log = RecordLog::in_memory(1);
        let records: Vec<_> = (0..count)
            .map(|_| log.append(draft("echo")).expect("an in-memory log appends"))
            .collect();
        let lines = records
            .iter()
            .map(|record| record_line(record) + "\n")
            .collect();
        (records, lines)
    }

    /// `lines` read back keeping `keep` records, and the keys they were noted by.
    fn read_back(lines: &[String], keep: usize) -> (Replayed, LineKeys) {
        let keys = FileIndexes::default().keys().clone();
        let holdings = CurrentHoldings::for_file(DEFAULT_ROTATE_BYTES);
        let mut replay = Replay::new(keys.clone(), ChainCheck::default(), holdings, keep);
        for line in lines {
            replay.line(line.as_bytes());
        }
        (replay.finish(), keys)
    }

    /// The sequences of the records kept.
    fn sequences(replayed: &Replayed) -> Vec<u64> {
        replayed
            .latest
            .iter()
            .map(|record| record.sequence)
            .collect()
    }

    /// Lines of several batches, checked on the pool, come back in the file's order: the
    /// chain verifies across the batches, the latest records are kept, every id is noted.
    #[test]
    fn lines_of_several_batches_are_put_back_in_order() {
        let (records, lines) = chain_of(5_000);
        let bytes: usize = lines.iter().map(String::len).sum();
        assert!(
            bytes > 3 * BATCH_BYTES,
            "{bytes} bytes make more than 3 batches"
        );
        let (replayed, keys) = read_back(&lines, 10);
        assert!(
            replayed.broken.is_none(),
            "{:?}",
            replayed.broken.map(|b| b.problem)
        );
        assert_eq!(replayed.first_sequence, Some(1));
        assert_eq!(sequences(&replayed), (4_991..=5_000).collect::<Vec<_>>());
        for sequence in [1, 2_500, 5_000] {
            let id = &records[sequence - 1].invocation_id;
            assert!(
                replayed.holdings.may_hold(Wanted::Id(keys.id_key(id))),
                "{id}"
            );
        }
    }

    /// The first line that does not verify is named by its number in the file, also when it
    /// lies in a later batch; the lines after it are still read.
    #[test]
    fn the_first_line_that_does_not_verify_is_named_in_a_later_batch() {
        let (_, mut lines) = chain_of(5_000);
        lines[3_999] = lines[3_999].replace("\"echo\"", "\"ECHO\"");
        lines[4_499] = "not a record\n".to_owned();
        let (replayed, _) = read_back(&lines, 3);
        let broken = replayed
            .broken
            .as_ref()
            .expect("the edited line does not verify");
        assert_eq!(broken.line, 4_000);
        assert!(broken.problem.contains("edited"), "{}", broken.problem);
        assert_eq!(sequences(&replayed), [4_998, 4_999, 5_000]);
    }
}
