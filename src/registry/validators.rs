//! The compiled JSON Schema validators of registered tools, in a bounded cache.
//!
//! Every schema is compiled at registration: that is how a bad schema is rejected. The compiled
//! form is not kept with the tool, though: a `jsonschema` validator takes about 20 times the
//! memory of its schema text (about 22 KB for a 1 KB schema), which would make every registered
//! tool cost tens of kilobytes whether it is ever called or not. Instead the validators of the
//! tools being called live here, with room for `capacity` of them (least recently and least
//! frequently used go first, moka's TinyLFU policy). A validator takes one room, and one more
//! for each [`BYTES_PER_ROOM`] its schema's compiled patterns are estimated to take
//! ([`super::pattern_memory`]): a Unicode class repeated compiles to megabytes, and a cache
//! counting validators alone could hold thousands of those. A tool called after its validator was
//! evicted, or for the first time, compiles it again from the schema text (the same text that
//! compiled at registration, under the same limits, so it compiles again; the check of its
//! validation cost, which the same text passed then, is not run again).
//!
//! Entries are keyed by the tool's `definition_sha256`, so identical definitions (replicas of
//! one service, or the same tool in several tenants) share one compiled validator.

use std::sync::Arc;

use super::model::{RegisteredTool, SchemaValidator};
use super::validate::{RegistrationLimits, recompile_registered_schema};

/// The default number of compiled validators kept.
pub const DEFAULT_VALIDATOR_CACHE_SIZE: u64 = 4096;

/// The room a validator takes in the cache for each this many bytes its compiled patterns are
/// estimated to take (see [`super::pattern_memory`]), beyond the one every validator takes.
pub const BYTES_PER_ROOM: u64 = 64 * 1024;

/// A compiled validator and the room it takes.
#[derive(Debug, Clone)]
struct Cached {
    validator: SchemaValidator,
    room: u32,
}

type Cache = moka::sync::Cache<String, Cached>;

/// Bounded caches of compiled input and output validators, shared by every reader.
#[derive(Debug, Clone)]
pub struct ValidatorCache {
    inputs: Cache,
    outputs: Cache,
    limits: RegistrationLimits,
}

impl ValidatorCache {
    /// Caches keeping at most `capacity` compiled input validators and as many output
    /// validators, of schemas that registered under `limits`.
    pub fn new(capacity: u64, limits: RegistrationLimits) -> Self {
        let cache = || {
            moka::sync::Cache::builder()
                .max_capacity(capacity)
                .weigher(|_, cached: &Cached| cached.room)
                .build()
        };
        Self {
            inputs: cache(),
            outputs: cache(),
            limits,
        }
    }

    /// The compiled validator of the tool's input schema.
    pub fn input(&self, tool: &RegisteredTool) -> Result<SchemaValidator, String> {
        self.get(&self.inputs, tool, &tool.input_schema)
    }

    /// The compiled validator of the tool's output schema, when it declares one.
    pub fn output(&self, tool: &RegisteredTool) -> Option<Result<SchemaValidator, String>> {
        let schema = tool.output_schema.as_ref()?;
        Some(self.get(&self.outputs, tool, schema))
    }

    /// How many compiled validators are kept now, input and output (moka counts lazily, so
    /// this first runs its pending maintenance).
    pub fn len(&self) -> u64 {
        self.inputs.run_pending_tasks();
        self.outputs.run_pending_tasks();
        self.inputs.entry_count() + self.outputs.entry_count()
    }

