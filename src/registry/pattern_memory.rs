//! An estimate, from above, of the memory a schema's compiled patterns take.
//!
//! A compiled pattern holds an automaton over UTF-8 bytes, and a Unicode class in it (`\p{L}`,
//! about 650 ranges of code points) takes hundreds of byte-level states; a repetition
//! `{n}` or `{m,n}` holds n copies of what it repeats. So `\p{L}{100}`, 11 bytes of schema,
//! compiled to about 5 MB: a 5 KB schema of 100 such patterns took 490 MB and 3.7 s to compile
//! (jsonschema 0.61, release build), within the regex crate's own limit on each pattern. At
//! registration that is memory taken for each such tool, and the validator cache, which keeps
//! 4096 validators whatever their size, could hold thousands of them.
//!
//! So each pattern is parsed (fancy-regex's parser, the one jsonschema compiles it with, and
//! regex-syntax for its character classes) and its automaton's size estimated without building
//! it: every class counts its byte sequences, every repetition multiplies what it repeats. A
//! schema whose patterns come to more than [`MAX_PATTERN_MEMORY`] is refused at registration,
//! before it is compiled; the validator cache weighs each validator by the estimate of its
//! schema (see [`super::validators`]).
//!
//! Written here because no crate estimates a pattern's compiled size before compiling it (the
//! regex crate bounds each pattern, not a schema's many).

use fancy_regex::Expr;
use regex_syntax::hir::{Class, HirKind};
use regex_syntax::utf8::Utf8Sequences;
use serde_json::Value;

use super::regex_cost::each_schema_pattern;

/// The bytes the estimate counts for each unit it finds (a literal byte, a UTF-8 sequence of a
/// class, a group or an assertion), over [`BYTES_PER_PATTERN`]: measured, the regex crate's
/// automaton and the engines built over it took less (`\p{L}{100}`: 4.9 MB for 82,700 units,
/// estimated 5.3 MB; `[a-z]{1,64}`: 14 KB, estimated 20 KB).
pub const BYTES_PER_UNIT: u64 = 64;

/// The bytes the estimate counts for every pattern, however small: a compiled pattern's
/// engines and their caches.
pub const BYTES_PER_PATTERN: u64 = 16 * 1024;

/// The most memory (estimated) a schema's compiled patterns may take: a pattern repeating
/// `\p{L}` 64 times fits, as do hundreds of ordinary patterns.
pub const MAX_PATTERN_MEMORY: u64 = 16 * 1024 * 1024;

/// The deepest the estimate follows a pattern's groups; deeper is counted as too large (the
/// regex crate refuses nesting past 250 levels anyway).
const MAX_DEPTH: usize = 250;

/// The estimated memory of the compiled patterns of `schema` (its `pattern` strings and
/// `patternProperties` keys, read as jsonschema reads them: ECMAScript, translated), in bytes.
/// A pattern that does not parse counts nothing: compiling it fails anyway.
pub fn schema_pattern_memory(schema: &Value) -> u64 {
    let mut total = 0u64;
    let summed = each_schema_pattern(schema, &mut |_, pattern| {
        total = total.saturating_add(pattern_memory(pattern));
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(()) = summed;
    total
}

/// The estimated memory of the schema's compiled patterns ([`schema_pattern_memory`]), or why
/// the schema is refused when it is more than [`MAX_PATTERN_MEMORY`], and what to write
/// instead.
pub fn check_pattern_memory(schema: &Value) -> Result<u64, String> {
    let memory = schema_pattern_memory(schema);
    if memory > MAX_PATTERN_MEMORY {
        // Saturated: repetitions multiplying past any size, or groups nested too deep to
        // follow.
        let about = match memory {
            u64::MAX => "far more".to_owned(),
            _ => format!("about {} MiB", memory.div_ceil(1 << 20)),
        };
        return Err(format!(
            "the schema's patterns would take {about} compiled, more than {} MiB: a Unicode \
             class such as \\p{{L}} compiles to about 50 KB, and a repetition holds as many \
             copies as it repeats (\\p{{L}}{{100}} about 5 MB); repeat less, or bound the \
             length with maxLength instead",
            MAX_PATTERN_MEMORY >> 20
        ));
    }
    Ok(memory)
}

/// The estimated memory of one compiled ECMAScript pattern, in bytes.
pub fn pattern_memory(pattern: &str) -> u64 {
    let Ok(translated) = jsonschema_regex::to_rust_regex(pattern) else {
        return 0;
    };
    match Expr::parse_tree(&translated) {
        Ok(tree) => units(&tree.expr, 0)
            .saturating_mul(BYTES_PER_UNIT)
            .saturating_add(BYTES_PER_PATTERN),
        Err(_) => 0,
    }
}

/// The units of `expr`'s automaton (see [`BYTES_PER_UNIT`]).
fn units(expr: &Expr, depth: usize) -> u64 {
    if depth > MAX_DEPTH {
        return u64::MAX;
    }
    match expr {
        Expr::Literal { val, casei } => (val.len() as u64).saturating_mul(1 + u64::from(*casei)),
        Expr::Delegate { inner, casei } => class_units(inner, *casei),
        // Any character but a newline: every UTF-8 sequence.
        Expr::Any { .. } => class_units(".", false),
        Expr::Repeat { child, lo, hi, .. } => {
            // `x{n,}` compiles to n copies and a loop; `x{m,n}` to n copies.
            let copies = if *hi == usize::MAX {
                lo.saturating_add(1)
            } else {
                *hi
            };
            units(child, depth + 1).saturating_mul(copies.max(1) as u64)
        }
        other => other
            .children_iter()
            .map(|child| units(child, depth + 1))
            .fold(1u64, u64::saturating_add),
    }
}

/// The units of a delegated class (or single character): its UTF-8 byte sequences, doubled
/// when case-insensitive (case folding adds ranges).
fn class_units(inner: &str, casei: bool) -> u64 {
    let Ok(hir) = regex_syntax::ParserBuilder::new()
        .case_insensitive(casei)
        .build()
        .parse(inner)
    else {
        return inner.len() as u64;
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|range| Utf8Sequences::new(range.start(), range.end()).count() as u64)
            .sum(),
        HirKind::Class(Class::Bytes(class)) => class.ranges().len() as u64,
        _ => inner.len() as u64,
    }
}

#[cfg(test)]
#[path = "pattern_memory_tests.rs"]
mod tests;
