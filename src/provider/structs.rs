//! The example provider's tools: five tools of the Structs MCP tool API (seed 004), with the
//! input and output shapes the seed gives.
//!
//! - `structs_validate_entity_id`: `{type}-{index}` ids, type codes 0-9 (guild, player,
//!   planet, reactor, substation, struct, allocation, infusion, address, fleet), index from 1.
//! - `structs_validate_schema`: data against a JSON Schema given inline (Draft 7 by default),
//!   answering its first error (`registry::validate::first_error` says why only the first).
//! - `structs_calculate_power`: alpha matter to kW at the generator's rate (reactor 1,
//!   fieldGenerator 2, continentalPowerPlant 5, worldEngine 10 kW per gram).
//! - `structs_calculate_damage`: `weapon_power * weapon_multiplier - armor * defense / 50`,
//!   never below 0; multipliers laser 1.0, kinetic 1.2, missile 1.5, plasma 2.0.
//! - `structs_calculate_proof_of_work`: the nonce whose sha256 over `{entity_id}_{nonce}_{age}`
//!   has as many leading hex zeros as the chain's difficulty rule requires (see
//!   [`required_leading_zeros`]); stops at `max_iterations` or as soon as the call is cancelled.

use std::time::Instant;

use serde_json::{Value, json};

use super::tools::{
    RegisteredTools, RegistrationError, ToolDescriptor, ToolError, ToolInvocation, ToolOutput,
    ToolRegistry, handler,
};
use crate::json::sha256_hex;
use crate::registry::Capability;
use crate::registry::model::ToolAnnotations;
use crate::registry::validate::{
    RegistrationLimits, compile_schema, first_error, violation_message,
};

/// Entity type codes and names (seed 004, `ai/schemas/formats.json`).
pub const ENTITY_TYPES: &[(u64, &str)] = &[
    (0, "guild"),
    (1, "player"),
    (2, "planet"),
    (3, "reactor"),
    (4, "substation"),
    (5, "struct"),
    (6, "allocation"),
    (7, "infusion"),
    (8, "address"),
    (9, "fleet"),
];
/// Generator types and their kW per gram of alpha matter.
pub const GENERATOR_RATES: &[(&str, u64)] = &[
    ("reactor", 1),
    ("fieldGenerator", 2),
    ("continentalPowerPlant", 5),
    ("worldEngine", 10),
];
/// Weapon types and their damage multipliers.
pub const WEAPON_MULTIPLIERS: &[(&str, f64)] = &[
    ("laser", 1.0),
    ("kinetic", 1.2),
    ("missile", 1.5),
    ("plasma", 2.0),
];
/// The proof-of-work iteration limit when the input sets none.
pub const DEFAULT_MAX_ITERATIONS: u64 = 1_000_000;
/// How many nonces are tried between checks for cancellation.
const CANCEL_CHECK_EVERY: u64 = 1024;

/// A JSON number: an integer when the value is one.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

/// The hints of a tool that only calculates: a title, read-only, and reaching nothing beyond
/// its input.
fn calculation(title: &str) -> ToolAnnotations {
    ToolAnnotations {
        title: title.to_owned(),
        read_only: Some(true),
        open_world: Some(false),
        ..ToolAnnotations::default()
    }
}

