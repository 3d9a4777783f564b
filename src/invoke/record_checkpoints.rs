//! Where the lines of a record file lie, about every [`CHECKPOINT_BYTES`]: so that a page of a
//! listing deep in a file reads the part of it that holds the page, backwards from where the
//! page starts, not the file from its start up to there.
//!
//! A listing's page is the newest records of a tenant below a sequence. Lines run in sequence
//! order, so the page lies in the stretch of the file ending at the first line past its start,
//! and in the stretches before that one: they are read one at a time, newest first, until the
//! page is full. Checkpoints of the current file are noted as records are written to it (and
//! as a restart reads it back); a rotated file's, as it is indexed (`record_index`). A file
//! whose lines were found out of order (edited by hand) has none: it is read from its start.

use std::sync::Arc;

use memchr::memmem::Finder;

/// How far apart checkpoints are (in unit tests, a few lines apart).
pub(super) const CHECKPOINT_BYTES: u64 = if cfg!(test) { 1024 } else { 1024 * 1024 };

/// The sequence and offset of the first record line at or past each step of a file.
#[derive(Debug, Clone, Default)]
pub(super) struct Checkpoints {
    /// Shared with the reads that took them; a line noted after copies them.
    points: Arc<Vec<(u64, u64)>>,
    /// Whether a line's sequence came below one noted before it.
    out_of_order: bool,
}

impl Checkpoints {
    /// Whether the line at `offset` is one to note (its sequence is then read).
    pub(super) fn wants(&self, offset: u64) -> bool {
        // The next step starts a step past the last line noted.
        let next = (self.points.last()).map_or(0, |&(_, last)| last + CHECKPOINT_BYTES);
        offset >= next && !self.out_of_order
    }

    /// Notes the record line of `sequence` starting at `offset`, when it starts a step.
    pub(super) fn line(&mut self, sequence: u64, offset: u64) {
        if !self.wants(offset) {
            return;
        }
        if self
            .points
            .last()
            .is_some_and(|&(last, _)| last >= sequence)
        {
            self.out_of_order = true;
            self.points = Arc::default();
            return;
        }
        Arc::make_mut(&mut self.points).push((sequence, offset));
    }

    /// About how much memory they take.
    pub(super) fn bytes(&self) -> usize {
        size_of_val(self.points.as_slice())
    }

    /// The stretches of the file to read for the records below `below`, newest first, as
    /// offsets from and to (`None`: to its end); `None` when the file must be read from its
    /// start.
    pub(super) fn stretches_below(&self, below: u64) -> Option<Vec<(u64, Option<u64>)>> {
        let points = &self.points;
        if self.out_of_order || points.is_empty() {
            return None;
        }
        // The first checkpoint at or past `below` ends the newest stretch to read.
        let past = points.partition_point(|&(sequence, _)| sequence < below);
        let stretches = (0..past).rev().map(|at| {
            // The oldest stretch starts at the file's start, whatever lines come before the
            // first one noted.
            let from = if at == 0 { 0 } else { points[at].1 };
            (from, points.get(at + 1).map(|&(_, offset)| offset))
        });
        Some(stretches.collect())
    }
}

/// Reads a record line's sequence without parsing the line.
pub(super) struct SequenceReader {
    field: Finder<'static>,
}

impl Default for SequenceReader {
    fn default() -> Self {
        Self {
            field: Finder::new(b",\"sequence\":"),
        }
    }
}

