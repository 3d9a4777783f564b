use prost_types::FileDescriptorSet;
use serde_json::json;

use super::*;
use crate::envelope::TenantId;
use crate::registry::memory::MemoryStore;
use crate::registry::model::ToolAnnotations;
use crate::registry::{RegistrationLimits, Registry, ServiceSpec, ToolSpec};

fn tool(name: &str, schema: serde_json::Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: Some(schema),
        output_schema: Some(json!({"type": "object"})),
        capabilities: Vec::new(),
        timeout_ms: Some(1500),
        domains: Vec::new(),
        categories: Vec::new(),
        annotations: ToolAnnotations {
            title: format!("{name} title"),
            read_only: Some(true),
            ..ToolAnnotations::default()
        },
    }
}

fn spec(tools: Vec<ToolSpec>) -> ServiceSpec {
    ServiceSpec {
        name: "github".into(),
        version: "1.2.3".into(),
        endpoint: "http://127.0.0.1:1".into(),
        tools,
        ttl: None,
        instance_id: String::new(),
    }
}

/// `encoded` equals the generated message `generated` builds, encoded, when two builds
/// around it agree (a service's uptime may turn a second between them).
fn assert_same_bytes(
    generated: impl Fn() -> pb::ServiceEvent,
    encoded: impl Fn() -> SharedMessage,
) {
    for _ in 0..3 {
        let before = generated();
        let wire = encoded();
        if generated() == before {
            assert_eq!(wire.0, before.encode_to_vec());
            return;
        }
    }
    panic!("the uptime kept changing");
}

/// A change's event and a snapshot's ADDED, encoded from the tools' kept bytes, are the
/// bytes of the generated messages, field for field, for a service with tools (schemas,
/// annotations) and for one without; so are REMOVED and UPDATED with tool changes.
#[tokio::test]
async fn encoded_events_are_the_generated_messages_bytes() {
    let registry = Registry::new(
        MemoryStore::start(16, 16),
        RegistrationLimits::default(),
        16,
    );
    let health = ProviderHealthBook::default();
    let mut events = registry.watch(TenantId(0)).events;
    let schema = json!({"type": "object", "required": ["q"],
                        "properties": {"q": {"type": "string", "maxLength": 9}}});
    registry
        .register(
            TenantId(0),
            &spec(vec![tool("search", schema.clone()), tool("get", schema)]),
        )
        .expect("registered");
    registry
        .register(
            TenantId(0),
            &spec(vec![tool("get", json!({"type": "object"}))]),
        )
        .expect("updated");
    let entry = registry.register(TenantId(0), &spec(Vec::new()));
    entry.expect("no tools");
    for _ in 0..3 {
        let event = events.recv().await.expect("an event");
        let event = event.event().expect("kept");
        assert_same_bytes(
            || convert::event_to_pb(&event, &health),
            || {
                let parts = convert::event_parts(&event);
                encoded_event(parts, event.entry.as_deref(), &health)
            },
        );
    }
    let snapshot = registry.watch(TenantId(0));
    let service = &snapshot.services[0];
    let added = || pb::ServiceEvent {
        r#type: pb::ServiceEventType::Added as i32,
        revision: snapshot.revision,
        service_name: service.name.to_string(),
        service: Some(convert::discovery_info(service, &health)),
        tool_changes: Vec::new(),
    };
    assert_same_bytes(added, || {
        let head = pb::ServiceEvent {
            service: None,
            ..added()
        };
        encoded_event((head, pb::ServiceEvent::default()), Some(service), &health)
    });
}

/// Each twin has the fields and numbers of its message.
#[test]
fn the_twins_match_the_proto() {
    let set = FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let fields_of = |name: &str| {
        let message = set
            .file
            .iter()
            .flat_map(|file| &file.message_type)
            .find(|message| message.name() == name)
            .unwrap_or_else(|| panic!("{name} is in the descriptor set"));
        let mut fields: Vec<(&str, i32)> = message
            .field
            .iter()
            .map(|field| (field.name(), field.number()))
            .collect();
        fields.sort();
        fields
    };
    let twins: [(&str, &[(&str, i32)]); 6] = [
        (
            "RegisterServiceResponse",
            &[
                ("expires_at", 3),
                ("lease_id", 2),
                ("meta", 1),
                ("tools", 4),
            ],
        ),
        ("WatchServicesResponse", &[("event", 2), ("meta", 1)]),
        ("GetToolResponse", &[("meta", 1), ("tool", 2)]),
        (
            "ListToolsResponse",
            &[("meta", 1), ("next_page_token", 3), ("tools", 2)],
        ),
        ("ToolMatch", &[("score", 2), ("tool", 1)]),
        (
            "SearchToolsResponse",
            &[("matches", 2), ("meta", 1), ("total_matches", 3)],
        ),
    ];
    for (name, expected) in twins {
        assert_eq!(fields_of(name), expected, "{name} and its twin differ");
    }
}