/// Every tool of the example provider, ready to serve.
pub fn structs_tools() -> Result<RegisteredTools, RegistrationError> {
    let cacheable = [Capability::Caching, Capability::Retry];
    Ok(ToolRegistry::new()
        .register(
            ToolDescriptor::new("structs_validate_entity_id", "Validate a Structs entity id of the form {type}-{index}, optionally against an expected type (name or code).", json!({
                "type": "object", "required": ["id"], "additionalProperties": false,
                "properties": {"id": {"type": "string", "maxLength": 64},
                               "expected_type": {"type": ["string", "integer"]}}}))
            .returns(json!({"type": "object", "required": ["valid", "format"]}))
            .timeout_ms(1000).capabilities(&cacheable)
            .annotations(calculation("Validate an entity id")),
            handler(|call: ToolInvocation| async move { validate_entity_id(&call.input) }),
        )?
        .register(
            ToolDescriptor::new("structs_validate_schema", "Validate data against a JSON Schema given inline (Draft 7 unless $schema names another draft).", json!({
                "type": "object", "required": ["data", "schema"], "additionalProperties": false,
                "properties": {"data": {}, "schema": {"type": "object"}}}))
            .returns(json!({"type": "object", "required": ["valid", "errors"], "properties": {"valid": {"type": "boolean"}, "errors": {"type": "array"}}}))
            .timeout_ms(2000).capabilities(&cacheable)
            .annotations(calculation("Validate data against a schema")),
            handler(|call: ToolInvocation| async move { validate_schema(&call.input) }),
        )?
        .register(
            ToolDescriptor::new("structs_calculate_power", "Calculate the power (kW) a generator makes from alpha matter (grams).", json!({
                "type": "object", "required": ["alpha_matter", "generator_type"], "additionalProperties": false,
                "properties": {"alpha_matter": {"type": "number", "minimum": 0},
                               "generator_type": {"enum": GENERATOR_RATES.iter().map(|(name, _)| *name).collect::<Vec<_>>()}}}))
            .returns(json!({"type": "object", "required": ["power_generated", "formula", "conversion_rate"]}))
            .timeout_ms(1000).capabilities(&cacheable)
            .annotations(calculation("Calculate generator power")),
            handler(|call: ToolInvocation| async move { calculate_power(&call.input) }),
        )?
        .register(
            ToolDescriptor::new("structs_calculate_damage", "Calculate combat damage: weapon_power * weapon_multiplier - armor * defense / 50, never below 0.", json!({
                "type": "object", "required": ["attacker", "defender"], "additionalProperties": false,
                "properties": {
                    "attacker": {"type": "object", "required": ["weapon_type", "power"], "properties": {
                        "struct_type": {"type": "integer", "minimum": 0},
                        "weapon_type": {"enum": WEAPON_MULTIPLIERS.iter().map(|(name, _)| *name).collect::<Vec<_>>()},
                        "power": {"type": "number", "minimum": 0}}},
                    "defender": {"type": "object", "required": ["armor", "defense"], "properties": {
                        "struct_type": {"type": "integer", "minimum": 0},
                        "armor": {"type": "number", "minimum": 0},
                        "defense": {"type": "number", "minimum": 0}}}}}))
            .returns(json!({"type": "object", "required": ["damage", "formula", "breakdown"]}))
            .timeout_ms(1000).capabilities(&cacheable)
            .annotations(calculation("Calculate combat damage")),
            handler(|call: ToolInvocation| async move { calculate_damage(&call.input) }),
        )?
        .register(
            ToolDescriptor::new("structs_calculate_proof_of_work", "Find a nonce whose sha256 over {entity_id}_{nonce}_{age} meets the Structs difficulty for the operation's age.", json!({
                "type": "object", "required": ["action_type", "entity_id", "age", "difficulty"], "additionalProperties": false,
                "properties": {
                    "action_type": {"enum": ["struct_build_complete", "planet_raid_complete", "ore_miner_complete", "ore_refinery_complete"]},
                    "entity_id": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"},
                    "age": {"type": "integer", "minimum": 0},
                    "difficulty": {"type": "integer", "minimum": 1},
                    "max_iterations": {"type": "integer", "minimum": 1}}}))
            .returns(json!({"type": "object", "required": ["hash", "nonce", "iterations", "valid", "difficulty_met", "computation_time_ms"]}))
            .timeout_ms(30_000).capabilities(&[Capability::Retry])
            .annotations(calculation("Find a proof-of-work nonce")),
            handler(|call: ToolInvocation| async move {
                let cancel = call.context.cancellation();
                let input = call.input;
                tokio::task::spawn_blocking(move || proof_of_work(&input, &|| cancel.is_cancelled()))
                    .await
                    .map_err(|error| ToolError::failed(format!("proof-of-work search stopped: {error}")))?
            }),
        )?
        .freeze())
}

fn validate_entity_id(input: &Value) -> Result<ToolOutput, ToolError> {
    let id = input["id"].as_str().unwrap_or_default();
    let invalid = |error: String| {
        Ok(ToolOutput::new(
            json!({"valid": false, "format": id, "errors": [error]}),
        ))
    };
    let Some((code, index)) = id.split_once('-').filter(|(c, i)| {
        !c.is_empty() && !i.is_empty() && c.bytes().chain(i.bytes()).all(|b| b.is_ascii_digit())
    }) else {
        return invalid(format!("id {id:?} must match ^[0-9]+-[0-9]+$"));
    };
    let (Ok(code), Ok(index)) = (code.parse::<u64>(), index.parse::<u64>()) else {
        return invalid(format!("id {id:?} has numbers too large"));
    };
    let Some((_, type_name)) = ENTITY_TYPES.iter().find(|(known, _)| *known == code) else {
        return invalid(format!("type code {code} is not a known entity type (0-9)"));
    };
    if index == 0 {
        return invalid("index is 1-based; 0 is not an entity".to_owned());
    }
    let expected = &input["expected_type"];
    let matches = match expected {
        Value::Null => true,
        Value::Number(n) => n.as_u64() == Some(code),
        Value::String(name) => {
            name.eq_ignore_ascii_case(type_name) || name.parse::<u64>().ok() == Some(code)
        }
        _ => false,
    };
    if !matches {
        return invalid(format!(
            "id {id:?} is a {type_name}, not the expected {expected}"
        ));
    }
    Ok(ToolOutput::new(
        json!({"valid": true, "type": type_name, "type_code": code, "index": index, "format": id}),
    ))
}

