//! The seed 002 types: JSON forms checked against the seed's own examples, the state machine
//! over every pair of states, and the validation edges.

use chrono::{Duration as ChronoDuration, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use toolplane::agent::SentinelError;
use toolplane::agent::types::{
    AgentId, AgentState, AgentStatus, CanonicalMessage, ChatCompletionRequest,
    ChatCompletionResponse, ErrorResponse, HealthState, HealthStatus, MessageId, Role, TokenUsage,
};
use uuid::Uuid;

/// Parses the seed's JSON into `T`, serializes it back, and expects the same JSON.
fn round_trip<T: Serialize + serde::de::DeserializeOwned>(seed: Value) -> T {
    let parsed: T = serde_json::from_value(seed.clone()).expect("the seed's JSON parses");
    assert_eq!(serde_json::to_value(&parsed).expect("serializes"), seed);
    parsed
}

/// Protects the seed's JSON form or rules.
#[test]
fn ids_are_transparent_uuids() {
    let message: MessageId = round_trip(json!("123e4567-e89b-12d3-a456-426614174000"));
    let agent: AgentId = round_trip(json!("123e4567-e89b-12d3-a456-426614174001"));
    assert_eq!(
        Uuid::from(message).to_string(),
        "123e4567-e89b-12d3-a456-426614174000"
    );
    assert_eq!(agent.to_string(), "123e4567-e89b-12d3-a456-426614174001");
    assert_ne!(MessageId::new(), MessageId::default());
}

/// Protects the seed's JSON form or rules.
#[test]
fn enums_are_lowercase() {
    for (role, text) in [
        (Role::User, "user"),
        (Role::Assistant, "assistant"),
        (Role::System, "system"),
    ] {
        assert_eq!(round_trip::<Role>(json!(text)), role);
    }
    for (state, text) in [
        (AgentState::Idle, "idle"),
        (AgentState::Thinking, "thinking"),
        (AgentState::ToolCall, "toolcall"),
        (AgentState::Reflecting, "reflecting"),
    ] {
        assert_eq!(round_trip::<AgentState>(json!(text)), state);
    }
    for (health, text) in [
        (HealthState::Healthy, "healthy"),
        (HealthState::Ready, "ready"),
        (HealthState::Alive, "alive"),
        (HealthState::Unhealthy, "unhealthy"),
    ] {
        assert_eq!(round_trip::<HealthState>(json!(text)), health);
    }
}

/// Protects the seed's JSON form or rules.
#[test]
fn canonical_message_matches_the_seed() {
    let message: CanonicalMessage = round_trip(json!({
        "id": "123e4567-e89b-12d3-a456-426614174000", "role": "user", "content": "Hello, how are you?",
        "timestamp": "2025-01-20T10:00:00Z", "metadata": {"source": "web", "version": "1.0"}
    }));
    assert_eq!(message.metadata["source"], "web");
    // Empty metadata is omitted, and may be left out on input.
    round_trip::<CanonicalMessage>(
        json!({"id": "123e4567-e89b-12d3-a456-426614174000", "role": "system", "content": "x", "timestamp": "2025-01-20T10:00:00Z"}),
    );
}

/// Protects the seed's JSON form or rules.
#[test]
fn requests_responses_and_usage_match_the_seed() {
    let message = json!({"id": "123e4567-e89b-12d3-a456-426614174000", "role": "user", "content": "hi", "timestamp": "2025-01-20T10:00:00Z"});
    let request: ChatCompletionRequest = round_trip(
        json!({"messages": [message.clone()], "model": "gpt-4", "temperature": 0.7, "max_tokens": 1000, "stream": false}),
    );
    assert_eq!(request.max_tokens, Some(1000));
    let minimal: ChatCompletionRequest =
        serde_json::from_value(json!({"messages": [message.clone()]})).expect("defaults");
    assert!(!minimal.stream && minimal.model.is_none());
    let response: ChatCompletionResponse = round_trip(
        json!({"message": message, "model": "gpt-4", "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}),
    );
    response
        .usage
        .expect("usage")
        .validate()
        .expect("150 = 100 + 50");
    round_trip::<AgentStatus>(
        json!({"id": "123e4567-e89b-12d3-a456-426614174001", "state": "idle", "last_activity": "2025-01-20T10:00:00Z", "messages_processed": 42}),
    );
    round_trip::<HealthStatus>(json!({"status": "healthy", "timestamp": "2025-01-20T10:00:00Z"}));
    round_trip::<ErrorResponse>(
        json!({"code": "INVALID_REQUEST", "message": "Invalid request format", "details": {"field": "messages", "reason": "Cannot be empty"}}),
    );
    round_trip::<ErrorResponse>(json!({"code": "X", "message": "no details"}));
}

/// Protects the seed's JSON form or rules.
#[test]
fn every_transition_pair_is_checked() {
    use AgentState::{Idle, Reflecting, Thinking, ToolCall};
    let allowed = [
        (Idle, Thinking),
        (Thinking, ToolCall),
        (ToolCall, Reflecting),
        (Reflecting, Idle),
    ];
    for from in AgentState::ALL {
        for to in AgentState::ALL {
            let result = AgentState::validate_transition(from, to);
            if from == to || allowed.contains(&(from, to)) {
                assert!(result.is_ok(), "{from} -> {to} must be allowed");
            } else {
                assert_eq!(
                    result,
                    Err(SentinelError::InvalidStateTransition { from, to }),
                    "{from} -> {to} must be refused"
                );
            }
        }
    }
}

/// Protects the seed's JSON form or rules.
#[test]
fn message_validation_edges() {
    let now = Utc::now();
    assert!(
        CanonicalMessage::new(Role::User, "  \n\t ".into())
            .validate_self()
            .is_err(),
        "blank after trimming"
    );
    assert!(
        CanonicalMessage::new(Role::User, " x ".into())
            .validate_self()
            .is_ok()
    );
    let at = |offset: ChronoDuration| {
        CanonicalMessage::with_timestamp(Role::User, "x".into(), now + offset)
    };
    assert!(
        at(ChronoDuration::minutes(59)).validate_self().is_ok(),
        "59 minutes ahead"
    );
    assert!(
        at(ChronoDuration::minutes(61)).validate_self().is_err(),
        "61 minutes ahead"
    );
    assert!(
        at(-ChronoDuration::days(365 * 99)).validate_self().is_ok(),
        "99 years ago"
    );
    assert!(
        at(-ChronoDuration::days(365 * 101))
            .validate_self()
            .is_err(),
        "101 years ago"
    );
    let too_hot = ChatCompletionRequest {
        messages: vec![at(ChronoDuration::zero())],
        model: None,
        temperature: Some(2.1),
        max_tokens: None,
        stream: false,
    };
    assert!(matches!(
        too_hot.validate(),
        Err(SentinelError::DomainViolation { .. })
    ));
    let edge = ChatCompletionRequest {
        temperature: Some(2.0),
        ..too_hot.clone()
    };
    assert!(edge.validate().is_ok());
    let empty = ChatCompletionRequest {
        messages: vec![],
        ..edge
    };
    assert!(empty.validate().is_err());
}

/// Protects the seed's JSON form or rules.
#[test]
fn usage_totals_are_checked() {
    assert_eq!(TokenUsage::new(100, 50).expect("fits").total_tokens, 150);
    assert!(TokenUsage::new(u32::MAX, 1).is_err());
    assert!(
        TokenUsage {
            prompt_tokens: 1,
            completion_tokens: 1,
            total_tokens: 3
        }
        .validate()
        .is_err()
    );
}
