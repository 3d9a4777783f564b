//! The `grpc-timeout` request header (gRPC over HTTP/2): reading a caller's deadline and
//! writing one for a call.

use std::time::Duration;

/// Reads the caller's deadline from the `grpc-timeout` header (e.g. `1500m`, `2S`).
pub fn caller_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    timeout_of(metadata.get("grpc-timeout")?.as_encoded_bytes())
}

/// Reads a `grpc-timeout` header's value; `None` when it is not one.
pub fn timeout_of(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A `grpc-timeout` header value (at most 8 digits and a unit, per the gRPC HTTP/2 spec).
pub fn grpc_timeout(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let millis = timeout.as_millis();
    if millis <= MAX {
        format!("{}m", millis.max(1))
    } else {
        format!("{}S", timeout.as_secs().min(MAX as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_deadlines_read_back() {
        for timeout in [
            Duration::from_millis(1),
            Duration::from_millis(1500),
            Duration::from_secs(3600),
        ] {
            let mut metadata = tonic::metadata::MetadataMap::new();
            metadata.insert(
                "grpc-timeout",
                grpc_timeout(timeout).parse().expect("ascii"),
            );
            assert_eq!(caller_timeout(&metadata), Some(timeout));
        }
        let mut odd = tonic::metadata::MetadataMap::new();
        odd.insert("grpc-timeout", "5x".parse().expect("ascii"));
        assert_eq!(caller_timeout(&odd), None);
        assert_eq!(caller_timeout(&tonic::metadata::MetadataMap::new()), None);
    }
}
