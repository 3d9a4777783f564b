//! The check behind the `record_lines` fuzz target ([`crate::fuzz_checks::record_lines`]):
//! the readers of the record files agree with each other and with the records' definition.
//! It lives here, beside those readers, because they are internal to the invocation engine.

use std::io::Cursor;

use super::audit::{ChainBroken, ChainCheck, check_file, content_fault};
use super::record_checkpoints::SequenceReader;
use super::record_file::parse_line;
use super::record_index::{CurrentHoldings, FileIndexes, LineKeys, Wanted};
use super::record_replay::Replay;
use super::records::{GENESIS_SHA256, InvocationRecord, content_sha256, record_line};

/// How many records the reading back keeps: few, so that it lets records go.
const KEEP: usize = 3;

/// See [`crate::fuzz_checks::record_lines`]: the bytes are `EDIT` (3 bytes) then `LINES`.
pub(crate) fn record_lines(data: &[u8]) {
    let Some((edit, lines)) = data.split_first_chunk::<3>() else {
        return;
    };
    let keys = FileIndexes::default().keys().clone();
    let mut records = Vec::new();
    for line in lines_of(lines) {
        if let Ok((text, record)) = parse_line(line) {
            agree_on_the_line(text, &record, &keys);
            let mut rehashed = record.clone();
            rehashed.record_sha256 = content_sha256(&rehashed);
            agree_on_the_line(&record_line(&rehashed), &rehashed, &keys);
            records.push(record);
        }
    }
    agree_on_the_file(lines, &keys);
    // The records read, chained again: a file that verifies, but for the one byte edited.
    let mut chained = chained_again(records).into_bytes();
    if chained.is_empty() {
        return;
    }
    let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % chained.len();
    let edited = chained[at] != edit[2];
    // The last newline made a carriage return leaves a line ending both readers take (as
    // `BufRead::lines` does), the record whole.
    let line_ending = at + 1 == chained.len() && edit[2] == b'\r';
    chained[at] = edit[2];
    let broken = agree_on_the_file(&chained, &keys);
    if edited && !line_ending {
        let line = chained[..at].iter().filter(|&&byte| byte == b'\n').count() as u64 + 1;
        let broken = broken.expect("a byte edited in a chain of records is found");
        assert_eq!(
            broken.line, line,
            "the edited line is named: {}",
            broken.problem
        );
    } else {
        assert_eq!(
            broken, None,
            "a chain of records written by the log verifies"
        );
    }
}

/// The lines of a file, each with its line ending (the last may have none).
fn lines_of(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split_inclusive(|&byte| byte == b'\n')
}

/// The check of a line against its record (a start's, from the line) is writing the record
/// out (`record_line`, `content_sha256`); and of a canonical line, the sequence and keys read
/// from its bytes (for the checkpoints and indexes of the files) are the record's.
fn agree_on_the_line(text: &str, record: &InvocationRecord, keys: &LineKeys) {
    let written = record_line(record) == text && content_sha256(record) == record.record_sha256;
    assert_eq!(content_fault(text, record).is_none(), written, "{text}");
    if !written {
        return;
    }
    let sequence = SequenceReader::default().line(text.as_bytes());
    assert_eq!(sequence, Some(record.sequence), "{text}");
    let (mut ids, mut tenants) = (Vec::new(), Vec::new());
    keys.each(
        text.as_bytes(),
        |id| ids.push(id),
        |tenant| tenants.push(tenant),
    );
    assert_eq!(ids, [keys.id_key(&record.invocation_id)], "{text}");
    assert_eq!(tenants, [record.tenant_id], "{text}");
}

/// A start's reading back of `bytes` (`Replay`, its lines checked on a pool) finds what
/// `audit verify` finds: the same first bad line (with the same problem when the line is
/// UTF-8), and keeps the latest records of the lines, noting the ids and tenants of the
/// canonical ones. What `audit verify` finds is answered.
fn agree_on_the_file(bytes: &[u8], keys: &LineKeys) -> Option<ChainBroken> {
    let audit = check_file(&mut ChainCheck::default(), Cursor::new(bytes), false).err();
    let holdings = CurrentHoldings::for_file(0);
    let mut replay = Replay::new(keys.clone(), ChainCheck::default(), holdings, KEEP);
    for line in lines_of(bytes) {
        replay.line(line);
    }
    let replayed = replay.finish();
    assert_eq!(
        replayed.broken.as_ref().map(|broken| broken.line),
        audit.as_ref().map(|broken| broken.line),
        "{:?} against {audit:?}",
        replayed.broken
    );
    if let (Some(theirs), Some(ours)) = (&audit, &replayed.broken)
        && !ours.problem.starts_with("cannot read")
    {
        assert_eq!(theirs.problem, ours.problem);
    }
    let parsed: Vec<_> = lines_of(bytes)
        .filter_map(|line| parse_line(line).ok())
        .map(|(text, record)| (content_fault(text, &record).is_none(), record))
        .collect();
    let kept: Vec<_> = replayed
        .latest
        .iter()
        .map(|record| record.sequence)
        .collect();
    let latest = &parsed[parsed.len().saturating_sub(KEEP)..];
    let latest: Vec<_> = latest.iter().map(|(_, record)| record.sequence).collect();
    assert_eq!(kept, latest);
    let first = lines_of(bytes)
        .next()
        .and_then(|line| parse_line(line).ok());
    assert_eq!(
        replayed.first_sequence,
        first.map(|(_, record)| record.sequence)
    );
    for (_, record) in parsed.iter().filter(|(canonical, _)| *canonical) {
        let id = Wanted::Id(keys.id_key(&record.invocation_id));
        assert!(replayed.holdings.may_hold(id), "{}", record.invocation_id);
        let tenant = Wanted::Tenant(record.tenant_id);
        assert!(replayed.holdings.may_hold(tenant), "{}", record.tenant_id);
    }
    audit
}

/// `records` as the log writes them, from sequence 1: each linked to the one before and
/// hashed again.
fn chained_again(records: Vec<InvocationRecord>) -> String {
    let mut previous = GENESIS_SHA256.to_owned();
    let mut file = String::new();
    for (sequence, mut record) in (1..).zip(records) {
        record.sequence = sequence;
        record.prev_record_sha256 = previous;
        record.record_sha256 = content_sha256(&record);
        file += &record_line(&record);
        file.push('\n');
        previous = record.record_sha256;
    }
    file
}
