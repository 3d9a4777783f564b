//! Page sizes and opaque page tokens (Google AIP-158). A token names the last item of the page
//! it ends (keyset paging), so items coming and going between pages never make the listing
//! skip or repeat an item that stayed; and it carries a fingerprint of the query, so a token
//! cannot be replayed against a different filter.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::error::{RegistryError, ViolationKind};
use crate::json::sha256_hex;

/// Page size used when the request asks for 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page size; larger requests are coerced down to it.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Turns a request's page_size into a page size.
pub fn page_size(requested: i32) -> Result<usize, RegistryError> {
    match requested {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n < 0 => Err(RegistryError::invalid(
            "page_size",
            ViolationKind::Field,
            format!("page_size must not be negative, got {n}"),
        )),
        n => Ok(usize::try_from(n)
            .unwrap_or(MAX_PAGE_SIZE)
            .min(MAX_PAGE_SIZE)),
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Token {
    /// The key of the last item returned.
    after: Vec<String>,
    /// A fingerprint of the query the token belongs to.
    query: String,
}

fn fingerprint(query: &str) -> String {
    sha256_hex(query.as_bytes())[..16].to_owned()
}

/// Encodes a token resuming after `after`, for the query described by `query`.
pub fn encode_token(after: Vec<String>, query: &str) -> String {
    let token = Token {
        after,
        query: fingerprint(query),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// Decodes a token; `None` for an empty token (the first page).
pub fn decode_token(
    token: &str,
    query: &str,
    key_len: usize,
) -> Result<Option<Vec<String>>, RegistryError> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| {
        RegistryError::invalid(
            "page_token",
            ViolationKind::Field,
            format!("page_token {why}; start again without one"),
        )
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid("is not a token this server issued"))?;
    let decoded: Token =
        serde_json::from_slice(&bytes).map_err(|_| invalid("is not a token this server issued"))?;
    if decoded.query != fingerprint(query) {
        return Err(invalid("belongs to a listing with other filters"));
    }
    if decoded.after.len() != key_len {
        return Err(invalid("is not a token this server issued"));
    }
    Ok(Some(decoded.after))
}

/// Decodes a token that resumes after a sequence number (records, agents, messages).
pub fn decode_sequence_token(token: &str, query: &str) -> Result<Option<u64>, RegistryError> {
    decode_token(token, query, 1)?
        .map(|key| {
            key[0].parse::<u64>().map_err(|_| {
                RegistryError::invalid(
                    "page_token",
                    ViolationKind::Field,
                    "page_token is not a token this server issued; start again without one",
                )
            })
        })
        .transpose()
}

/// Encodes a token resuming after sequence number `last`.
pub fn encode_sequence_token(last: u64, query: &str) -> String {
    encode_token(vec![last.to_string()], query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_bound_to_their_query() {
        let token = encode_token(vec!["a".into(), "b".into()], "q1");
        assert_eq!(
            decode_token(&token, "q1", 2).expect("valid"),
            Some(vec!["a".into(), "b".into()])
        );
        assert!(decode_token(&token, "q2", 2).is_err());
        assert!(decode_token("garbage!", "q1", 2).is_err());
        assert_eq!(decode_token("", "q1", 2).expect("first page"), None);
    }

    #[test]
    fn page_sizes_default_and_coerce() {
        assert_eq!(page_size(0).expect("ok"), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(5000).expect("ok"), MAX_PAGE_SIZE);
        assert!(page_size(-1).is_err());
    }
}
