//! Bounds on the work of reading a regular expression: the `pattern`s and `patternProperties`
//! of a registered schema, and input values of `"format": "regex"`.
//!
//! jsonschema (0.61) reads ECMAScript patterns with two routines whose work grows with the
//! square of a pattern's length for some patterns, and neither takes a bound:
//!
//! - its syntax check (`jsonschema_regex::is_valid_ecma_regex`, used for the `regex` format and
//!   for a schema's `pattern`s against the meta-schema) compares each named group's name with
//!   every name declared before it in the enclosing groups, and each `\k<name>` with every
//!   declared name: 40,000 named groups (430 KB) took 1.3 s of a core, and a 4 MiB input value
//!   would take minutes;
//! - its translation to the Rust engine (`jsonschema_regex::to_rust_regex`, at schema compile)
//!   parses the whole pattern again for each `\cX` control escape: a 60 KB pattern of them took
//!   8 s to compile, at each registration and each recompile of an evicted validator.
//!
//! No crate offers a bounded check, so the work is estimated here in one pass over the pattern,
//! from above, and a pattern past the bound is refused with a message saying why instead of
//! being read. Patterns people write (tens of named groups, a few control escapes) are far
//! below both bounds.

use serde_json::Value;

use crate::json::escape_pointer_token;
use crate::shown::{MAX_SHOWN_CHARS, clipped};

/// The most name comparisons (estimated from above: named groups times groups and name bytes,
/// plus named back-references times name bytes) the syntax check of one pattern may need,
/// about 2 ms of a core. Past it the pattern is refused unread.
pub const MAX_NAME_CHECK_STEPS: u64 = 1 << 20;

/// The most bytes the translation of one schema pattern may parse again: its `\cX` control
/// escapes times its length, about 30 ms of a core. Past it the pattern is refused.
pub const MAX_CONTROL_ESCAPE_STEPS: u64 = 1 << 22;

/// What one pass over a pattern counts.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    /// `(`s: each opens a group the syntax check keeps a frame for.
    groups: u64,
    /// `(?<name>` groups (not the look-behinds `(?<=` and `(?<!`).
    named_groups: u64,
    /// `\k<name>` back-references.
    named_references: u64,
    /// Bytes between those `<`s and their `>`s.
    name_bytes: u64,
    /// `\c` escapes followed by an ASCII letter.
    control_escapes: u64,
}

impl Counts {
    /// One pass over `pattern`. A backslash escapes the byte after it, so `\\(` and `\\k<` are
    /// taken as what they are; other places are counted as if they might be groups (inside a
    /// class, say), which only overestimates.
    fn of(pattern: &str) -> Self {
        let bytes = pattern.as_bytes();
        let mut counts = Self::default();
        let mut in_name = false;
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            if rest.starts_with(b"(?<") && !matches!(rest.get(3), Some(b'=' | b'!')) {
                counts.groups += 1;
                counts.named_groups += 1;
                in_name = true;
                i += 3;
                continue;
            }
            if rest.starts_with(b"\\k<") {
                counts.named_references += 1;
                in_name = true;
                i += 3;
                continue;
            }
            match bytes[i] {
                b'\\' => {
                    if rest.get(1) == Some(&b'c')
                        && rest.get(2).is_some_and(u8::is_ascii_alphabetic)
                    {
                        counts.control_escapes += 1;
                    }
                    // The escaped byte is not a group, a name's end or another escape.
                    if in_name {
                        counts.name_bytes += 2;
                    }
                    i += 2;
                    continue;
                }
                b'(' => counts.groups += 1,
                b'>' => in_name = false,
                _ if in_name => counts.name_bytes += 1,
                _ => {}
            }
            i += 1;
        }
        counts
    }

    /// An upper bound on the syntax check's name comparisons: each named group's name is
    /// compared with at most every open group's names (one step per group, one per name
    /// byte), and each reference with at most every declared name.
    fn name_check_steps(&self) -> u64 {
        let per_name = self.groups + self.named_groups + self.name_bytes;
        self.named_groups.saturating_mul(per_name).saturating_add(
            self.named_references
                .saturating_mul(self.named_groups + self.name_bytes),
        )
    }
}

