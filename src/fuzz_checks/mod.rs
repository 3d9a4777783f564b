//! Checks of toolplane's readers of untrusted input, each run on one input of arbitrary
//! bytes: the bodies of the coverage-guided fuzz targets in `fuzz/` (run with `cargo fuzz`,
//! see `fuzz/README.md`), and of the unit test that runs every input kept in `fuzz/seeds/`
//! (the starting inputs, and each input a fuzzer once failed on) on every `cargo test`.
//!
//! A check panics when the reader breaks a promise, and returns quietly otherwise (bytes that
//! do not form its kind of input are skipped).

mod config_file;
mod headers;
mod mcp_listings;
mod model_answers;
mod wire;

pub use config_file::config_file;
pub use headers::request_headers;
pub use mcp_listings::mcp_listings;
pub use model_answers::model_answers;
pub use wire::wire_readers;

use serde_json::Value;

use crate::json::{canonical_json, canonical_sha256, sha256_hex};
use crate::registry::compile::jsonschema_options;
use crate::registry::model::{ServiceName, ToolName};
use crate::registry::search::SearchQuery;
use crate::registry::search_terms::plain_words;
use crate::registry::taxonomy::{
    MAX_LABELS, check_label, infer_categories, infer_domains, primary_domain,
};
use crate::registry::validate::{
    RegistrationLimits, compile_schema, first_error, validator_options, violation_message,
};

/// A tool's JSON Schema as a registration brings it, and an input checked against it: the
/// bytes are `SCHEMA\0INPUT`, each JSON (the input `{}` without a NUL). Registering
/// (`compile_schema`: the limits, the compile, the evaluation-cost check) and validating
/// (every violation's message) must not panic, whatever the schema; a fuzzer's timeout
/// catches one that takes too long. And the compiled schema, which carries stop checks
/// (`registry::stop_check`), answers as the schema compiled without them: valid or not, and
/// the same first violation; and valid or not as with `jsonschema`'s own `uniqueItems` in place
/// of toolplane's (`registry::unique_items`; the first violation may differ where an array
/// breaks `uniqueItems` and another keyword, since a custom keyword is applied last).
pub fn schema_registration(data: &[u8]) {
    let (schema, input) = match data.iter().position(|&byte| byte == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(schema) = serde_json::from_slice::<Value>(schema) else {
        return;
    };
    let Ok(validator) = compile_schema(&schema, &RegistrationLimits::default()) else {
        return;
    };
    let Ok(input) = serde_json::from_slice::<Value>(input) else {
        return;
    };
    let (options, _) = validator_options(&schema);
    let plain = options
        .build(&schema)
        .expect("it compiled with stop checks");
    assert_eq!(validator.is_valid(&input), plain.is_valid(&input));
    // What a refusal reports: the first error (every error, `iter_errors`, can take
    // gigabytes: `first_error`).
    let reported = |validator: &jsonschema::Validator| {
        first_error(validator, &input)
            .map(|error| (error.instance_path().to_string(), violation_message(&error)))
    };
    assert_eq!(reported(&validator), reported(&plain));
    let (options, _) = jsonschema_options(&schema);
    let theirs = options
        .build(&schema)
        .expect("it compiled with toolplane's uniqueItems");
    assert_eq!(validator.is_valid(&input), theirs.is_valid(&input));
}

/// Canonical JSON, which every record's and definition's hash is taken over: for any JSON
/// value, its canonical text reads back as the same value, is its own canonical text, and is
/// what `canonical_sha256` hashes. Also the size worked out for its protobuf `Value` (which
/// bounds MCP outputs) is what prost encodes.
pub fn canonical_json_round_trip(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    assert_eq!(
        crate::json::value_encoded_len(&value),
        prost::Message::encoded_len(&crate::json::json_to_value(&value))
    );
    let canonical = canonical_json(&value);
    let again: Value = serde_json::from_str(&canonical)
        .unwrap_or_else(|error| panic!("{canonical:?} does not read back: {error}"));
    assert_eq!(again, value, "{canonical:?}");
    assert_eq!(canonical_json(&again), canonical);
    assert_eq!(canonical_sha256(&value), sha256_hex(canonical.as_bytes()));
}

/// What toolplane reads out of names and search text: `SERVICE\0TOOL` (UTF-8), as a
/// registration names them, and the tool part as a search query. Reading a query never
/// panics, and the domains and categories inferred for names a registration accepts are
/// always labels a provider could declare (what `ListTools`' filters and the MCP metadata
/// are written with).
pub fn names_and_queries(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (service, tool) = text.split_once('\0').unwrap_or((text, text));
    let _ = SearchQuery::parse(tool);
    let _ = plain_words(tool);
    let _ = primary_domain(service);
    if ServiceName::parse(service).is_err() || ToolName::parse(tool).is_err() {
        return;
    }
    for (kind, labels) in [
        ("domains", infer_domains(service, tool)),
        ("categories", infer_categories(service, tool)),
    ] {
        assert!(
            labels.len() <= MAX_LABELS,
            "{service:?} {tool:?}: {kind} {labels:?}"
        );
        for label in &labels {
            if let Err(problem) = check_label(label) {
                panic!("{service:?} {tool:?}: inferred {kind} {label:?}: {problem}");
            }
        }
    }
}

/// The invocation record files, as a start reads the current one back and `audit verify`
/// reads any: the bytes are `EDIT` (3 bytes: a position, little-endian, and a byte) then
/// `LINES`. Reading the lines never panics, and:
/// - a line is taken as its record's exactly when writing the record out gives the line and
///   its hash (the check from the line is the record's definition), and a canonical line's
///   sequence, id key and tenant, read from its bytes for the rotated files' checkpoints and
///   indexes, are its record's;
/// - a start's reading back (its lines checked in batches on a pool) names the same first bad
///   line as `audit verify`, with the same problem, keeps the latest records, and notes the
///   id and tenant of every canonical line, for the lines as given and for the records they
///   hold chained again as the log writes them;
/// - in that chain, one byte edited (at `EDIT`'s position, modulo the chain's length) is
///   found at its line by both, and nothing is found when the byte is the same.
pub fn record_lines(data: &[u8]) {
    crate::invoke::record_lines_check::record_lines(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check of one input.
    type Check = fn(&[u8]);

    /// Every check, by the name of its fuzz target (and of its folder in `fuzz/seeds/`).
    const CHECKS: [(&str, Check); 9] = [
        ("schema_registration", schema_registration),
        ("wire_readers", wire_readers),
        ("canonical_json", canonical_json_round_trip),
        ("names_and_queries", names_and_queries),
        ("request_headers", request_headers),
        ("config_file", config_file),
        ("model_answers", model_answers),
        ("mcp_listings", mcp_listings),
        ("record_lines", record_lines),
    ];

    /// Every input kept in `fuzz/seeds/` passes its check: the starting inputs, and each
    /// input a fuzzer failed on once (kept so that the fault stays fixed).
    #[test]
    fn the_kept_fuzz_inputs_pass_their_checks() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        for (name, check) in CHECKS {
            let folder = seeds.join(name);
            let mut inputs = 0;
            for entry in std::fs::read_dir(&folder).expect("each check has a seeds folder") {
                let path = entry.expect("listed").path();
                let data = std::fs::read(&path).expect("readable");
                let outcome = std::panic::catch_unwind(|| check(&data));
                assert!(outcome.is_ok(), "{}: failed its check", path.display());
                inputs += 1;
            }
            assert!(inputs > 0, "{}: no inputs", folder.display());
        }
    }
}
