//! A bound on the work validating one value can take, checked when a schema is compiled.
//!
//! A schema of a few hundred bytes can make validation take exponential time: definitions
//! that each refer twice to the next (`a0: {allOf: [{$ref: a1}, {$ref: a1}]}`, and so on)
//! evaluate the last one 2^n times for every value, and a recursive reference under a
//! property (`{properties: {x: {allOf: [{$ref: "#"}, {$ref: "#"}]}}}`) does the same to an
//! input nested n levels deep. The validator follows such references as written; at 26
//! levels one small input held a server thread for most of a second, at 40 it would for
//! hours. So a schema is refused at registration when validating some value of some input
//! would evaluate more than [`MAX_EVALUATIONS_PER_VALUE`] subschemas at one place in the
//! input (the value itself or any value inside it), or, in a schema of more subschemas than
//! that, more than it has: evaluating each subschema once is never refused, whatever the
//! schema's size (which its own limit bounds).
//!
//! The count follows what validation visits: at one place in the input, a subschema and every
//! subschema it applies in place (`$ref`, `$dynamicRef`, `$recursiveRef`, `allOf`, `anyOf`,
//! `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`, schema `dependencies`), each as many
//! times as it is reached; one step into the input (a property by name, any other property,
//! an item by index, any other item) then brings the subschemas that apply there
//! (`properties`, `patternProperties`, `additionalProperties`, `propertyNames`,
//! `unevaluatedProperties`, `prefixItems`, `items`, `additionalItems`, `contains`,
//! `unevaluatedItems`). It over-counts where validation would skip (every `patternProperties`
//! entry counts for every name, `if`, `then` and `else` all count), so it never under-counts.
//!
//! Loops of references at one place (`a: {allOf: [{$ref: b}]}`, `b: {anyOf: [{$ref: a}]}`)
//! are where validation stops itself, and not at the first subschema met again: the validator
//! guards only the references it found pointing back while it compiled the schema (fuzzing
//! found a schema of eight definitions in such a loop that this check, stopping at the first
//! repeat, counted 159 evaluations for, and that validation evaluated about 8.5 million times).
//! Each guarded reference can be taken once at a place (its target is then being applied), and
//! between two of them the path is free of loops; so a subschema can be met again at most once
//! for each guarded reference, and there are at most as many of those as subschemas lying on
//! such loops. The count lets a subschema be met that many times more, which never
//! under-counts whichever references the validator guards; a schema without such loops (the
//! usual case) counts as before. References resolve as the validator resolves them (the
//! `referencing` crate it is built on), `$id`s included; in drafts 4 to 7 a `$ref` hides its
//! siblings, as it does in validation.
//!
//! Written here because no crate offers it: the `jsonschema` crate has no budget on the work
//! of one validation, and no other Rust crate bounds a schema's cost.

use std::collections::{HashMap, HashSet};

use petgraph::algo::tarjan_scc;
use referencing::{Draft, Registry, ResourceRef};
use serde_json::Value;

use super::schema_graph::{Graph, NodeId};

/// The most subschemas validating a value may evaluate at one place in the input, unless the
/// schema has more (then as many as it has). Ordinary schemas stay far below it (tens); a
/// union of a thousand variants, each extending a shared base definition, comes near it. At
/// about 6 ns each (simple subschemas, release build) that is about 60 µs per place, the cost
/// of a flat `oneOf` of 10,000 constants, which the schema size limit admits.
pub const MAX_EVALUATIONS_PER_VALUE: u64 = 10_000;

/// The deepest input considered: JSON is read at most 128 levels deep (serde_json's limit;
/// gRPC's `Struct` allows fewer).
const MAX_INPUT_DEPTH: usize = 128;

/// The most steps the check itself may take before it gives up and refuses the schema.
pub(super) const MAX_CHECK_STEPS: usize = 1_000_000;

/// The base URI of a schema without an `$id`, as the validator gives it.
const DEFAULT_BASE_URI: &str = "json-schema:///";

/// Checks that validating any value against `schema` (in `draft`, the draft it is compiled
/// in) evaluates at most [`MAX_EVALUATIONS_PER_VALUE`] subschemas (or as many as the schema
/// has, when more) at one place in the input. The error says where in the input the bound is
/// passed.
pub fn check_evaluation_cost(schema: &Value, draft: Draft) -> Result<(), String> {
    let resource = ResourceRef::new(schema, draft);
    let base = resource.id().unwrap_or(DEFAULT_BASE_URI);
    let registry = Registry::new()
        .draft(draft)
        .add(base, resource)
        .and_then(|builder| builder.prepare())
        .map_err(|error| format!("its references cannot be resolved: {error}"))?;
    let base = referencing::uri::from_str(base)
        .map_err(|error| format!("its base URI is not valid: {error}"))?;
    let resolver = registry.resolver(base);
    let graph = Graph::build(schema, resolver, draft)?;
    Walk::new(&graph).run()
}

