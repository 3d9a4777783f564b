//! Header maps for unit tests of code that reads HTTP headers.

use http::HeaderMap;
use http::header::HeaderName;

/// A header map of `pairs` (lower-case names).
pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name),
                value.parse().expect("a header value"),
            )
        })
        .collect()
}
