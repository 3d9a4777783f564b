//! Checks of a call's input and output against the tool's registered schemas.

use serde_json::Value;

use super::error::InvokeError;
use crate::json::canonical_sha256;
use crate::registry::validate::{MAX_VIOLATION_BYTES, first_error, violation_message};
use crate::registry::{FieldViolation, ToolRef, ValidatorCache, ViolationKind};
use crate::shown::clipped;

/// What is learnt from an input before the tool is called.
#[derive(Debug)]
pub(super) struct Inspected {
    /// The sha256 of the input's canonical JSON, for the record.
    pub(super) input_sha256: String,
    /// The input checked against the tool's input schema (`Ok` when there was no tool).
    pub(super) checked: Result<(), InvokeError>,
}

/// Digests `input` and checks it against the schema of `found`, when the tool was found. Both
/// take time in proportion to the input, so the engine runs this off the serving threads for
/// a large one ([`super::heavy`]).
pub(super) fn inspect_input(
    validators: &ValidatorCache,
    found: Option<&ToolRef>,
    input: &Value,
) -> Inspected {
    Inspected {
        input_sha256: canonical_sha256(input),
        checked: found.map_or(Ok(()), |found| check_input(validators, found, input)),
    }
}

/// Checks `input` against the tool's input schema, with its validator from `validators`.
pub fn check_input(
    validators: &ValidatorCache,
    found: &ToolRef,
    input: &Value,
) -> Result<(), InvokeError> {
    let validator =
        validators
            .input(&found.tool)
            .map_err(|problem| InvokeError::SchemaUnavailable {
                tool: found.tool.name.to_string(),
                problem,
            })?;
    // The common case first: `is_valid` stops at the first failure and tracks no locations.
    if validator.is_valid(input) {
        return Ok(());
    }
    // The first error only (`first_error` says why).
    match first_error(&validator, input) {
        None => Ok(()),
        Some(error) => Err(InvokeError::InvalidInput {
            tool: found.tool.name.to_string(),
            violations: vec![FieldViolation::new(
                format!("input{}", error.instance_path()),
                ViolationKind::Field,
                violation_message(&error),
            )],
        }),
    }
}

/// What is learnt from a provider's output before it is passed on.
#[derive(Debug)]
pub(super) struct InspectedOutput {
    /// The output itself, handed back.
    pub(super) output: Value,
    /// The sha256 of the output's canonical JSON, for the record.
    pub(super) output_sha256: String,
    /// Its mismatches with the tool's output schema.
    pub(super) warnings: Vec<String>,
    /// Whether it matches the tool's output schema (true when there is none, or it could not
    /// be checked).
    pub(super) conforms: bool,
}

/// Digests `output` and checks it against the tool's output schema; like
/// [`inspect_input`], off the serving threads for a large one.
pub(super) fn inspect_output(
    validators: &ValidatorCache,
    found: &ToolRef,
    output: Value,
) -> InspectedOutput {
    let (warnings, conforms) = output_warnings(validators, found, &output);
    InspectedOutput {
        output_sha256: canonical_sha256(&output),
        warnings,
        conforms,
        output,
    }
}

/// The output's mismatches with the tool's output schema, as warnings (the output is passed
/// on all the same), and whether it matches.
fn output_warnings(
    validators: &ValidatorCache,
    found: &ToolRef,
    output: &Value,
) -> (Vec<String>, bool) {
    let validator = match validators.output(&found.tool) {
        None => return (Vec::new(), true),
        Some(Ok(validator)) => validator,
        Some(Err(problem)) => return (vec![format!("output not checked: {problem}")], true),
    };
    if validator.is_valid(output) {
        return (Vec::new(), true);
    }
    // The first mismatch only (`first_error` says why).
    let mismatches = first_error(&validator, output)
        .into_iter()
        .map(|error| {
            // The path names the output's keys, which may be of any length: cut, as the
            // message is, so the warnings stay small beside the output in the answer.
            let path = error.instance_path().to_string();
            let path = if path.is_empty() {
                "/".into()
            } else {
                clipped(&path, MAX_VIOLATION_BYTES)
            };
            format!(
                "output does not match the output_schema at {path}: {}",
                violation_message(&error)
            )
        })
        .collect();
    (mismatches, false)
}
