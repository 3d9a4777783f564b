//! W3C Trace Context: the caller's `traceparent` and `tracestate`, passed on to the provider
//! with the tool call, so that the provider's spans join the caller's trace. Without exported
//! spans they are passed on unchanged, as a proxy that takes no part in tracing passes them on
//! (Envoy forwards them the same way); with them, the parent sent is toolplane's own span
//! ([`crate::spans`]).
//!
//! A `traceparent` that is not one (W3C Trace Context, "traceparent Header Field Values") is
//! not passed on, and neither is the `tracestate` that came with it: the specification says a
//! receiver that cannot parse `traceparent` must not use `tracestate`. A `tracestate` longer
//! than [`MAX_TRACESTATE_BYTES`] is left out (the specification asks that at least 512
//! characters be propagated).

/// The longest `tracestate` passed on, in bytes.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A valid `traceparent`, and the `tracestate` that came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a call whose headers held these values; `None` without a valid
    /// `traceparent`.
    pub fn from_headers(traceparent: Option<&[u8]>, tracestate: Option<&[u8]>) -> Option<Self> {
        let traceparent = std::str::from_utf8(traceparent?).ok()?.trim();
        if !is_traceparent(traceparent) {
            return None;
        }
        let tracestate = tracestate
            .and_then(|state| std::str::from_utf8(state).ok())
            .map(str::trim)
            .filter(|state| !state.is_empty() && state.len() <= MAX_TRACESTATE_BYTES);
        Some(Self {
            traceparent: traceparent.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// The context of one of toolplane's own spans, whose `traceparent` the OpenTelemetry SDK
    /// made (valid by construction: not parsed again).
    pub(crate) fn of_own_span(traceparent: String, tracestate: Option<String>) -> Self {
        debug_assert!(is_traceparent(&traceparent), "{traceparent}");
        Self {
            traceparent,
            tracestate,
        }
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, if one came and is passed on.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id (32 lowercase hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }
}

/// Whether `value` is a trace id as [`TraceContext::trace_id`] gives it.
pub fn is_trace_id(value: &str) -> bool {
    is_hex(value, 32, true)
}

/// `n` lowercase hex digits, not all zero when `nonzero`.
fn is_hex(field: &str, n: usize, nonzero: bool) -> bool {
    field.len() == n
        && field
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        && !(nonzero && field.bytes().all(|byte| byte == b'0'))
}

/// Whether `value` is a `traceparent`: `version-traceid-parentid-flags`, version `00` exactly
/// so, a later version (not `ff`) with those four fields first and anything after a `-`.
fn is_traceparent(value: &str) -> bool {
    const VERSION_00_LEN: usize = 55;
    let Some(head) = value.get(..VERSION_00_LEN) else {
        return false;
    };
    let mut fields = head.split('-');
    let (Some(version), Some(trace_id), Some(parent_id), Some(flags), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return false;
    };
    let rest = &value[VERSION_00_LEN..];
    let rest_fits = match version {
        "00" => rest.is_empty(),
        _ => rest.is_empty() || rest.starts_with('-'),
    };
    is_hex(version, 2, false)
        && version != "ff"
        && is_hex(trace_id, 32, true)
        && is_hex(parent_id, 16, true)
        && is_hex(flags, 2, false)
        && rest_fits
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn parsed(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        TraceContext::from_headers(Some(traceparent.as_bytes()), tracestate.map(str::as_bytes))
    }

    #[test]
    fn a_valid_traceparent_is_kept_with_its_tracestate() {
        let context =
            parsed(VALID, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).expect("valid");
        assert_eq!(context.traceparent(), VALID);
        assert_eq!(
            context.tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
        assert!(
            parsed(later, None).is_some(),
            "a later version's extra fields"
        );
        assert_eq!(parsed(VALID, None).expect("valid").tracestate(), None);
    }

    #[test]
    fn what_is_not_a_traceparent_is_dropped_with_its_tracestate() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(parsed(bad, Some("congo=t61rcWkgMzE")), None, "{bad:?}");
        }
        assert_eq!(TraceContext::from_headers(None, Some(b"congo=x")), None);
        assert_eq!(
            TraceContext::from_headers(Some(&[0xff, 0xfe]), None),
            None,
            "not UTF-8"
        );
    }

    #[test]
    fn a_tracestate_past_the_bound_is_left_out() {
        let long = format!("congo={}", "a".repeat(MAX_TRACESTATE_BYTES));
        let context = parsed(VALID, Some(&long)).expect("the traceparent stays");
        assert_eq!(context.tracestate(), None);
        assert_eq!(parsed(VALID, Some("  ")).expect("valid").tracestate(), None);
    }
}