fn validate_schema(input: &Value) -> Result<ToolOutput, ToolError> {
    let validator = compile_schema(&input["schema"], &RegistrationLimits::default())
        .map_err(|problem| ToolError::invalid_input(format!("schema: {problem}")))?;
    let errors: Vec<Value> = first_error(&validator, &input["data"])
        .into_iter()
        .map(|error| json!({"instance_path": error.instance_path().to_string(), "schema_path": error.schema_path().to_string(), "message": violation_message(&error)}))
        .collect();
    Ok(ToolOutput::new(
        json!({"valid": errors.is_empty(), "errors": errors}),
    ))
}

fn calculate_power(input: &Value) -> Result<ToolOutput, ToolError> {
    let grams = input["alpha_matter"].as_f64().unwrap_or(0.0);
    let generator = input["generator_type"].as_str().unwrap_or_default();
    let (_, rate) = GENERATOR_RATES
        .iter()
        .find(|(name, _)| *name == generator)
        .ok_or_else(|| ToolError::invalid_input(format!("unknown generator_type {generator:?}")))?;
    Ok(ToolOutput::new(json!({
        "power_generated": number(grams * *rate as f64),
        "formula": format!("1g Alpha Matter = {rate}kW ({generator})"),
        "conversion_rate": rate,
    })))
}

fn calculate_damage(input: &Value) -> Result<ToolOutput, ToolError> {
    let attacker = &input["attacker"];
    let defender = &input["defender"];
    let weapon = attacker["weapon_type"].as_str().unwrap_or_default();
    let (_, multiplier) = WEAPON_MULTIPLIERS
        .iter()
        .find(|(name, _)| *name == weapon)
        .ok_or_else(|| ToolError::invalid_input(format!("unknown weapon_type {weapon:?}")))?;
    let base = attacker["power"].as_f64().unwrap_or(0.0) * multiplier;
    let reduction = defender["armor"].as_f64().unwrap_or(0.0)
        * defender["defense"].as_f64().unwrap_or(0.0)
        / 50.0;
    let damage = (base - reduction).max(0.0);
    Ok(ToolOutput::new(json!({
        "damage": number(damage),
        "formula": "damage = (weapon_power * weapon_multiplier) - (armor * defense_multiplier), defense_multiplier = defense / 50",
        "breakdown": {"base_damage": number(base), "armor_reduction": number(reduction), "final_damage": number(damage)},
    })))
}

/// How many leading hex zeros the digest needs, as the Structs chain's CalculateDifficulty
/// says: 64 when age <= 1, otherwise max(1, 64 - floor(log10(age) / log10(difficulty) * 63)).
pub fn required_leading_zeros(age: u64, difficulty: u64) -> u32 {
    if age <= 1 {
        return 64;
    }
    if difficulty <= 1 {
        // log10(1) = 0: the ratio is infinite, so the floor of one zero applies.
        return 1;
    }
    let ratio = (age as f64).log10() / (difficulty as f64).log10();
    let zeros = 64.0 - (ratio * 63.0).floor();
    zeros.clamp(1.0, 64.0) as u32
}