/// One step into the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Step<'r> {
    /// The property of this name.
    Name(&'r str),
    /// A property named by no `properties` at this place.
    OtherName,
    /// The item at this index.
    Index(usize),
    /// An item past every `prefixItems` at this place.
    OtherIndex,
}

/// The subschemas applied at one place in the input, each with how many times: sorted by
/// node, so that equal sets compare equal.
type Applied = Vec<(NodeId, u64)>;

/// Why the walk stopped.
enum Stop<'r> {
    /// The place (the steps from the root) where more than the maximum would be evaluated.
    TooMany(Vec<Step<'r>>),
    /// The walk took more than [`MAX_CHECK_STEPS`].
    TooComplex,
}

/// The walk over the places of an input: from the root, every step that some subschema
/// applied there names, as deep as an input goes, each distinct set of applied subschemas
/// once (or again, when met less deep than before).
struct Walk<'g, 'r> {
    graph: &'g Graph<'r>,
    /// Each set of applied subschemas met, with the least depth it was met at: met again no
    /// deeper, what lies below it has been walked already (as far as an input goes).
    seen: HashMap<Applied, usize>,
    path: Vec<Step<'r>>,
    steps: usize,
    /// The most evaluations allowed at one place.
    most: u64,
    /// How many times more a subschema already being applied may be applied again at the same
    /// place: the number of subschemas on loops of in-place references (see the module docs).
    repeats: usize,
}

impl<'g, 'r> Walk<'g, 'r> {
    fn new(graph: &'g Graph<'r>) -> Self {
        Self {
            graph,
            seen: HashMap::new(),
            path: Vec::new(),
            steps: 0,
            most: MAX_EVALUATIONS_PER_VALUE.max(graph.nodes.len() as u64),
            repeats: on_in_place_loops(graph),
        }
    }

    fn run(mut self) -> Result<(), String> {
        let result = self.applied(&[(0, 1)]).and_then(|root| self.visit(root));
        match result {
            Ok(()) => Ok(()),
            Err(Stop::TooComplex) => Err(too_complex()),
            Err(Stop::TooMany(path)) => Err(format!(
                "validating a value would evaluate more than {} subschemas at {}: its \
                 references ($ref) and combinators (allOf, anyOf, oneOf) reach the same \
                 subschemas over and over, so validation time grows exponentially (refer to \
                 each definition once where it applies)",
                self.most,
                describe(&path)
            )),
        }
    }

