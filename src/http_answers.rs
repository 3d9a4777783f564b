//! Answers of the HTTP servers toolplane calls (a model server, an OAuth authorization server,
//! the OTLP collector), read within a bound: the size of what another server sends is not
//! trusted, so that one answering without end cannot use up toolplane's memory.

/// The body of `response`, read to its end; `Ok(None)` as soon as it holds more than
/// `max_bytes` (what was read is dropped and the rest is not read).
pub async fn body_within(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> reqwest::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max_bytes {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}