/// Answers built from the tools' kept bytes are the bytes of the generated answers, and
/// decode as them.
#[tokio::test]
async fn tool_answers_are_the_generated_answers_bytes() {
    let registry = Registry::new(
        MemoryStore::start(16, 16),
        RegistrationLimits::default(),
        16,
    );
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let entry = registry
        .register(
            TenantId(0),
            &spec(vec![tool("search", schema.clone()), tool("get", schema)]),
        )
        .expect("registered");
    let meta = Some(pb::Meta {
        tenant_id: 4,
        correlation_id: "c".into(),
        ..Default::default()
    });
    let tools = entry.tools();
    let wire = ListToolsResponseWire {
        meta: meta.clone(),
        tools: tools
            .iter()
            .map(|tool| SharedMessage::tool(tool, &entry))
            .collect(),
        next_page_token: "next".into(),
    };
    let generated = pb::ListToolsResponse {
        meta: meta.clone(),
        tools: tools
            .iter()
            .map(|tool| convert::tool_to_pb(tool, &entry))
            .collect(),
        next_page_token: "next".into(),
    };
    assert_eq!(wire.encode_to_vec(), generated.encode_to_vec());
    let read: pb::ListToolsResponse = decoded(&wire).expect("decodes");
    assert_eq!(read, generated);
    let wire = SearchToolsResponseWire {
        meta: meta.clone(),
        matches: vec![ToolMatchWire {
            tool: Some(SharedMessage::tool(&tools[1], &entry)),
            score: 1.5,
        }],
        total_matches: 1,
    };
    let generated = pb::SearchToolsResponse {
        meta: meta.clone(),
        matches: vec![pb::ToolMatch {
            tool: Some(convert::tool_to_pb(&tools[1], &entry)),
            score: 1.5,
        }],
        total_matches: 1,
    };
    assert_eq!(wire.encode_to_vec(), generated.encode_to_vec());
    let wire = GetToolResponseWire {
        meta: meta.clone(),
        tool: Some(SharedMessage::tool(&tools[0], &entry)),
    };
    let generated = pb::GetToolResponse {
        meta: meta.clone(),
        tool: Some(convert::tool_to_pb(&tools[0], &entry)),
    };
    assert_eq!(wire.encode_to_vec(), generated.encode_to_vec());
    let expires_at = Some(prost_types::Timestamp {
        seconds: 1_900_000_000,
        nanos: 5,
    });
    let wire = RegisterServiceResponseWire {
        meta: meta.clone(),
        lease_id: "lease".into(),
        expires_at,
        tools: tools
            .iter()
            .map(|tool| SharedMessage::tool(tool, &entry))
            .collect(),
    };
    let generated = pb::RegisterServiceResponse {
        meta,
        lease_id: "lease".into(),
        expires_at,
        tools: tools
            .iter()
            .map(|tool| convert::tool_to_pb(tool, &entry))
            .collect(),
    };
    assert_eq!(wire.encode_to_vec(), generated.encode_to_vec());
    let read: pb::RegisterServiceResponse = decoded(&wire).expect("decodes");
    assert_eq!(read, generated);
}

/// A watch response decodes as the generated message, and as the twin keeps the event's
/// bytes as they came.
#[test]
fn a_watch_response_decodes_as_the_generated_one() {
    let event = pb::ServiceEvent {
        r#type: pb::ServiceEventType::Removed as i32,
        revision: 7,
        service_name: "github".into(),
        ..Default::default()
    };
    let wire = WatchServicesResponseWire {
        meta: Some(pb::Meta {
            tenant_id: 3,
            ..Default::default()
        }),
        event: Some(SharedMessage(event.encode_to_vec().into())),
    };
    let generated: pb::WatchServicesResponse = decoded(&wire).expect("decodes");
    assert_eq!(generated.event, Some(event));
    assert_eq!(generated.meta.map(|meta| meta.tenant_id), Some(3));
    let again = WatchServicesResponseWire::decode(wire.encode_to_vec().as_slice())
        .expect("decodes as the twin");
    assert_eq!(again, wire);
}

/// The answer bound measures a service as it is encoded: its tools' bytes and the rest make
/// its `DiscoveryInfo`, byte for byte, and each tool change its field of the event.
#[tokio::test]
async fn the_answer_bound_measures_a_service_as_it_is_encoded() {
    use crate::grpc::convert::{discovery_info, tool_change_to_pb};
    use crate::grpc::page_bytes::ANSWER_BOUND;
    use crate::registry::store::ToolChange;
    use crate::registry::validate::validate_service;
    let registry = Registry::new(
        MemoryStore::start(16, 16),
        RegistrationLimits::default(),
        16,
    );
    let health = ProviderHealthBook::default();
    let schema = json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 7}}});
    let registered = spec(vec![tool("search", schema.clone()), tool("get", schema)]);
    let entry = registry
        .register(TenantId(0), &registered)
        .expect("registered");
    let validated = validate_service(&registered, registry.limits()).expect("valid");
    let tools = (ANSWER_BOUND.tools)(&validated);
    let measured = |changes: &[ToolChange]| tools + (ANSWER_BOUND.rest)(&entry, changes);
    // The uptime may turn a second between the measure and the message.
    let same = (0..3).any(|_| measured(&[]) == discovery_info(&entry, &health).encoded_len());
    assert!(same, "{} measured", measured(&[]));
    let change = ToolChange {
        tool: entry.tools()[0].name.clone(),
        old_sha256: Some("a".repeat(64)),
        new_sha256: None,
    };
    let event = pb::ServiceEvent {
        tool_changes: vec![tool_change_to_pb(&change)],
        ..Default::default()
    };
    assert_eq!(
        measured(std::slice::from_ref(&change)) - measured(&[]),
        event.encoded_len()
    );
}