impl SequenceReader {
    /// The sequence of a record line (`,"sequence":N,` among its canonical fields); `None` for
    /// a line without one.
    pub(super) fn line(&self, line: &[u8]) -> Option<u64> {
        let at = self.field.find(line)? + self.field.needle().len();
        let rest = &line[at..];
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted(lines: &[(u64, u64)]) -> Checkpoints {
        let mut checkpoints = Checkpoints::default();
        for &(sequence, offset) in lines {
            checkpoints.line(sequence, offset);
        }
        checkpoints
    }

    #[test]
    fn stretches_run_back_from_the_first_checkpoint_past_the_start() {
        let step = CHECKPOINT_BYTES;
        // Lines of 400 bytes from sequence 10: a checkpoint every few lines.
        let lines: Vec<(u64, u64)> = (0..20).map(|n| (10 + n, n * 400)).collect();
        let checkpoints = noted(&lines);
        let points = checkpoints.points.as_ref().clone();
        assert_eq!(points[0], (10, 0));
        assert!(points.windows(2).all(|pair| pair[1].1 - pair[0].1 >= step));
        let (second, third) = (points[1], points[2]);
        assert_eq!(
            checkpoints.stretches_below(third.0),
            Some(vec![(second.1, Some(third.1)), (0, Some(second.1))])
        );
        let last = *points.last().expect("some");
        let all = checkpoints.stretches_below(u64::MAX).expect("in order");
        assert_eq!(all[0], (last.1, None), "the newest stretch runs to the end");
        assert_eq!(all.len(), points.len());
        assert_eq!(checkpoints.stretches_below(10), Some(vec![]), "none below");
        assert_eq!(Checkpoints::default().stretches_below(5), None);
        // A first line without a sequence: the oldest stretch still starts at the start.
        let late = noted(&[(10, 50), (11, 50 + step)]);
        assert_eq!(late.stretches_below(11), Some(vec![(0, Some(50 + step))]));
    }

    #[test]
    fn lines_out_of_order_leave_no_checkpoints() {
        let step = CHECKPOINT_BYTES;
        let checkpoints = noted(&[(5, 0), (3, step), (9, 2 * step)]);
        assert_eq!(checkpoints.stretches_below(100), None);
        assert!(!checkpoints.wants(3 * step));
    }

    /// Pages of two tenants' records, mixed at random over files with checkpoints (the current
    /// one's noted as written, and read back on a restart; rotated ones' as indexed: as they
    /// are rotated, and after a restart as they are read whole), list
    /// what a scan of the records lists; a page deep in a file reads the lines from where it
    /// starts down to its oldest record, and at most a stretch more, not the file from its
    /// start. Before, every page read from the start of its file.
    #[test]
    fn pages_read_backwards_from_checkpoints_list_what_a_scan_does() {
        use super::super::records::tests::{draft, line_size};
        use super::super::records::{RecordFilter, RecordLog};
        use crate::envelope::TenantId;
        use crate::invoke::FILE_BYTES_PER_PAGE;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("records.jsonl");
        let rotate = line_size() * 100;
        let log = RecordLog::open(&path, 1, rotate).expect("open");
        let mut tenants = Vec::new();
        for _ in 0..250 {
            let mut record = draft("t");
            record.tenant = TenantId(1 + u64::from(rand::random::<u8>().is_multiple_of(4)));
            tenants.push(log.append(record).expect("append").tenant_id);
        }
        // A line is at most a few bytes longer than `line_size` (its sequence's digits).
        let longest_line = line_size() + 8;
        let pages = |log: &RecordLog, tenant: u64| {
            let (mut below, mut listed, mut most_over) = (u64::MAX, Vec::new(), 0);
            loop {
                let before = log.stats().file_bytes_read;
                let filter = RecordFilter::default();
                let page = log
                    .list_in_files(TenantId(tenant), &filter, (below, 7), FILE_BYTES_PER_PAGE)
                    .expect("read");
                let read = log.stats().file_bytes_read - before;
                // The lines from where the page starts down to its oldest record (to the first
                // line for a page not full): what it must read; past them, it reads over.
                let oldest = (page.records.last())
                    .filter(|_| page.records.len() == 7)
                    .map_or(1, |record| record.sequence);
                let spanned = below.min(tenants.len() as u64 + 1) - oldest;
                most_over = most_over.max(read.saturating_sub(spanned * longest_line));
                let Some(last) = page.records.last() else {
                    return (listed, most_over);
                };
                below = last.sequence;
                listed.extend(page.records.iter().map(|record| record.sequence));
            }
        };
        let scan = |tenant: u64| -> Vec<u64> {
            let sequences = (1..=tenants.len() as u64).rev();
            sequences
                .filter(|n| tenants[*n as usize - 1] == tenant)
                .collect()
        };
        for tenant in [1, 2] {
            // The rotated files were indexed as they were rotated, their checkpoints with them.
            assert_eq!(pages(&log, tenant).0, scan(tenant), "tenant {tenant}");
            let (listed, most_over) = pages(&log, tenant);
            assert_eq!(listed, scan(tenant), "tenant {tenant}, indexed");
            // Past them, a page reads the line it starts at, and the stretch holding its
            // oldest record from the checkpoint before that record.
            let stretch = CHECKPOINT_BYTES + longest_line;
            assert!(most_over <= stretch, "a page read {most_over} bytes over");
        }
        drop(log);
        let reopened = RecordLog::open(&path, 1, rotate).expect("open");
        for tenant in [1, 2] {
            assert_eq!(
                pages(&reopened, tenant).0,
                scan(tenant),
                "tenant {tenant}, reopened"
            );
        }
    }

    #[test]
    fn a_line_s_sequence_is_read_without_parsing_it() {
        let reader = SequenceReader::default();
        let line = br#"{"prev_record_sha256":"00","sequence":42,"service_name":"s"}"#;
        assert_eq!(reader.line(line), Some(42));
        // A value holding the field's name holds its quotes escaped.
        let line = br#"{"correlation_id":"x\",\"sequence\":1","sequence":7}"#;
        assert_eq!(reader.line(line), Some(7));
        assert_eq!(reader.line(br#"{"sequence":42}"#), None);
        assert_eq!(reader.line(br#"{"a":1,"sequence":,}"#), None);
    }
}
