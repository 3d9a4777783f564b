//! Finding one record in the log's files, for a record no longer held in memory.
//!
//! Memory holds the latest `records_in_memory` records; the files hold every one. A record
//! asked for by id that memory no longer holds is looked for in the current file, then in the
//! rotated ones, newest first. The files are read line by line and only a line holding the
//! id's exact JSON (`"invocation_id":"..."`, as every record line writes it) is parsed, so a
//! lookup costs a sequential read of the files, no more. Lookups run one at a time, so callers
//! asking for old ids cannot make the server read its files many times over at once.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record_file::rotated_files;
use super::records::{InvocationRecord, RecordError, RecordLog, parse_line};
use crate::envelope::TenantId;

impl RecordLog {
    /// One record of `tenant`: from memory, else from the log's files. Blocking (it may read
    /// the files): call it off the serving threads.
    pub fn find(
        &self,
        tenant: TenantId,
        invocation_id: &str,
    ) -> Result<Option<Arc<InvocationRecord>>, RecordError> {
        if let Some(record) = self.get(tenant, invocation_id) {
            return Ok(Some(record));
        }
        let Some(path) = self.file_path() else {
            return Ok(None);
        };
        let _one_at_a_time = self.file_lookups();
        let io = |path: PathBuf| move |source| RecordError::Io { path, source };
        let mut files = rotated_files(&path).map_err(io(path.clone()))?;
        files.push(path);
        for file in files.iter().rev() {
            if let Some(record) =
                find_in_file(file, tenant, invocation_id).map_err(io(file.clone()))?
            {
                return Ok(Some(Arc::new(record)));
            }
        }
        Ok(None)
    }
}

/// The record of `tenant` with `invocation_id` in the file at `path`, if it is there. A file
/// gone meanwhile (rotated while the lookup ran) holds nothing.
fn find_in_file(
    path: &Path,
    tenant: TenantId,
    invocation_id: &str,
) -> std::io::Result<Option<InvocationRecord>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let id = serde_json::to_string(invocation_id).expect("a string always serializes");
    let needle = format!("\"invocation_id\":{id}");
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = Vec::new();
    loop {
        line.clear();
        // A last line without its newline is being written: not a record yet.
        if reader.read_until(b'\n', &mut line)? == 0 || line.last() != Some(&b'\n') {
            return Ok(None);
        }
        if finder.find(&line).is_none() {
            continue;
        }
        if let Ok((_, record)) = parse_line(&line)
            && record.invocation_id == invocation_id
            && record.tenant_id == tenant.0
        {
            return Ok(Some(record));
        }
    }
}
