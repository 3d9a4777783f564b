//! `toolplane audit verify`: checking an invocation record log's hash chain from the command
//! line (the checking itself is [`crate::invoke::audit`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::invoke::audit::verify_files_after;
use crate::outln;

/// `toolplane audit`: work with invocation record logs.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify a JSON-lines invocation record log: exit 0 and print the record count and head
    /// hash when the chain is intact, exit 1 naming the first bad line when not. A rotated log
    /// is verified as one chain by naming its files oldest first, the current file last:
    /// `toolplane audit verify records.jsonl.* records.jsonl`. A log being written may be
    /// verified: a last line without its newline that is not a whole record is noted, not
    /// checked, and a file rotated after the files were named is checked in its place.
    Verify {
        /// The log's files, in chain order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The head hash an earlier verification printed for the records before the first
        /// file, when their files are gone (archived or removed): the first file must continue
        /// from it [default: the first file starts the chain].
        #[arg(long, value_name = "SHA256", value_parser = head_hash)]
        after: Option<String>,
    },
}

/// A record hash as `audit verify` prints it: 64 lowercase hex digits.
fn head_hash(value: &str) -> Result<String, String> {
    let is_hash = value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if is_hash {
        Ok(value.to_owned())
    } else {
        Err("a head hash is 64 lowercase hex digits, as `audit verify` prints it".to_owned())
    }
}

impl AuditCommand {
    /// Runs the command: exit 0 when the chain is intact, 1 naming the first bad line.
    pub fn run(self) -> ExitCode {
        let Self::Verify { files, after } = self;
        match verify_files_after(&files, after.as_deref()) {
            Ok(verified) => {
                outln!(
                    "ok: {} records, chain intact, head {}",
                    verified.records,
                    verified.head_sha256
                );
                for rotated in &verified.rotated_meanwhile {
                    outln!(
                        "note: {} was not named but checked: the log was rotated after its \
                         files were named",
                        rotated.display()
                    );
                }
                if let Some(bytes) = verified.unfinished_last_line {
                    outln!(
                        "note: the last line ({bytes} bytes) has no newline and is not a whole \
                         record, so was not checked: a record being written, or one torn by a \
                         crash (a restarted server removes it)"
                    );
                }
                ExitCode::SUCCESS
            }
            Err((file, broken)) => {
                outln!("broken: {}: {broken}", file.display());
                ExitCode::from(1)
            }
        }
    }
}