/// Whether the syntax check of `pattern` stays within [`MAX_NAME_CHECK_STEPS`].
pub fn name_check_is_bounded(pattern: &str) -> bool {
    Counts::of(pattern).name_check_steps() <= MAX_NAME_CHECK_STEPS
}

/// The `regex` format: whether `value` is an ECMAScript regular expression, as jsonschema's
/// own check says, refusing unread one whose check would pass [`MAX_NAME_CHECK_STEPS`].
pub fn is_bounded_ecma_regex(value: &str) -> bool {
    name_check_is_bounded(value) && jsonschema_regex::is_valid_ecma_regex(value)
}

/// Why a `regex` format value [`is_bounded_ecma_regex`] refused was refused, when it was for
/// its cost: `None` for one refused as not a regular expression.
pub fn unbounded_regex_reason(value: &str) -> Option<String> {
    let counts = Counts::of(value);
    (counts.name_check_steps() > MAX_NAME_CHECK_STEPS).then(|| {
        format!(
            "the value is refused unread as a regex: with {} named groups among {} groups and \
             {} named back-references, checking its group names would take more than \
             {MAX_NAME_CHECK_STEPS} steps",
            counts.named_groups, counts.groups, counts.named_references
        )
    })
}

/// Refuses a schema with a `pattern` or `patternProperties` key past either bound, naming the
/// JSON pointer at fault. Every object of the schema is looked at (a `pattern` inside a
/// `const`, too), which can only refuse more.
pub fn check_schema_patterns(schema: &Value) -> Result<(), String> {
    each_schema_pattern(schema, &mut |pointer, pattern| {
        check_pattern(pattern, pointer)
    })
}

/// Calls `each` with the JSON pointer and the text of every pattern of `schema`: `pattern`
/// strings and `patternProperties` keys (a pointer's last token, the pattern itself, cut to
/// [`MAX_SHOWN_CHARS`]), wherever they are, until it fails.
pub(super) fn each_schema_pattern<E>(
    schema: &Value,
    each: &mut impl FnMut(&str, &str) -> Result<(), E>,
) -> Result<(), E> {
    let mut pointer = String::new();
    walk(schema, &mut pointer, each)
}

fn walk<E>(
    value: &Value,
    pointer: &mut String,
    each: &mut impl FnMut(&str, &str) -> Result<(), E>,
) -> Result<(), E> {
    let under = pointer.len();
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                pointer.push('/');
                pointer.push_str(&escape_pointer_token(key));
                match (key.as_str(), item) {
                    ("pattern", Value::String(pattern)) => each(pointer, pattern)?,
                    ("patternProperties", Value::Object(patterns)) => {
                        for pattern in patterns.keys() {
                            // The key is the pattern, which may be kilobytes long.
                            let key = escape_pointer_token(pattern);
                            let at = format!("{pointer}/{}", clipped(&key, MAX_SHOWN_CHARS));
                            each(&at, pattern)?;
                        }
                    }
                    _ => {}
                }
                walk(item, pointer, each)?;
                pointer.truncate(under);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                pointer.push('/');
                pointer.push_str(&index.to_string());
                walk(item, pointer, each)?;
                pointer.truncate(under);
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_pattern(pattern: &str, pointer: &str) -> Result<(), String> {
    let counts = Counts::of(pattern);
    if counts.name_check_steps() > MAX_NAME_CHECK_STEPS {
        return Err(format!(
            "at {pointer}: the pattern has {} named groups among {} groups and {} named \
             back-references; checking their names would take more than {MAX_NAME_CHECK_STEPS} \
             steps, so it is refused (use fewer named groups)",
            counts.named_groups, counts.groups, counts.named_references
        ));
    }
    let reparsed = counts.control_escapes.saturating_mul(pattern.len() as u64);
    if reparsed > MAX_CONTROL_ESCAPE_STEPS {
        return Err(format!(
            "at {pointer}: the pattern has {} \\cX control escapes in {} bytes, and compiling it \
             reads it again for each one (more than {MAX_CONTROL_ESCAPE_STEPS} bytes in all), so \
             it is refused; write control characters as \\xHH escapes instead (\\x01 for \\cA)",
            counts.control_escapes,
            pattern.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "regex_cost_tests.rs"]
mod tests;
