//! The subschemas of a schema that validation can reach, and what each applies where: the
//! graph [`super::schema_cost`] walks. References are resolved with the `referencing` crate,
//! as the validator resolves them.

use std::collections::HashMap;

use referencing::{Draft, Resolver, ResourceRef};
use serde_json::Value;

use super::schema_cost::{MAX_CHECK_STEPS, too_complex};

/// A subschema's index in [`Graph::nodes`].
pub(super) type NodeId = usize;

/// What one subschema applies, and where.
#[derive(Debug, Default)]
pub(super) struct Node<'r> {
    /// Applied to the same value.
    pub(super) in_place: Vec<NodeId>,
    /// Applied to the property of that name (`properties`), sorted by name.
    pub(super) named: Vec<(&'r str, NodeId)>,
    /// Applied to every property (`patternProperties`, `propertyNames`,
    /// `unevaluatedProperties`).
    pub(super) any_property: Vec<NodeId>,
    /// Applied to properties not in `named` (`additionalProperties`).
    pub(super) other_property: Vec<NodeId>,
    /// Applied to the item at that index (`prefixItems`, `items` as an array).
    pub(super) prefix: Vec<NodeId>,
    /// Applied to every item (`items`, `additionalItems`, `contains`, `unevaluatedItems`).
    pub(super) any_item: Vec<NodeId>,
}

/// Every subschema validation can reach from the root, each once.
pub(super) struct Graph<'r> {
    /// The subschemas; the root's id is 0.
    pub(super) nodes: Vec<Node<'r>>,
}

impl<'r> Graph<'r> {
    /// Walks the schema from its root, following references.
    pub(super) fn build(
        schema: &'r Value,
        resolver: Resolver<'r>,
        draft: Draft,
    ) -> Result<Self, String> {
        let mut builder = GraphBuilder {
            nodes: Vec::new(),
            ids: HashMap::new(),
            pending: Vec::new(),
            root: (schema, resolver.clone(), draft),
            dynamic_anchors: None,
        };
        builder.node(schema, &resolver, draft)?;
        while let Some((id, value, resolver, draft)) = builder.pending.pop() {
            builder.fill(id, value, &resolver, draft)?;
            if builder.nodes.len() > MAX_CHECK_STEPS {
                return Err(too_complex());
            }
        }
        Ok(Self {
            nodes: builder.nodes,
        })
    }
}

/// A subschema that a `$dynamicRef` (by its `$dynamicAnchor` name) or a `$recursiveRef` (with
/// `$recursiveAnchor: true`, the name `None`) may land on, with where it lies.
type DynamicAnchor<'r> = (Option<&'r str>, &'r Value, Resolver<'r>, Draft);

struct GraphBuilder<'r> {
    nodes: Vec<Node<'r>>,
    ids: HashMap<*const Value, NodeId>,
    pending: Vec<(NodeId, &'r Value, Resolver<'r>, Draft)>,
    /// The whole schema, where it lies and its draft.
    root: (&'r Value, Resolver<'r>, Draft),
    /// Found in the whole schema at the first dynamic reference.
    dynamic_anchors: Option<Vec<DynamicAnchor<'r>>>,
}

impl<'r> GraphBuilder<'r> {
    /// The id of the subschema `value`, found through `resolver` in `draft`; a new one is
    /// queued to have its keywords read.
    fn node(
        &mut self,
        value: &'r Value,
        resolver: &Resolver<'r>,
        draft: Draft,
    ) -> Result<NodeId, String> {
        if let Some(id) = self.ids.get(&std::ptr::from_ref(value)) {
            return Ok(*id);
        }
        let draft = draft.detect(value);
        let resolver = resolver
            .in_subresource(ResourceRef::new(value, draft))
            .map_err(|error| format!("its $id cannot be resolved: {error}"))?;
        let id = self.nodes.len();
        self.nodes.push(Node::default());
        self.ids.insert(std::ptr::from_ref(value), id);
        self.pending.push((id, value, resolver, draft));
        Ok(id)
    }

    /// The subschema `reference` points to from `resolver`.
    fn target(&mut self, reference: &str, resolver: &Resolver<'r>) -> Result<NodeId, String> {
        let resolved = resolver
            .lookup(reference)
            .map_err(|error| format!("its $ref {reference:?} cannot be resolved: {error}"))?;
        let (value, resolver, draft) = resolved.into_inner();
        self.node(value, &resolver, draft)
    }