    /// Whether no validator is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(
        &self,
        cache: &Cache,
        tool: &RegisteredTool,
        schema: &str,
    ) -> Result<SchemaValidator, String> {
        if let Some(cached) = cache.get(tool.definition_sha256.as_str()) {
            return Ok(cached.validator);
        }
        cache
            .try_get_with(tool.definition_sha256.clone(), || {
                let schema = serde_json::from_str(schema).map_err(|error| error.to_string())?;
                let (validator, memory) = recompile_registered_schema(&schema, &self.limits)?;
                let extra = memory / BYTES_PER_ROOM;
                Ok::<_, String>(Cached {
                    validator: Arc::new(validator),
                    room: u32::try_from(extra.saturating_add(1)).unwrap_or(u32::MAX),
                })
            })
            .map(|cached| cached.validator)
            .map_err(|error| {
                format!(
                    "the registered schema of tool {} no longer compiles: {error}",
                    tool.name
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::model::{ServiceSpec, ToolSpec};
    use crate::registry::validate::validate_service;

    fn tools(schemas: &[serde_json::Value]) -> Vec<Arc<RegisteredTool>> {
        let spec = ServiceSpec {
            name: "svc".into(),
            version: "1.0.0".into(),
            endpoint: String::new(),
            tools: schemas
                .iter()
                .enumerate()
                .map(|(index, schema)| ToolSpec {
                    name: format!("tool_{index}"),
                    description: String::new(),
                    input_schema: Some(schema.clone()),
                    output_schema: (index == 0).then(|| json!({"type": "string"})),
                    capabilities: Vec::new(),
                    timeout_ms: None,
                    domains: Vec::new(),
                    categories: Vec::new(),
                    annotations: Default::default(),
                })
                .collect(),
            ttl: None,
            instance_id: String::new(),
        };
        validate_service(&spec, &RegistrationLimits::default())
            .expect("valid service")
            .tools
    }

    #[test]
    fn validators_compile_on_first_use_and_stay_within_capacity() {
        let schemas: Vec<_> = (1..=3)
            .map(|n| json!({"type": "object", "properties": {"n": {"maximum": n}}}))
            .collect();
        let tools = tools(&schemas);
        let cache = ValidatorCache::new(1, RegistrationLimits::default());
        assert!(
            cache.is_empty(),
            "registration compiles nothing into the cache"
        );
        for _ in 0..3 {
            for (index, tool) in tools.iter().enumerate() {
                let validator = cache.input(tool).expect("compiles");
                let limit = index as i64 + 1;
                assert!(validator.is_valid(&json!({"n": limit})));
                assert!(!validator.is_valid(&json!({"n": limit + 1})));
            }
        }
        assert!(cache.len() <= 1, "only input validators were asked for");
    }

    /// A validator whose patterns are estimated large takes the room of several: past the
    /// cache's room it is compiled for each call but not kept, and an ordinary one is.
    #[test]
    fn validators_take_room_by_their_patterns() {
        let letters = json!({"type": "string", "pattern": "^\\p{L}{1,10}$"});
        let tools = tools(&[letters, json!({"type": "object"})]);
        let cache = ValidatorCache::new(4, RegistrationLimits::default());
        let validator = cache.input(&tools[0]).expect("compiles");
        assert!(validator.is_valid(&json!("Straße")));
        assert_eq!(cache.len(), 0, "needs more room than the cache has");
        cache.input(&tools[1]).expect("compiles");
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn output_validators_exist_only_for_declared_output_schemas() {
        let tools = tools(&[json!({"type": "object"}), json!({"type": "object"})]);
        let cache = ValidatorCache::new(8, RegistrationLimits::default());
        let output = cache
            .output(&tools[0])
            .expect("declared")
            .expect("compiles");
        assert!(output.is_valid(&json!("text")));
        assert!(!output.is_valid(&json!(1)));
        assert!(cache.output(&tools[1]).is_none());
    }

    #[test]
    fn identical_definitions_share_one_validator() {
        let schema = json!({"type": "object"});
        let first = tools(std::slice::from_ref(&schema));
        let second = tools(std::slice::from_ref(&schema));
        let cache = ValidatorCache::new(8, RegistrationLimits::default());
        let a = cache.input(&first[0]).expect("compiles");
        let b = cache.input(&second[0]).expect("compiles");
        assert!(Arc::ptr_eq(&a, &b));
    }
}
