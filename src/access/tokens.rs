//! The bearer tokens of `[[tenant_access]]`: read from an environment variable once
//! (`token_env`), or from a file (`token_file`, a mounted Kubernetes Secret, a Vault agent's
//! output) that is read again while the server runs, so a rotated token needs no restart.
//!
//! A token file holds one token per line (blank lines are skipped), each granting the entry's
//! tenants: to rotate without refusing anyone, write the new token beside the old one, move the
//! callers over, then remove the old line. Tokens are kept only as sha256 digests.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::{CallerGrant, Tenants};
use crate::grpc::tls_reload::{Fingerprint, content_digest, fingerprint};

/// A token as the rules keep it: its sha256, so no token is held in memory as it was sent, and
/// looking one up compares digests, not the secrets.
pub(super) fn token_digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// Where an entry's tokens come from. (No `Debug`: it holds a token's digest.)
#[derive(Clone, PartialEq, Eq)]
enum Source {
    /// A variable, read once: its token's digest.
    Variable { name: String, digest: [u8; 32] },
    /// A file, read at the start and again when it changes.
    File(PathBuf),
}

/// One entry's tokens: where from, what they grant, and how errors name the entry.
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    source: Source,
    tenants: Tenants,
    at: String,
}

/// The token entries, and the table of every token they hold now.
#[derive(Default)]
pub(super) struct Tokens {
    entries: Vec<Entry>,
    /// Each token's digest to what it grants a caller with no certificate identity, made once
    /// here so that a call sending it allocates nothing; errors name it by its variable or
    /// file, never its value.
    table: ArcSwap<HashMap<[u8; 32], Arc<CallerGrant>>>,
    /// What the token files held when the table was made, as the file watch fingerprints
    /// them, in the order of [`Self::files`].
    read: ArcSwap<Fingerprint>,
    /// Held while the files are read and the table made, so that two readings (the token
    /// files' watch, and rules put in force catching up) put in force the later one.
    loading: Mutex<()>,
}

impl Tokens {
    /// Adds an entry of the token in `variable` (`token`, read from it); `at` names the entry.
    pub(super) fn add_variable(
        &mut self,
        at: String,
        variable: &str,
        token: &str,
        tenants: Tenants,
    ) {
        let source = Source::Variable {
            name: variable.to_owned(),
            digest: token_digest(token.trim().as_bytes()),
        };
        self.entries.push(Entry {
            source,
            tenants,
            at,
        });
    }

    /// Adds an entry of the tokens in the file at `path`; `at` names the entry.
    pub(super) fn add_file(&mut self, at: String, path: &str, tenants: Tenants) {
        self.entries.push(Entry {
            source: Source::File(PathBuf::from(path)),
            tenants,
            at,
        });
    }

    /// Reads the token files (each with `read_file`) and makes the table of every entry's tokens
    /// the one calls are checked against. A file that cannot be read or holds no token, or a
    /// token held by two entries, is an error naming the entry, and the table in use stays.
    pub(super) fn load(
        &self,
        read_file: impl Fn(&std::path::Path) -> std::io::Result<String>,
    ) -> Result<(), String> {
        let _loading = self.loading.lock().unwrap_or_else(PoisonError::into_inner);
        let mut table = HashMap::new();
        let mut entry_of = HashMap::new();
        let mut read = Fingerprint::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let (name, digests) = match &entry.source {
                Source::Variable { name, digest } => (name.clone(), vec![*digest]),
                Source::File(path) => {
                    let (content, digests) = file_tokens(entry, path, &read_file)?;
                    read.push(Some(content));
                    (path.display().to_string(), digests)
                }
            };
            for digest in digests {
                let grant = CallerGrant {
                    identities: vec![format!("the bearer token of {name}")],
                    tenants: entry.tenants.clone(),
                };
                table.insert(digest, Arc::new(grant));
                if let Some(other) = entry_of
                    .insert(digest, index)
                    .filter(|other| *other != index)
                {
                    return Err(format!(
                        "{}: a token of it is in {} too; give it one entry with all its tenants",
                        entry.at, self.entries[other].at
                    ));
                }
            }
        }
        self.table.store(table.into());
        self.read.store(read.into());
        Ok(())
    }

    /// Reads the token files again (each with `read_file`) if they no longer hold what they
    /// held when the tokens in use were read from them; else reads nothing more.
    pub(super) fn load_if_changed(
        &self,
        read_file: impl Fn(&std::path::Path) -> std::io::Result<String>,
    ) -> Result<(), String> {
        if fingerprint(&self.files()) == **self.read.load() {
            return Ok(());
        }
        self.load(read_file)
    }

    /// What the token files held when the tokens in use were read from them.
    pub(super) fn files_read(&self) -> Fingerprint {
        self.read.load().to_vec()
    }

    /// Whether there are token entries at all.
    pub(super) fn any(&self) -> bool {
        !self.entries.is_empty()
    }

    /// How many tokens the entries hold now.
    pub(super) fn count(&self) -> usize {
        self.table.load().len()
    }

    /// The token files, to be watched for changes.
    pub(super) fn files(&self) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter_map(|entry| match &entry.source {
                Source::File(path) => Some(path.clone()),
                Source::Variable { .. } => None,
            })
            .collect()
    }

    /// What `token` grants, if an entry holds it.
    pub(super) fn grant(&self, token: &[u8]) -> Option<Arc<CallerGrant>> {
        self.table.load().get(&token_digest(token)).cloned()
    }
}

/// Names the entries and counts the tokens; no token or digest of one is shown.
impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries: Vec<&str> = self.entries.iter().map(|entry| entry.at.as_str()).collect();
        f.debug_struct("Tokens")
            .field("entries", &entries)
            .field("tokens", &self.count())
            .finish()
    }
}

impl PartialEq for Tokens {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries && *self.table.load() == *other.table.load()
    }
}

impl Eq for Tokens {}

/// The digest of the content of the file at `path` (as the file watch takes it), and the
/// digests of the tokens in it, one per line, blank lines skipped.
fn file_tokens(
    entry: &Entry,
    path: &std::path::Path,
    read: impl Fn(&std::path::Path) -> std::io::Result<String>,
) -> Result<([u8; 32], Vec<[u8; 32]>), String> {
    let text = read(path).map_err(|error| {
        format!(
            "{}: token_file {} cannot be read: {error}",
            entry.at,
            path.display()
        )
    })?;
    let digests: Vec<[u8; 32]> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|token| token_digest(token.as_bytes()))
        .collect();
    if digests.is_empty() {
        return Err(format!(
            "{}: token_file {} holds no token (one per line)",
            entry.at,
            path.display()
        ));
    }
    Ok((content_digest(text.as_bytes()), digests))
}
