//! A caller's value as an error message repeats it: whole when short, else its start and its
//! size. A status's message travels in the `grpc-message` trailer, and gRPC clients bound their
//! trailers to a few KB (gRPC core's default is 8 KB of metadata in all), so a message that
//! repeated a 100 KB field whole would reach the caller as a transport error, not as the
//! `INVALID_ARGUMENT` that says what to fix.

/// The most characters of a value repeated whole.
pub const MAX_SHOWN_CHARS: usize = 64;

/// `value` quoted (as `{:?}` quotes it) when it has at most [`MAX_SHOWN_CHARS`] characters,
/// else its first [`MAX_SHOWN_CHARS`] quoted, then `...` and its size in bytes.
pub fn shown(value: &str) -> String {
    match value.char_indices().nth(MAX_SHOWN_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &value[..cut], value.len()),
    }
}

/// `text` when it has at most `max_bytes` bytes, else as many of its first bytes as end on a
/// character's boundary followed by `... (N bytes in all)`.
pub fn clipped(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes in all)", &text[..cut], text.len()).into()
}

/// `value`'s JSON text when it has at most [`MAX_SHOWN_CHARS`] characters, else its first
/// [`MAX_SHOWN_CHARS`] followed by `...`; a large value is not written out whole to find this.
pub fn shown_json(value: &serde_json::Value) -> String {
    /// Keeps what is written up to its limit, then refuses more, which stops the writing.
    struct Limited(Vec<u8>);
    impl std::io::Write for Limited {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = (MAX_SHOWN_CHARS * 4 + 4).saturating_sub(self.0.len());
            if room == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            let taken = buf.len().min(room);
            self.0.extend_from_slice(&buf[..taken]);
            Ok(taken)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut written = Limited(Vec::new());
    let whole = serde_json::to_writer(&mut written, value).is_ok();
    let text = String::from_utf8_lossy(&written.0);
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        None if whole => text.into_owned(),
        None => format!("{text}..."),
        Some((cut, _)) => format!("{}...", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_shown_whole_and_long_ones_cut_with_their_size() {
        assert_eq!(shown("lease-1"), "\"lease-1\"");
        let longest = "é".repeat(MAX_SHOWN_CHARS);
        assert_eq!(shown(&longest), format!("{longest:?}"));
        let long = format!("{longest}x{}", "y".repeat(100_000));
        assert_eq!(
            shown(&long),
            format!("{longest:?}... ({} bytes)", long.len())
        );
        assert_eq!(shown("a\"b\n"), "\"a\\\"b\\n\"");
    }

    #[test]
    fn text_is_clipped_with_its_size() {
        assert_eq!(clipped("short", 10), "short");
        assert_eq!(
            clipped("0123456789ab", 10),
            "0123456789... (12 bytes in all)"
        );
        assert_eq!(clipped("éé", 3), "é... (4 bytes in all)");
    }

    #[test]
    fn json_is_shown_whole_when_short_and_cut_when_long() {
        assert_eq!(
            shown_json(&serde_json::json!({"a": [1, 2]})),
            r#"{"a":[1,2]}"#
        );
        let long = serde_json::json!({"a": "x".repeat(1_000_000)});
        let shown = shown_json(&long);
        assert_eq!(
            shown,
            format!("{{\"a\":\"{}...", "x".repeat(MAX_SHOWN_CHARS - 6))
        );
        let exactly = serde_json::Value::from("y".repeat(MAX_SHOWN_CHARS - 2));
        assert_eq!(shown_json(&exactly), exactly.to_string());
    }
}
