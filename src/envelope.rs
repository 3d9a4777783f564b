//! The seed 000 envelope metadata: the domain [`RequestMeta`] read from a request's `pb::Meta`,
//! and the `pb::Meta` written on every response.

use std::fmt;
use std::time::SystemTime;

use crate::pb;

/// The longest correlation id accepted.
pub const MAX_CORRELATION_ID_LEN: usize = 128;

/// The tenant a request acts for. Every resource is scoped to one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TenantId(pub u64);

/// The request header naming the tenant where a request carries no envelope (grpc.health.v1
/// calls, the MCP endpoint).
pub const TENANT_HEADER: &str = "toolplane-tenant-id";

impl TenantId {
    /// The tenant a [`TENANT_HEADER`] value names: tenant 0 without the header, [`None`] when
    /// the value is not an unsigned integer.
    pub fn from_header(value: Option<&[u8]>) -> Option<Self> {
        match value {
            None => Some(Self::default()),
            Some(bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .map(Self),
        }
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a request's envelope tells the server: who is asking and which piece of work it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMeta {
    /// The tenant the request acts for.
    pub tenant: TenantId,
    /// The caller's correlation id, or a generated one.
    pub correlation_id: String,
}

/// An envelope that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// `meta.envelope_id` was set but is not a UUID.
    #[error("meta.envelope_id must be a UUID, got {}", crate::shown::shown(.0))]
    InvalidEnvelopeId(String),
    /// `meta.correlation_id` is too long or has characters outside printable ASCII.
    #[error(
        "meta.correlation_id must be at most {MAX_CORRELATION_ID_LEN} printable ASCII characters"
    )]
    InvalidCorrelationId,
    /// The [`TENANT_HEADER`] header was sent but is not an unsigned integer.
    #[error("header {TENANT_HEADER} must be an unsigned integer")]
    InvalidTenantHeader,
    /// The [`TENANT_HEADER`] header names another tenant than the envelope does.
    #[error(
        "header {TENANT_HEADER} names tenant {header}, but the envelope names tenant {envelope} \
         (meta.tenant_id; a request without meta is tenant 0): this API takes the tenant from \
         meta.tenant_id, so set it to {header}, or leave the header out"
    )]
    TenantHeaderDisagrees {
        /// The tenant the header names.
        header: TenantId,
        /// The tenant the envelope names.
        envelope: TenantId,
    },
}

impl RequestMeta {
    /// Reads the envelope of a request. A missing meta means tenant 0 and a generated
    /// correlation id.
    pub fn from_pb(meta: Option<&pb::Meta>) -> Result<Self, EnvelopeError> {
        let Some(meta) = meta else {
            return Ok(Self::new(TenantId::default(), None));
        };
        if !meta.envelope_id.is_empty() && uuid::Uuid::parse_str(&meta.envelope_id).is_err() {
            return Err(EnvelopeError::InvalidEnvelopeId(meta.envelope_id.clone()));
        }
        let correlation = meta.correlation_id.as_str();
        if correlation.len() > MAX_CORRELATION_ID_LEN
            || !correlation
                .bytes()
                .all(|b| b.is_ascii_graphic() || b == b' ')
        {
            return Err(EnvelopeError::InvalidCorrelationId);
        }
        Ok(Self::new(
            TenantId(meta.tenant_id),
            Some(correlation).filter(|c| !c.is_empty()),
        ))
    }

    /// Checks a [`TENANT_HEADER`] value sent with an enveloped request: a caller may send the
    /// header (as its grpc.health.v1 and MCP calls need it), but it must name the tenant the
    /// envelope does, so that no call acts for another tenant than its caller meant.
    pub fn check_tenant_header(&self, header: Option<&[u8]>) -> Result<(), EnvelopeError> {
        let Some(value) = header else {
            return Ok(());
        };
        let named = TenantId::from_header(Some(value)).ok_or(EnvelopeError::InvalidTenantHeader)?;
        if named == self.tenant {
            return Ok(());
        }
        Err(EnvelopeError::TenantHeaderDisagrees {
            header: named,
            envelope: self.tenant,
        })
    }

    /// A request meta for `tenant`, generating a correlation id when none is given.
    pub fn new(tenant: TenantId, correlation_id: Option<&str>) -> Self {
        Self {
            tenant,
            correlation_id: correlation_id
                .map(str::to_owned)
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        }
    }

    /// The meta of a response to this request: a new envelope id, the current time, the
    /// tenant, and the correlation id echoed.
    pub fn response(&self) -> pb::Meta {
        pb::Meta {
            envelope_id: uuid::Uuid::new_v4().to_string(),
            timestamp: Some(SystemTime::now().into()),
            tenant_id: self.tenant.0,
            correlation_id: self.correlation_id.clone(),
            extensions: None,
        }
    }
}

/// Builds the `pb::Meta` a client sends: a new envelope id, the current time, the tenant and
/// the correlation id.
pub fn request_meta(tenant: TenantId, correlation_id: &str) -> pb::Meta {
    RequestMeta::new(tenant, Some(correlation_id)).response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_meta_is_tenant_zero_with_a_generated_correlation_id() {
        let meta = RequestMeta::from_pb(None).expect("no meta is fine");
        assert_eq!(meta.tenant, TenantId(0));
        assert!(uuid::Uuid::parse_str(&meta.correlation_id).is_ok());
    }

    #[test]
    fn correlation_id_is_echoed_and_envelope_id_renewed() {
        let sent = request_meta(TenantId(7), "work-1");
        let meta = RequestMeta::from_pb(Some(&sent)).expect("valid meta");
        let answer = meta.response();
        assert_eq!(answer.correlation_id, "work-1");
        assert_eq!(answer.tenant_id, 7);
        assert_ne!(answer.envelope_id, sent.envelope_id);
    }

    #[test]
    fn a_tenant_header_must_name_the_envelopes_tenant() {
        let meta = RequestMeta::new(TenantId(4), None);
        assert_eq!(meta.check_tenant_header(None), Ok(()));
        assert_eq!(meta.check_tenant_header(Some(b"4")), Ok(()));
        assert_eq!(meta.check_tenant_header(Some(b" 4 ")), Ok(()));
        assert_eq!(
            meta.check_tenant_header(Some(b"3")),
            Err(EnvelopeError::TenantHeaderDisagrees {
                header: TenantId(3),
                envelope: TenantId(4)
            })
        );
        for junk in [&b"abc"[..], b"-1", b"", b"\xff"] {
            assert_eq!(
                meta.check_tenant_header(Some(junk)),
                Err(EnvelopeError::InvalidTenantHeader),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn bad_envelope_fields_are_rejected() {
        let mut sent = request_meta(TenantId(1), "ok");
        sent.envelope_id = "not-a-uuid".into();
        assert!(matches!(
            RequestMeta::from_pb(Some(&sent)),
            Err(EnvelopeError::InvalidEnvelopeId(_))
        ));
        let mut sent = request_meta(TenantId(1), "ok");
        sent.correlation_id = "tab\there".into();
        assert_eq!(
            RequestMeta::from_pb(Some(&sent)),
            Err(EnvelopeError::InvalidCorrelationId)
        );
    }
}
