//! `uniqueItems`, checked by toolplane in place of `jsonschema`'s own check.
//!
//! `jsonschema` finds a duplicate by putting an array's items in a hash set, hashing an array
//! as its items one after the other (so an empty array adds nothing to the hash) and an object
//! as the XOR of its entries' hashes. Distinct items that hash alike are then easy to write,
//! with no key to guess: every array of empty arrays (`[]`, `[[]]`, `[[],[[]]]` ...) hashes as
//! nothing at all. A set whose items all hash alike compares each new item with every item
//! before it: 10,000 arrays of 16 items each `[]` or `[[]]` (630 KB) took 1.2 s to check,
//! 20,000 of them 4.8 s, and 135,000 smaller such arrays (4.4 MB, about what a message may
//! hold) 136 s with another process running (release builds, one `uniqueItems` in the
//! schema). It is a single keyword, so the stop checks ([`super::stop_check`]) cannot end it:
//! it held a thread of the heavy work's pool (one of one, on two cores) past its caller's
//! deadline, and with it every tenant's large inputs and tool searches.
//!
//! So the keyword is registered as a custom keyword of the same name, which `jsonschema` takes
//! in place of its own ([`KEYWORD`]). It hashes each item with its structure (each kind's tag,
//! an array's and an object's length, an object's entries each hashed on their own and summed)
//! under keys drawn at random for every check (ahash's `RandomState`, seeded from the operating
//! system's randomness), so that items hashing alike cannot be written ahead. Items whose
//! hashes agree are compared with `jsonschema`'s own equality (`jsonschema_value::cmp::equal`:
//! `1` and `1.0` are equal, an object's keys in any order), so it answers as `jsonschema` does,
//! with the same message, and in about the time `jsonschema`'s check takes on other arrays
//! (100,000 numbers or strings, or 20,000 small objects, in about a millisecond, as before;
//! BENCHMARKS.md, item 46). It also stops when its work has been given up. One difference:
//! `jsonschema` applies a custom keyword after a subschema's other keywords, so where an array
//! breaks both `uniqueItems` and, say, `items`, the first error reported is the `items` one.
//!
//! Written here because no crate offers it: `jsonschema`'s check is the one at fault, and its
//! custom keywords are the way to replace it.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

use ahash::RandomState;

use jsonschema::{Keyword, ValidationError};
use jsonschema_value::cmp::equal;
use serde_json::{Map, Value};

use super::stop_check::is_given_up;
use crate::shown::shown_json;

/// The keyword replaced.
pub const KEYWORD: &str = "uniqueItems";

/// Arrays of at most this many items are checked pair by pair, as `jsonschema` does below its
/// own threshold (15): cheaper than hashing, and bounded.
const PAIRWISE_ITEMS: usize = 15;

/// How many items are hashed between two looks at whether the work has been given up.
const ITEMS_PER_STOP_CHECK: usize = 1024;

/// `uniqueItems: true`; `false` asserts nothing.
struct UniqueItems {
    unique: bool,
}

impl<'i> Keyword<'i> for UniqueItems {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            // `jsonschema`'s own words, the value shown as far as `shown_json` shows it.
            Err(ValidationError::custom(format!(
                "{} has non-unique elements",
                shown_json(instance)
            )))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        match instance {
            Value::Array(items) if self.unique => has_unique_items(items),
            _ => true,
        }
    }
}

/// The factory `jsonschema` calls for each `uniqueItems` (its value a boolean: the meta-schema
/// check refuses any other before this is called; any other is taken as `false`, as
/// `jsonschema` takes it).
pub(super) fn unique_items<'a>(
    _parent: &'a Map<String, Value>,
    value: &'a Value,
    _location: jsonschema::paths::Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    Ok(Box::new(UniqueItems {
        unique: value == &Value::Bool(true),
    }))
}

/// An item and its hash, equal to another item when `jsonschema` says they are equal.
struct Hashed<'v> {
    hash: u64,
    value: &'v Value,
}

impl PartialEq for Hashed<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && equal(self.value, other.value)
    }
}

impl Eq for Hashed<'_> {}

impl Hash for Hashed<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The set's hasher: each item's hash is keyed already, so it is taken as it is (hashing it
/// again cost as much as the items' own hashing).
#[derive(Default)]
struct TakenAsItIs(u64);

impl Hasher for TakenAsItIs {
    fn write(&mut self, bytes: &[u8]) {
        // Only `Hashed` is hashed with this, through `write_u64`; anything else is folded in.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Whether no two of `items` are equal (or the work has been given up, for an answer nobody
/// reads).
fn has_unique_items(items: &[Value]) -> bool {
    if items.len() <= PAIRWISE_ITEMS {
        return items
            .iter()
            .enumerate()
            .all(|(at, item)| items[at + 1..].iter().all(|other| !equal(item, other)));
    }
    let keys = RandomState::new();
    let mut seen: HashSet<Hashed, BuildHasherDefault<TakenAsItIs>> =
        HashSet::with_capacity_and_hasher(items.len(), BuildHasherDefault::default());
    for (at, value) in items.iter().enumerate() {
        if at % ITEMS_PER_STOP_CHECK == 0 && is_given_up() {
            return false;
        }
        let mut hasher = keys.build_hasher();
        write_value(value, &keys, &mut hasher);
        if !seen.insert(Hashed {
            hash: hasher.finish(),
            value,
        }) {
            return false;
        }
    }
    true
}

/// Writes `value` to `hasher` with its structure, so that values `jsonschema` calls equal hash
/// alike and others only by chance: numbers as `jsonschema` hashes them (their `f64` bits, `0`
/// and `-0.0` alike), an object's entries each hashed under `keys` and summed (in any order).
fn write_value(value: &Value, keys: &RandomState, hasher: &mut impl Hasher) {
    match value {
        Value::Null => hasher.write_u8(0),
        Value::Bool(bool) => {
            hasher.write_u8(1);
            bool.hash(hasher);
        }
        Value::Number(number) => {
            hasher.write_u8(2);
            // `0.0 == -0.0`, so both are 0 here.
            let bits = number
                .as_f64()
                .map_or(u64::MAX, |n| if n == 0.0 { 0 } else { n.to_bits() });
            hasher.write_u64(bits);
        }
        Value::String(string) => {
            hasher.write_u8(3);
            string.hash(hasher);
        }
        Value::Array(items) => {
            hasher.write_u8(4);
            hasher.write_usize(items.len());
            for item in items {
                write_value(item, keys, hasher);
            }
        }
        Value::Object(entries) => {
            hasher.write_u8(5);
            hasher.write_usize(entries.len());
            let mut sum = 0u64;
            for (key, value) in entries {
                let mut entry = keys.build_hasher();
                key.hash(&mut entry);
                write_value(value, keys, &mut entry);
                sum = sum.wrapping_add(entry.finish());
            }
            hasher.write_u64(sum);
        }
    }
}

/// `count` (at most 65,536) distinct arrays that `jsonschema`'s own `uniqueItems` hashes alike
/// (as nothing at all), for the tests of this check: 16 items each, `[]` or `[[]]` as the bits
/// of the array's index say; 63 bytes each as JSON.
pub fn hashing_alike_for_jsonschema(count: usize) -> Vec<Value> {
    (0..count)
        .map(|index| {
            let bits = (0..16).map(|bit| match index >> bit & 1 {
                0 => Value::Array(Vec::new()),
                _ => Value::Array(vec![Value::Array(Vec::new())]),
            });
            Value::Array(bits.collect())
        })
        .collect()
}

#[cfg(test)]
#[path = "unique_items_tests.rs"]
mod tests;
