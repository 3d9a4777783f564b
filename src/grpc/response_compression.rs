//! Which responses are compressed (`response_compression`).
//!
//! Every service can send its responses compressed with gzip or deflate; tonic compresses a
//! response with the first of those the request's `grpc-accept-encoding` lists. This layer
//! decides, per request, what tonic sees there, before the call reaches the services:
//!
//! - `mirror` (the default, as grpc-go servers do): a response is compressed with the encoding
//!   the request was compressed with, when the caller accepts it; a caller that sends plain
//!   requests gets plain responses, whatever it accepts. Most gRPC libraries advertise gzip
//!   without being asked to compress, so compressing for everyone who accepts it would spend
//!   CPU on every call of callers that never chose it.
//! - `gzip`: every response to a caller that accepts gzip is gzip-compressed, for callers far
//!   away (across regions) reading large listings.
//! - `off`: every response is sent plain.

use std::task::{Context, Poll};

use http::HeaderValue;
use http::header::HeaderMap;
use serde::{Deserialize, Serialize};

const ACCEPT_ENCODING: &str = "grpc-accept-encoding";
const ENCODING: &str = "grpc-encoding";
/// The encodings a response may be compressed with (those the services are built to send).
const SENT_ENCODINGS: [&str; 2] = ["gzip", "deflate"];

/// Which responses are compressed; see the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseCompression {
    /// Compressed as the request was, when the caller accepts that encoding.
    #[default]
    Mirror,
    /// gzip whenever the caller accepts it.
    Gzip,
    /// Never compressed.
    Off,
}

impl ResponseCompression {
    /// The encoding the response to a request with `headers` is compressed with, if any.
    fn encoding_for(self, headers: &HeaderMap) -> Option<&'static str> {
        let wanted = match self {
            Self::Off => return None,
            Self::Gzip => "gzip",
            Self::Mirror => {
                let sent = headers.get(ENCODING)?.to_str().ok()?.trim();
                SENT_ENCODINGS.into_iter().find(|known| *known == sent)?
            }
        };
        let accepted = headers.get(ACCEPT_ENCODING)?.to_str().ok()?;
        accepted
            .split(',')
            .any(|encoding| encoding.trim() == wanted)
            .then_some(wanted)
    }
}

/// Rewrites each request's `grpc-accept-encoding` to the one encoding its response is to be
/// compressed with, or removes it, as `ResponseCompression` says (see the module docs).
#[derive(Debug, Clone)]
pub struct ResponseCompressionService<S> {
    inner: S,
    mode: ResponseCompression,
}

impl<S> ResponseCompressionService<S> {
    /// Wraps `inner`, deciding its responses' compression as `mode` says.
    pub fn new(inner: S, mode: ResponseCompression) -> Self {
        Self { inner, mode }
    }
}

impl<S, B> tower::Service<http::Request<B>> for ResponseCompressionService<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        match self.mode.encoding_for(request.headers()) {
            Some(encoding) => {
                request
                    .headers_mut()
                    .insert(ACCEPT_ENCODING, HeaderValue::from_static(encoding));
            }
            None => {
                request.headers_mut().remove(ACCEPT_ENCODING);
            }
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    http::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn mirror_compresses_as_the_request_was_when_accepted() {
        let mode = ResponseCompression::Mirror;
        let python = "identity,deflate,gzip";
        let cases = [
            (vec![(ACCEPT_ENCODING, python)], None),
            (
                vec![(ENCODING, "identity"), (ACCEPT_ENCODING, python)],
                None,
            ),
            (
                vec![(ENCODING, "gzip"), (ACCEPT_ENCODING, python)],
                Some("gzip"),
            ),
            (
                vec![(ENCODING, "deflate"), (ACCEPT_ENCODING, python)],
                Some("deflate"),
            ),
            (
                vec![(ENCODING, "gzip"), (ACCEPT_ENCODING, "identity")],
                None,
            ),
            (vec![(ENCODING, "gzip")], None),
            (
                vec![(ENCODING, "snappy"), (ACCEPT_ENCODING, "snappy")],
                None,
            ),
        ];
        for (pairs, expected) in cases {
            assert_eq!(mode.encoding_for(&headers(&pairs)), expected, "{pairs:?}");
        }
    }

    #[test]
    fn gzip_compresses_whenever_accepted_and_off_never() {
        let accepting = headers(&[(ACCEPT_ENCODING, "identity, gzip")]);
        let not_accepting = headers(&[(ACCEPT_ENCODING, "deflate")]);
        assert_eq!(
            ResponseCompression::Gzip.encoding_for(&accepting),
            Some("gzip")
        );
        assert_eq!(ResponseCompression::Gzip.encoding_for(&not_accepting), None);
        let compressed = headers(&[(ENCODING, "gzip"), (ACCEPT_ENCODING, "gzip")]);
        assert_eq!(ResponseCompression::Off.encoding_for(&compressed), None);
    }

    #[test]
    fn the_setting_reads_its_three_values() {
        #[derive(Deserialize)]
        struct Setting {
            value: ResponseCompression,
        }
        for (text, expected) in [
            ("mirror", ResponseCompression::Mirror),
            ("gzip", ResponseCompression::Gzip),
            ("off", ResponseCompression::Off),
        ] {
            let read: Setting = toml::from_str(&format!("value = {text:?}")).expect("reads");
            assert_eq!(read.value, expected);
        }
        assert!(toml::from_str::<Setting>("value = \"always\"").is_err());
    }
}
