//! A provider's answer as [`super::unary_client`] reads it: its message's bytes, the
//! `grpc-status` it ends with, and the message decoded.
//!
//! An answer's message usually arrives in one DATA frame; [`AnswerBytes`] keeps that frame as
//! it came and copies only when more follow. For the status, tonic's `Status::from_header_map`
//! does the parsing, with two things around it. An OK status, how nearly every call ends, is
//! recognised from its one header, without building a `Status` (which copies the whole header
//! map). And a `grpc-status-details-bin` that is not base64 is dropped before tonic reads the
//! headers, because tonic panics on one (an `expect` in `from_header_map`), and nothing a
//! provider sends may panic toolplane.

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use bytes::{Buf, Bytes, BytesMut};
use h2::client::SendRequest;
use http::HeaderMap;
use http::header::HeaderName;
use prost::Message;
use tonic::{Code, Status};

use super::stream_errors::transport;
use super::unary_calls::{Calls, FinishedStream};

/// The largest answer accepted from a provider: 4 MiB (tonic's default decoding limit, and
/// every gRPC client's) less the room toolplane's own answer needs around the output (its
/// envelope, the call's record, output-schema warnings). A provider's answer of 4 MiB passed on
/// was past what the caller's client reads: refused there (OUT_OF_RANGE) after the call was
/// recorded SUCCEEDED.
const MAX_MESSAGE: usize = super::page_bytes::MAX_ANSWER_ITEM_BYTES;
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// The base64 tonic reads `grpc-status-details-bin` with: standard alphabet, padding optional.
const DETAILS_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The bytes of an answer's DATA frames, in order.
#[derive(Debug, Default)]
pub(super) enum AnswerBytes {
    /// No frame yet.
    #[default]
    Empty,
    /// One frame, as it came.
    One(Bytes),
    /// More than one, copied together.
    Joined(BytesMut),
}

impl AnswerBytes {
    /// How many bytes have come.
    pub(super) fn len(&self) -> usize {
        match self {
            Self::Empty => 0,
            Self::One(bytes) => bytes.len(),
            Self::Joined(bytes) => bytes.len(),
        }
    }

    /// Adds the next frame.
    pub(super) fn push(&mut self, frame: Bytes) {
        match std::mem::take(self) {
            Self::Empty => *self = Self::One(frame),
            Self::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + frame.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&frame);
                *self = Self::Joined(joined);
            }
            Self::Joined(mut joined) => {
                joined.extend_from_slice(&frame);
                *self = Self::Joined(joined);
            }
        }
    }

    /// All the bytes.
    pub(super) fn into_bytes(self) -> Bytes {
        match self {
            Self::Empty => Bytes::new(),
            Self::One(bytes) => bytes,
            Self::Joined(bytes) => bytes.freeze(),
        }
    }
}

/// What `headers` (an answer's headers or trailers) say about the call: `None` when they
/// carry no `grpc-status`, `Ok` for OK, the status otherwise.
pub(super) fn answer_status(headers: &HeaderMap) -> Option<Result<(), Status>> {
    let code = headers.get(GRPC_STATUS)?;
    if code.as_bytes() == b"0" {
        return Some(Ok(()));
    }
    let status = match headers.get(GRPC_STATUS_DETAILS) {
        Some(details) if DETAILS_BASE64.decode(details.as_bytes()).is_err() => {
            let mut readable = headers.clone();
            readable.remove(GRPC_STATUS_DETAILS);
            let status = Status::from_header_map(&readable)?;
            Status::with_metadata(
                status.code(),
                format!(
                    "{} (the provider's grpc-status-details-bin is not base64 and was dropped)",
                    status.message()
                ),
                status.metadata().clone(),
            )
        }
        _ => Status::from_header_map(headers)?,
    };
    Some(if status.code() == Code::Ok {
        Ok(())
    } else {
        Err(status)
    })
}

/// Reads a unary answer to its end: its message, or the status it ended with.
pub(super) async fn read_answer<Resp: Message + Default>(
    answer: http::Response<h2::RecvStream>,
    sender: SendRequest<Bytes>,
    request_body: h2::SendStream<Bytes>,
    calls: &Calls,
) -> Result<Resp, Status> {
    let (parts, mut body) = answer.into_parts();
    // A trailers-only answer (an error) carries its status in the headers.
    if let Some(status) = answer_status(&parts.headers) {
        status?;
        return Err(Status::internal(
            "the provider answered OK without a message",
        ));
    }
    if parts.status != http::StatusCode::OK {
        return Err(from_http_status(parts.status));
    }
    let mut message = AnswerBytes::default();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(transport)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if message.len() + chunk.len() > MAX_MESSAGE + 5 {
            // OUT_OF_RANGE, as tonic answers for a message over its decoding limit.
            return Err(Status::out_of_range(format!(
                "the provider's answer is larger than {MAX_MESSAGE} bytes (4 MiB, what gRPC \
                 clients read, less room for toolplane's answer around it)"
            )));
        }
        message.push(chunk);
    }
    let trailers = body.trailers().await.map_err(transport)?;
    // The stream has ended both ways (see `Calls` for where its handles go).
    calls.finish(FinishedStream::new(sender, request_body, body));
    match trailers {
        Some(trailers) => {
            answer_status(&trailers).ok_or_else(|| {
                Status::unknown("the provider's answer ended without a grpc-status")
            })??;
        }
        None => {
            return Err(Status::unknown(
                "the provider's answer ended without trailers",
            ));
        }
    }
    unframe(message.into_bytes())
}