    /// Reads what the subschema `id` (`value`) applies.
    fn fill(
        &mut self,
        id: NodeId,
        value: &'r Value,
        resolver: &Resolver<'r>,
        draft: Draft,
    ) -> Result<(), String> {
        let Value::Object(keywords) = value else {
            return Ok(()); // `true` and `false` apply nothing
        };
        let mut node = Node::default();
        if let Some(Value::String(reference)) = keywords.get("$ref") {
            node.in_place.push(self.target(reference, resolver)?);
            if draft <= Draft::Draft7 {
                self.nodes[id] = node; // drafts 4 to 7 ignore every sibling of `$ref`
                return Ok(());
            }
        }
        for (keyword, child) in keywords {
            let one = |list: &mut Vec<NodeId>, this: &mut Self| -> Result<(), String> {
                list.push(this.node(child, resolver, draft)?);
                Ok(())
            };
            match keyword.as_str() {
                "allOf" | "anyOf" | "oneOf" => {
                    for item in child.as_array().into_iter().flatten() {
                        node.in_place.push(self.node(item, resolver, draft)?);
                    }
                }
                "not" | "if" | "then" | "else" => one(&mut node.in_place, self)?,
                "dependentSchemas" | "dependencies" => {
                    for schema in child.as_object().into_iter().flat_map(|map| map.values()) {
                        // Draft 4-7 `dependencies` may also name properties (an array).
                        if schema.is_object() || schema.is_boolean() {
                            node.in_place.push(self.node(schema, resolver, draft)?);
                        }
                    }
                }
                "$dynamicRef" | "$recursiveRef" => {
                    let Some(reference) = child.as_str() else {
                        continue;
                    };
                    let name = (keyword == "$dynamicRef")
                        .then(|| reference.rsplit_once('#').map_or("", |(_, name)| name));
                    node.in_place
                        .extend(self.dynamic_targets(name, reference, resolver)?);
                }
                "properties" => {
                    for (name, schema) in child.as_object().into_iter().flatten() {
                        let target = self.node(schema, resolver, draft)?;
                        node.named.push((name.as_str(), target));
                    }
                    node.named.sort_unstable();
                }
                "patternProperties" => {
                    for schema in child.as_object().into_iter().flat_map(|map| map.values()) {
                        node.any_property.push(self.node(schema, resolver, draft)?);
                    }
                }
                "propertyNames" | "unevaluatedProperties" => one(&mut node.any_property, self)?,
                "additionalProperties" => one(&mut node.other_property, self)?,
                "prefixItems" => {
                    for item in child.as_array().into_iter().flatten() {
                        node.prefix.push(self.node(item, resolver, draft)?);
                    }
                }
                "items" => match child.as_array() {
                    Some(items) => {
                        for item in items {
                            node.prefix.push(self.node(item, resolver, draft)?);
                        }
                    }
                    None => one(&mut node.any_item, self)?,
                },
                "additionalItems" | "contains" | "unevaluatedItems" => {
                    one(&mut node.any_item, self)?;
                }
                _ => {}
            }
        }
        self.nodes[id] = node;
        Ok(())
    }

    /// Where a `$dynamicRef` (anchor `name`) or `$recursiveRef` (`name` `None`) may land: its
    /// static target, and every subschema with a matching dynamic anchor, since which one
    /// applies depends on the path validation took.
    fn dynamic_targets(
        &mut self,
        name: Option<&str>,
        reference: &str,
        resolver: &Resolver<'r>,
    ) -> Result<Vec<NodeId>, String> {
        let mut targets = Vec::new();
        let (root, root_resolver, root_draft) = self.root.clone();
        let anchors: Vec<_> = self
            .dynamic_anchors
            .get_or_insert_with(|| {
                let mut found = Vec::new();
                collect_dynamic_anchors(root, &root_resolver, root_draft, &mut found);
                found
            })
            .iter()
            .filter(|(anchor, ..)| *anchor == name)
            .map(|(_, value, resolver, draft)| (*value, resolver.clone(), *draft))
            .collect();
        for (value, resolver, draft) in anchors {
            targets.push(self.node(value, &resolver, draft)?);
        }
        match self.target(reference, resolver) {
            Ok(target) => targets.push(target),
            Err(error) if targets.is_empty() => return Err(error),
            Err(_) => {}
        }
        Ok(targets)
    }
}

/// Collects every object in `value` with a `$dynamicAnchor` or `$recursiveAnchor: true`, with
/// the resolver of where it lies (objects in data keywords included: counting them too only
/// over-counts).
fn collect_dynamic_anchors<'r>(
    value: &'r Value,
    resolver: &Resolver<'r>,
    draft: Draft,
    found: &mut Vec<DynamicAnchor<'r>>,
) {
    match value {
        Value::Object(map) => {
            let draft = draft.detect(value);
            let Ok(resolver) = resolver.in_subresource(ResourceRef::new(value, draft)) else {
                return;
            };
            if let Some(Value::String(name)) = map.get("$dynamicAnchor") {
                found.push((Some(name.as_str()), value, resolver.clone(), draft));
            }
            if map.get("$recursiveAnchor") == Some(&Value::Bool(true)) {
                found.push((None, value, resolver.clone(), draft));
            }
            for child in map.values() {
                collect_dynamic_anchors(child, &resolver, draft, found);
            }
        }
        Value::Array(items) => {
            for child in items {
                collect_dynamic_anchors(child, resolver, draft, found);
            }
        }
        _ => {}
    }
}
