//! Compiling a tool's JSON Schema: within the registration limits, its patterns bounded, its
//! cost of validation checked, and stop checks added ([`super::stop_check`]).

use serde_json::Value;

use super::pattern_memory::check_pattern_memory;
use super::regex_cost::{check_schema_patterns, is_bounded_ecma_regex};
use super::schema_cost::check_evaluation_cost;
use super::stop_check::{self, with_stop_checks};
use super::unique_items;
use super::validate::{MAX_VIOLATION_BYTES, PATTERN_BACKTRACK_LIMIT, RegistrationLimits};
use crate::json::nesting_depth;
use crate::shown::clipped;

/// Compiles a JSON Schema: Draft 7 unless it names another draft in `$schema`, no external
/// references, within the size and depth limits, patterns bounded by
/// [`PATTERN_BACKTRACK_LIMIT`] and read within [`super::regex_cost`]'s bounds (as are values of
/// the `regex` format), and no value's validation evaluating more than
/// [`super::schema_cost::MAX_EVALUATIONS_PER_VALUE`] subschemas. Its validations stop when
/// the work they are part of is given up ([`super::stop_check`]). The error names the JSON
/// pointer at fault, or the place in the input whose validation costs too much.
pub fn compile_schema(
    schema: &Value,
    limits: &RegistrationLimits,
) -> Result<jsonschema::Validator, String> {
    let (validator, draft, _) = compile_within_limits(schema, limits)?;
    check_evaluation_cost(schema, draft)?;
    Ok(validator)
}

/// Compiles the schema of a registered tool again (for [`super::ValidatorCache`]): as
/// [`compile_schema`] does, less the check of its cost, which the same text passed at
/// registration; with the estimated memory of its compiled patterns.
pub(super) fn recompile_registered_schema(
    schema: &Value,
    limits: &RegistrationLimits,
) -> Result<(jsonschema::Validator, u64), String> {
    compile_within_limits(schema, limits).map(|(validator, _, memory)| (validator, memory))
}

/// Compiles `schema` within `limits`, with the draft it is compiled in and the estimated
/// memory of its compiled patterns.
fn compile_within_limits(
    schema: &Value,
    limits: &RegistrationLimits,
) -> Result<(jsonschema::Validator, jsonschema::Draft, u64), String> {
    let size = serde_json::to_vec(schema)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX);
    if size > limits.max_schema_bytes {
        return Err(format!(
            "schema is {size} bytes; at most {} are allowed",
            limits.max_schema_bytes
        ));
    }
    let depth = nesting_depth(schema);
    if depth > limits.max_schema_depth {
        return Err(format!(
            "schema nests {depth} levels deep; at most {} are allowed",
            limits.max_schema_depth
        ));
    }
    if !schema.is_object() {
        return Err("schema must be a JSON object".to_owned());
    }
    check_schema_patterns(schema)?;
    let memory = check_pattern_memory(schema)?;
    let (options, draft) = validator_options(schema);
    let options = options.with_keyword(stop_check::KEYWORD, stop_check::stop_check);
    let validator = options.build(&with_stop_checks(schema)).map_err(|error| {
        let pointer = error.instance_path().to_string();
        let at = if pointer.is_empty() { "/".to_owned() } else { pointer };
        let message = clipped(&error.to_string(), MAX_VIOLATION_BYTES).into_owned();
        if message.contains("retriev") || message.contains("Unresolvable") || message.contains("not present") {
            format!("at {at}: external $ref is not allowed, only references inside the schema ({message})")
        } else {
            format!("at {at}: {message}")
        }
    })?;
    Ok((validator, draft, memory))
}

/// How toolplane compiles `schema` (less its stop checks, [`super::stop_check`]), and the
/// draft: Draft 7 unless it names another in `$schema`; `uniqueItems` is checked by
/// [`super::unique_items`].
pub fn validator_options(
    schema: &Value,
) -> (jsonschema::ValidationOptions<'static>, jsonschema::Draft) {
    let (options, draft) = jsonschema_options(schema);
    (
        options.with_keyword(unique_items::KEYWORD, unique_items::unique_items),
        draft,
    )
}

/// [`validator_options`] with `jsonschema`'s own `uniqueItems` (to check that toolplane's
/// answers as it does).
pub fn jsonschema_options(
    schema: &Value,
) -> (jsonschema::ValidationOptions<'static>, jsonschema::Draft) {
    let options = jsonschema::options()
        .offline()
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex().backtrack_limit(PATTERN_BACKTRACK_LIMIT),
        )
        .with_format("regex", is_bounded_ecma_regex);
    match schema.get("$schema") {
        None => (
            options.with_draft(jsonschema::Draft::Draft7),
            jsonschema::Draft::Draft7,
        ),
        Some(_) => (options, jsonschema::Draft::default().detect(schema)),
    }
}