/// The one message of a unary answer.
pub(super) fn unframe<Resp: Message + Default>(mut body: Bytes) -> Result<Resp, Status> {
    if body.len() < 5 {
        return Err(Status::internal(
            "the provider answered OK without a message",
        ));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::internal(
            "the provider compressed its answer, which was not asked for",
        ));
    }
    if len != body.len() {
        return Err(Status::internal(format!(
            "the provider's answer is framed as {len} bytes but carries {}",
            body.len()
        )));
    }
    Resp::decode(body).map_err(|error| {
        Status::internal(format!("the provider's answer does not decode: {error}"))
    })
}

/// The status of an answer that is not HTTP 200 and has no grpc-status
/// (http-grpc-status-mapping.md).
pub(super) fn from_http_status(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("the provider answered HTTP {status}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_headers::headers;
    use base64::engine::general_purpose::STANDARD;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn frames_are_kept_as_they_came_and_joined_in_order() {
        let mut answer = AnswerBytes::default();
        assert_eq!(answer.len(), 0);
        let first = Bytes::from_static(b"abc");
        answer.push(first.clone());
        assert_eq!(answer.len(), 3);
        let AnswerBytes::One(kept) = &answer else {
            panic!("one frame is kept whole: {answer:?}");
        };
        assert_eq!(kept.as_ptr(), first.as_ptr(), "not copied");
        answer.push(Bytes::from_static(b"de"));
        answer.push(Bytes::from_static(b"f"));
        assert_eq!(answer.len(), 6);
        assert_eq!(answer.into_bytes(), Bytes::from_static(b"abcdef"));
        assert!(AnswerBytes::default().into_bytes().is_empty());
    }

    #[test]
    fn no_status_ok_and_errors_read_as_tonic_reads_them() {
        assert!(answer_status(&headers(&[("content-type", "application/grpc")])).is_none());
        assert!(matches!(
            answer_status(&headers(&[("grpc-status", "0")])),
            Some(Ok(()))
        ));
        assert!(matches!(
            answer_status(&headers(&[("grpc-status", "0"), ("grpc-message", "fine")])),
            Some(Ok(()))
        ));

        let details = Status::with_error_details(
            Code::FailedPrecondition,
            "not yet",
            ErrorDetails::with_error_info("NOT_READY", "provider.example", []),
        );
        let mut sent = HeaderMap::new();
        details.add_header(&mut sent).expect("a status as headers");
        let read = answer_status(&sent).expect("a status").expect_err("not OK");
        assert_eq!(read.code(), Code::FailedPrecondition);
        assert_eq!(read.message(), "not yet");
        let info = read
            .get_error_details()
            .error_info()
            .cloned()
            .expect("ErrorInfo");
        assert_eq!(info.reason, "NOT_READY");
    }

    #[test]
    fn details_that_are_not_base64_are_dropped_not_panicked_on() {
        let bad = headers(&[
            ("grpc-status", "14"),
            ("grpc-message", "busy"),
            ("grpc-status-details-bin", "%%% not base64 %%%"),
            ("x-provider", "p1"),
        ]);
        let read = answer_status(&bad).expect("a status").expect_err("not OK");
        assert_eq!(read.code(), Code::Unavailable);
        assert!(read.message().starts_with("busy ("), "{}", read.message());
        assert!(read.message().contains("not base64"), "{}", read.message());
        assert!(read.details().is_empty());
        assert_eq!(
            read.metadata().get("x-provider").map(|v| v.to_str().ok()),
            Some(Some("p1")),
            "the other headers are kept"
        );

        // Good details without padding are read, as tonic reads them.
        let unpadded = STANDARD
            .encode(b"\x08\x01")
            .trim_end_matches('=')
            .to_owned();
        let read = answer_status(&headers(&[
            ("grpc-status", "14"),
            ("grpc-status-details-bin", &unpadded),
        ]))
        .expect("a status")
        .expect_err("not OK");
        assert_eq!(read.details(), b"\x08\x01");
    }
}
