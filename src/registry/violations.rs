//! What a failed validation of a value says: the validator's words, kept short enough for a
//! status's trailer, and plain words where the validator's would mislead.

use super::regex_cost::unbounded_regex_reason;
use super::stop_check::without_stop_checks;
use super::validate::PATTERN_BACKTRACK_LIMIT;
use crate::shown::{clipped, shown_json};

/// The most bytes of a violation's message: a value or a schema's keyword it repeats (an
/// `enum`'s values, a `pattern`) is cut short past them.
pub const MAX_VIOLATION_BYTES: usize = 512;

/// The first error of `value` against `validator`, if it has one. Only the first: `jsonschema`
/// finds every error of a value before it yields any (its `iter_errors` is not lazy), about
/// 340 bytes each, and one error can hold thousands (an `anyOf`'s holds each branch's). Asked
/// for the first 20 errors, a 4 MB array of 2 million wrong items took 680 MB and half a
/// second, and a 4 KB array of 1,000 strings against an `anyOf` of 4,500 constants 1.9 GB and
/// 2.5 s, and 1,000 empty objects (3 KB) against a `required` list of 300 names 114 MB
/// (release builds; an error per name missing from each). `validate` stops at the first error,
/// as `is_valid` stops at the first failure (and at a check of work given up,
/// [`super::stop_check`]).
pub fn first_error<'v>(
    validator: &'v jsonschema::Validator,
    value: &'v serde_json::Value,
) -> Option<jsonschema::ValidationError<'v>> {
    validator.validate(value).err()
}

/// What a validation error says about a value: the validator's own words, the value repeated
/// only as far as [`shown_json`] shows it (a value of megabytes is not written out again), and
/// cut at [`MAX_VIOLATION_BYTES`]; except for a pattern stopped at [`PATTERN_BACKTRACK_LIMIT`],
/// which the validator reports only as an engine error, and a `regex` format value refused
/// unread for its cost ([`super::regex_cost`]).
pub fn violation_message(error: &jsonschema::ValidationError<'_>) -> String {
    if let jsonschema::error::ValidationErrorKind::Format { format } = error.kind()
        && format == "regex"
        && let Some(reason) = error.instance().as_str().and_then(unbounded_regex_reason)
    {
        return reason;
    }
    match error.kind() {
        // The one message that quotes a subschema: as its author wrote it, without the
        // compiled copy's stop checks (the validator's own words otherwise).
        jsonschema::error::ValidationErrorKind::Not { schema } => {
            let message = format!(
                "{} is not allowed for {}",
                without_stop_checks(schema),
                shown_json(error.instance())
            );
            clipped(&message, MAX_VIOLATION_BYTES).into_owned()
        }
        jsonschema::error::ValidationErrorKind::BacktrackLimitExceeded { .. } => format!(
            "the schema's pattern needed more than {PATTERN_BACKTRACK_LIMIT} backtracking steps \
             on this value, so it is refused (a pattern with look-around or back-references that \
             backtracks this much should be rewritten)"
        ),
        _ => {
            let value = shown_json(error.instance());
            let message = if value.ends_with("...") {
                error.masked_with(value).to_string()
            } else {
                error.to_string()
            };
            clipped(&message, MAX_VIOLATION_BYTES).into_owned()
        }
    }
}