    /// Visits the places one step below the place where `applied` apply.
    fn visit(&mut self, applied: Applied) -> Result<(), Stop<'r>> {
        let depth = self.path.len();
        if depth >= MAX_INPUT_DEPTH || self.seen.get(&applied).is_some_and(|&met| met <= depth) {
            return Ok(());
        }
        self.seen.insert(applied.clone(), depth);
        let mut starts = Vec::new();
        for step in self.steps_from(&applied) {
            self.path.push(step);
            starts.clear();
            for &(id, times) in &applied {
                self.children(id, times, step, &mut starts);
            }
            let below = self.applied(&starts)?;
            if !below.is_empty() {
                self.visit(below)?;
            }
            self.path.pop();
        }
        Ok(())
    }

    /// The steps the subschemas in `applied` tell apart.
    fn steps_from(&self, applied: &Applied) -> Vec<Step<'r>> {
        let mut steps = Vec::new();
        let mut names = HashSet::new();
        let (mut other_name, mut other_index, mut prefix) = (false, false, 0);
        for &(id, _) in applied {
            let node = &self.graph.nodes[id];
            for &(name, _) in &node.named {
                if names.insert(name) {
                    steps.push(Step::Name(name));
                }
            }
            other_name |= !node.any_property.is_empty() || !node.other_property.is_empty();
            other_index |= !node.any_item.is_empty();
            prefix = prefix.max(node.prefix.len());
        }
        steps.extend((0..prefix).map(Step::Index));
        if other_name {
            steps.push(Step::OtherName);
        }
        if other_index {
            steps.push(Step::OtherIndex);
        }
        steps
    }

    /// Adds the subschemas node `id`, applied `times` times, applies one `step` below.
    fn children(&self, id: NodeId, times: u64, step: Step<'r>, into: &mut Vec<(NodeId, u64)>) {
        let node = &self.graph.nodes[id];
        let mut add =
            |children: &[NodeId]| into.extend(children.iter().map(|&child| (child, times)));
        match step {
            Step::Name(name) => {
                match node.named.binary_search_by(|(named, _)| (*named).cmp(name)) {
                    Ok(found) => add(&[node.named[found].1]),
                    Err(_) => add(&node.other_property),
                }
                add(&node.any_property);
            }
            Step::OtherName => {
                add(&node.any_property);
                add(&node.other_property);
            }
            Step::Index(index) => {
                add(node
                    .prefix
                    .get(index)
                    .map(std::slice::from_ref)
                    .unwrap_or_default());
                add(&node.any_item);
            }
            Step::OtherIndex => add(&node.any_item),
        }
    }

    /// Everything applied at a place where `starts` are applied (each so many times), with
    /// what they apply in place; stops when that passes the maximum.
    fn applied(&mut self, starts: &[(NodeId, u64)]) -> Result<Applied, Stop<'r>> {
        let mut counts = Vec::new();
        let mut total = 0u64;
        let mut stack = Vec::new();
        for &(id, times) in starts {
            self.apply(id, times, &mut counts, &mut total, &mut stack)?;
        }
        counts.sort_unstable();
        let mut applied: Applied = Vec::with_capacity(counts.len());
        for (id, times) in counts {
            match applied.last_mut() {
                Some((last, sum)) if *last == id => *sum = sum.saturating_add(times),
                _ => applied.push((id, times)),
            }
        }
        Ok(applied)
    }

    /// Counts `id` applied `times` times, and what it applies in place; a subschema already
    /// being applied further up (a loop of references) more than [`Self::repeats`] times adds
    /// nothing, as validation has stopped by then.
    fn apply(
        &mut self,
        id: NodeId,
        times: u64,
        counts: &mut Vec<(NodeId, u64)>,
        total: &mut u64,
        stack: &mut Vec<NodeId>,
    ) -> Result<(), Stop<'r>> {
        self.steps += 1;
        if self.steps > MAX_CHECK_STEPS {
            return Err(Stop::TooComplex);
        }
        if stack.iter().filter(|&&on| on == id).count() > self.repeats {
            return Ok(());
        }
        *total = total.saturating_add(times);
        if *total > self.most {
            return Err(Stop::TooMany(self.path.clone()));
        }
        counts.push((id, times));
        stack.push(id);
        for &child in &self.graph.nodes[id].in_place {
            self.apply(child, times, counts, total, stack)?;
        }
        stack.pop();
        Ok(())
    }
}

/// How many subschemas lie on a loop of in-place references (a strongly connected component
/// of more than one, or one referring to itself).
fn on_in_place_loops(graph: &Graph<'_>) -> usize {
    let mut in_place = petgraph::Graph::<(), ()>::with_capacity(graph.nodes.len(), 0);
    let ids: Vec<_> = graph.nodes.iter().map(|_| in_place.add_node(())).collect();
    for (from, node) in graph.nodes.iter().enumerate() {
        for &to in &node.in_place {
            in_place.add_edge(ids[from], ids[to], ());
        }
    }
    tarjan_scc(&in_place)
        .into_iter()
        .filter(|component| {
            component.len() > 1 || in_place.contains_edge(component[0], component[0])
        })
        .map(|component| component.len())
        .sum()
}

/// Names a place in a value for a person: a JSON pointer, `*` for any other property or item.
fn describe(path: &[Step<'_>]) -> String {
    if path.is_empty() {
        return "its top level".to_owned();
    }
    let mut pointer = String::new();
    for step in path {
        pointer.push('/');
        match step {
            Step::Name(name) => pointer.push_str(&name.replace('~', "~0").replace('/', "~1")),
            Step::Index(index) => pointer.push_str(&index.to_string()),
            Step::OtherName | Step::OtherIndex => pointer.push('*'),
        }
    }
    if path
        .iter()
        .any(|step| matches!(step, Step::OtherName | Step::OtherIndex))
    {
        pointer.push_str(" (* is any property or item)");
    }
    pointer
}

/// Why a schema too complex to check is refused.
pub(super) fn too_complex() -> String {
    format!(
        "it is too complex to check that validating a value evaluates at most \
         {MAX_EVALUATIONS_PER_VALUE} subschemas (more than {MAX_CHECK_STEPS} steps); simplify \
         its references"
    )
}

#[cfg(test)]
#[path = "schema_cost_tests.rs"]
mod tests;
