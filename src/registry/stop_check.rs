//! Validation that stops once nobody waits for its answer.
//!
//! A large input (or output) is validated in the pool of heavy work (`invoke::heavy`), and a
//! caller waits for it at most until its deadline. Validation takes time in proportion to the
//! input and to the schema's work at each place in it ([`super::schema_cost`] bounds the
//! second): a 4 MiB array validated against an `anyOf` of a few thousand constants, or an
//! `enum` of a few thousand objects, takes minutes. The `jsonschema` crate has no way to stop
//! a validation midway, so before this such work ran on after its caller had been answered,
//! holding one of the pool's threads (one of one, on two cores) and with it every other
//! tenant's large inputs and tool searches.
//!
//! So every compiled schema carries one more keyword, [`KEYWORD`], in each of its subschemas
//! that does more than checks bounded by the value's size (`type`, bounds, `required` ...; a
//! copy of the schema does, the registered text is unchanged). It asks whether the work on this
//! thread has been given up ([`is_given_up`]: the flag [`watching`] sets for the work it runs),
//! and once it has, fails: validation then ends at the next such subschema it applies, with an
//! answer nobody reads. Until then it passes, so the answers are the schema's own (a violation
//! that quotes a subschema quotes it without the keyword). The keyword is evaluated after the
//! subschema's other keywords, so after the flag is set a validation goes on for at most what
//! one place costs (a few hundred microseconds at the bound), or one pass over an array's or
//! object's cheap members, then unwinds.
//!
//! Written here because no crate offers it: `jsonschema` has neither a budget nor a way to
//! cancel a validation, and its custom keywords are the one hook into its walk.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use jsonschema::{Keyword, ValidationError};
use serde_json::{Map, Value};

/// The keyword added to every subschema of a compiled schema: unlikely to be any schema's own
/// (where it is, its value, an annotation, is replaced in the compiled copy).
pub const KEYWORD: &str = "x-toolplane-stop-check";

thread_local! {
    /// The flag of the work this thread runs for [`watching`], if any.
    static WATCHED: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Runs `work` on this thread with `given_up` as its flag: once the flag is set, validations
/// within `work` stop at their next subschema (and answer wrongly; the answer is for nobody).
pub fn watching<T>(given_up: &Arc<AtomicBool>, work: impl FnOnce() -> T) -> T {
    /// Puts back the flag this thread had, also when `work` panics.
    struct Restore(Option<Arc<AtomicBool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WATCHED.set(self.0.take());
        }
    }
    let _restore = Restore(WATCHED.replace(Some(Arc::clone(given_up))));
    work()
}

/// Whether the work this thread runs has been given up.
pub fn is_given_up() -> bool {
    WATCHED.with_borrow(|flag| {
        flag.as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    })
}

/// The keyword's check: passes until the work is given up.
struct StopCheck;

impl<'i> Keyword<'i> for StopCheck {
    fn validate(&self, _instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if is_given_up() {
            Err(ValidationError::custom(
                "validation stopped: its caller no longer waits for it",
            ))
        } else {
            Ok(())
        }
    }

    fn is_valid(&self, _instance: &'i Value) -> bool {
        !is_given_up()
    }
}

/// The factory `jsonschema` calls for each occurrence of [`KEYWORD`].
pub(super) fn stop_check<'a>(
    _parent: &'a Map<String, Value>,
    _value: &'a Value,
    _location: jsonschema::paths::Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    Ok(Box::new(StopCheck))
}

/// Keywords whose value is an object of names (of properties, definitions, vocabularies), each
/// naming a subschema or some other value, never a subschema itself.
const NAMED_VALUES: &[&str] = &[
    "properties",
    "patternProperties",
    "definitions",
    "$defs",
    "dependentSchemas",
    "dependencies",
    "dependentRequired",
    "$vocabulary",
];

/// Keywords whose value is data, or an object of a shape of its own, not subschemas.
const DATA: &[&str] = &["enum", "const", "default", "examples", "discriminator"];

/// Keywords whose work on a value is bounded by the value's size, whatever the schema: a
/// subschema of these alone ([`is_cheap_leaf`]) goes without the check, which would cost it
/// more than its own work (applied to each item of a large array, such subschemas take about as
/// long as reading the array did, checked or not). Not `multipleOf`: a divisor such as
/// `3.0000000000001` takes about 8 µs on a number near 1e308 (release build), a thousand
/// times a comparison, so 4 MB of such numbers take seconds.
const CHEAP: &[&str] = &[
    "type",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "const",
    "title",
    "description",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$id",
    "$anchor",
    "$schema",
];

/// Whether a subschema holds only [`CHEAP`] keywords.
fn is_cheap_leaf(subschema: &Map<String, Value>) -> bool {
    subschema
        .keys()
        .all(|keyword| CHEAP.contains(&keyword.as_str()))
}

/// A copy of `schema` with [`KEYWORD`] in every subschema written as an object, unless it
/// holds only [`CHEAP`] keywords: the schema itself and each object under its keywords, except
/// under [`DATA`] keywords, and in the values (not the object itself) of [`NAMED_VALUES`]
/// keywords. An unknown keyword's object is taken as a subschema too, since a `$ref` may point
/// into it (where none does, an object with one more key is an annotation like any other).
pub(super) fn with_stop_checks(schema: &Value) -> Value {
    let mut copy = schema.clone();
    each_subschema(&mut copy, &mut |subschema| {
        if !is_cheap_leaf(subschema) {
            subschema.insert(KEYWORD.to_owned(), Value::Bool(true));
        }
    });
    copy
}

/// A copy of `schema` (a subschema of a compiled schema, as a validation error quotes it)
/// without the [`KEYWORD`]s [`with_stop_checks`] added: what its author wrote.
pub(super) fn without_stop_checks(schema: &Value) -> Value {
    let mut copy = schema.clone();
    each_subschema(&mut copy, &mut |subschema| {
        subschema.remove(KEYWORD);
    });
    copy
}

/// Calls `visit` on `subschema`, when it is written as an object, and then on each subschema
/// under its keywords, as [`with_stop_checks`] tells them.
fn each_subschema(subschema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    match subschema {
        Value::Object(map) => {
            visit(map);
            for (keyword, value) in map.iter_mut() {
                if DATA.contains(&keyword.as_str()) {
                    continue;
                }
                match value {
                    Value::Object(named) if NAMED_VALUES.contains(&keyword.as_str()) => {
                        named
                            .values_mut()
                            .for_each(|value| each_subschema(value, visit));
                    }
                    value => each_subschema(value, visit),
                }
            }
        }
        // `allOf`, `anyOf`, `oneOf`, `prefixItems`, `items` as an array.
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| each_subschema(item, visit)),
        _ => {}
    }
}

#[cfg(test)]
#[path = "stop_check_tests.rs"]
mod tests;