fn proof_of_work(input: &Value, cancelled: &dyn Fn() -> bool) -> Result<ToolOutput, ToolError> {
    let entity = input["entity_id"].as_str().unwrap_or_default();
    let age = input["age"].as_u64().unwrap_or(0);
    let difficulty = input["difficulty"].as_u64().unwrap_or(1);
    let max_iterations = input["max_iterations"]
        .as_u64()
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    let zeros = required_leading_zeros(age, difficulty) as usize;
    let started = Instant::now();
    for nonce in 0..max_iterations {
        if nonce % CANCEL_CHECK_EVERY == 0 && cancelled() {
            return Err(ToolError::new(
                "TOOL_CANCELLED",
                format!("proof-of-work search cancelled after {nonce} iterations"),
            ));
        }
        let hash = sha256_hex(format!("{entity}_{nonce}_{age}").as_bytes());
        if hash.bytes().take(zeros).all(|b| b == b'0') {
            return Ok(ToolOutput::new(json!({
                "hash": hash, "nonce": nonce.to_string(), "iterations": nonce + 1, "valid": true, "difficulty_met": true,
                "required_leading_zeros": zeros, "computation_time_ms": started.elapsed().as_millis() as u64,
            })));
        }
    }
    Err(ToolError::new(
        "TOOL_ITERATIONS_EXHAUSTED",
        format!(
            "no nonce below max_iterations {max_iterations} gives {zeros} leading zeros (age {age}, difficulty {difficulty})"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn entity_ids_follow_the_seed() {
        let ok = validate_entity_id(&json!({"id": "1-11", "expected_type": "player"}))
            .expect("runs")
            .output;
        assert_eq!(
            ok,
            json!({"valid": true, "type": "player", "type_code": 1, "index": 11, "format": "1-11"})
        );
        assert_eq!(
            validate_entity_id(&json!({"id": "1-11", "expected_type": 1}))
                .expect("runs")
                .output["valid"],
            true
        );
        for bad in [
            json!({"id": "x-1"}),
            json!({"id": "1-0"}),
            json!({"id": "99-1"}),
            json!({"id": "1-11", "expected_type": "planet"}),
        ] {
            assert_eq!(
                validate_entity_id(&bad).expect("runs").output["valid"],
                false,
                "{bad}"
            );
        }
    }

    #[test]
    fn power_and_damage_match_the_seed_examples() {
        let power = calculate_power(&json!({"alpha_matter": 100, "generator_type": "reactor"}))
            .expect("runs")
            .output;
        assert_eq!(
            power,
            json!({"power_generated": 100, "formula": "1g Alpha Matter = 1kW (reactor)", "conversion_rate": 1})
        );
        let damage = calculate_damage(&json!({"attacker": {"struct_type": 10, "weapon_type": "laser", "power": 100},
                                              "defender": {"struct_type": 1, "armor": 50, "defense": 25}})).expect("runs").output;
        assert_eq!(damage["damage"], json!(75));
        assert_eq!(
            damage["breakdown"],
            json!({"base_damage": 100, "armor_reduction": 25, "final_damage": 75})
        );
    }

    #[test]
    fn difficulty_eases_with_age() {
        assert_eq!(required_leading_zeros(1, 700), 64);
        assert_eq!(
            required_leading_zeros(100, 700),
            64 - (2.0f64 / 700f64.log10() * 63.0).floor() as u32
        );
        assert_eq!(required_leading_zeros(700, 700), 1);
        assert_eq!(required_leading_zeros(1_000_000, 700), 1);
        assert!(required_leading_zeros(50, 14_000) > required_leading_zeros(5_000, 14_000));
    }

    #[test]
    fn proof_of_work_finds_a_valid_nonce_and_honours_limits() {
        let found = proof_of_work(
            &json!({"entity_id": "5-42", "age": 700, "difficulty": 700}),
            &|| false,
        )
        .expect("one zero is easy")
        .output;
        let hash = found["hash"].as_str().expect("hash");
        let nonce = found["nonce"].as_str().expect("nonce");
        assert_eq!(
            hash,
            hex::encode(Sha256::digest(format!("5-42_{nonce}_700").as_bytes()))
        );
        assert!(hash.starts_with('0'));
        let exhausted = proof_of_work(
            &json!({"entity_id": "5-42", "age": 2, "difficulty": 700, "max_iterations": 10}),
            &|| false,
        );
        assert_eq!(
            exhausted.expect_err("too hard").code,
            "TOOL_ITERATIONS_EXHAUSTED"
        );
        let cancelled = proof_of_work(
            &json!({"entity_id": "5-42", "age": 2, "difficulty": 700}),
            &|| true,
        );
        assert_eq!(cancelled.expect_err("cancelled").code, "TOOL_CANCELLED");
    }

    #[test]
    fn schema_validation_reports_errors() {
        let answer = validate_schema(
            &json!({"data": {"n": "x"}, "schema": {"properties": {"n": {"type": "integer"}}}}),
        )
        .expect("runs")
        .output;
        assert_eq!(answer["valid"], false);
        assert_eq!(answer["errors"][0]["instance_path"], "/n");
        assert!(validate_schema(&json!({"data": 1, "schema": {"type": "bogus"}})).is_err());
    }

    #[test]
    fn every_tool_registers() {
        assert_eq!(structs_tools().expect("valid tools").iter().count(), 5);
    }
}
