//! Unit tests of the agent store.

use super::*;

fn config(name: &str) -> AgentConfig {
    AgentConfig {
        name: name.to_owned(),
        model: None,
        system_prompt: None,
        allowed_tools: None,
    }
}

#[tokio::test]
async fn names_are_unique_per_tenant_and_lookups_take_ids_or_names() {
    let store = Arc::new(AgentStore::new(10, 0, 0));
    let agent = store
        .create(TenantId(1), config("helper"))
        .await
        .expect("created");
    assert!(matches!(
        store.create(TenantId(1), config("helper")).await,
        Err(AgentError::NameTaken(_))
    ));
    store
        .create(TenantId(2), config("helper"))
        .await
        .expect("another tenant may use the name");
    assert_eq!(
        store.get(TenantId(1), "helper").expect("by name").id,
        agent.id
    );
    assert_eq!(
        store
            .get(TenantId(1), &agent.id.to_string())
            .expect("by id")
            .id,
        agent.id
    );
    assert!(
        matches!(
            store.get(TenantId(2), &agent.id.to_string()),
            Err(AgentError::NotFound(_))
        ),
        "ids do not cross tenants"
    );
}

#[tokio::test]
async fn the_bound_drops_whole_turns() {
    let store = Arc::new(AgentStore::new(4, 0, 0));
    let agent = store
        .create(TenantId(0), config("a"))
        .await
        .expect("created");
    let mut data = agent.data();
    for turn in 0..3 {
        data.push(CanonicalMessage::new(
            Role::User,
            format!("question {turn}"),
        ));
        data.push(CanonicalMessage::new(Role::Assistant, "calling".into()));
        data.push(CanonicalMessage::new(Role::System, "result".into()));
    }
    data.enforce_bound(4, 0);
    let first = &data.conversation.front().expect("kept").message;
    assert_eq!(
        (first.role, first.content.as_str()),
        (Role::User, "question 2")
    );
    assert_eq!(data.len(), 3);
}

/// The bound in bytes drops whole turns too, and the count of bytes follows every push,
/// drop and truncation.
#[tokio::test]
async fn the_byte_bound_drops_whole_turns_and_the_count_follows() {
    let store = Arc::new(AgentStore::new(100, 0, 0));
    let agent = store
        .create(TenantId(0), config("a"))
        .await
        .expect("created");
    let mut data = agent.data();
    let mut metadata = std::collections::HashMap::new();
    metadata.insert("k".to_owned(), "vv".to_owned());
    for turn in 0..3 {
        data.push(CanonicalMessage::new(
            Role::User,
            format!("question {turn}"),
        ));
        data.push(CanonicalMessage::with_metadata(
            Role::Assistant,
            "answer".into(),
            metadata.clone(),
        ));
    }
    // Each turn: "question N" (10) + "answer" (6) + "k" + "vv" (3) = 19 bytes.
    assert_eq!(data.bytes(), 57);
    data.enforce_bound(100, 40);
    assert_eq!(data.len(), 4, "the oldest turn went whole");
    assert_eq!(data.bytes(), 38);
    let first = &data.conversation.front().expect("kept").message;
    assert_eq!(first.content, "question 1");

    data.truncate(3);
    assert_eq!(data.bytes(), 29);
    data.enforce_bound(100, 0);
    assert_eq!(data.len(), 3, "0 bounds nothing");
}

#[tokio::test]
async fn transitions_follow_the_machine_and_are_remembered() {
    let store = Arc::new(AgentStore::new(10, 0, 0));
    let agent = store
        .create(TenantId(0), config("a"))
        .await
        .expect("created");
    let mut data = agent.data();
    data.transition(AgentState::Thinking, "")
        .expect("idle -> thinking");
    assert!(
        data.transition(AgentState::Idle, "").is_err(),
        "thinking -> idle is refused"
    );
    assert_eq!(data.status.state, AgentState::Thinking);
    assert_eq!(data.transitions.len(), 1);
}

#[tokio::test]
async fn a_tenant_at_its_most_agents_is_refused_until_one_is_deleted() {
    let store = Arc::new(AgentStore::new(10, 0, 2));
    store
        .create(TenantId(1), config("a"))
        .await
        .expect("created");
    store
        .create(TenantId(1), config("b"))
        .await
        .expect("created");
    assert!(matches!(
        store.create(TenantId(1), config("c")).await,
        Err(AgentError::QuotaExceeded { limit: 2, .. })
    ));
    assert!(
        matches!(
            store.create(TenantId(1), config("a")).await,
            Err(AgentError::NameTaken(_))
        ),
        "a taken name says so, whatever the count"
    );
    store
        .create(TenantId(2), config("c"))
        .await
        .expect("tenants count apart");
    store.delete(TenantId(1), "a").await.expect("deleted");
    store
        .create(TenantId(1), config("c"))
        .await
        .expect("room again");
}

#[tokio::test]
async fn listing_pages_in_creation_order_and_an_emptied_tenant_leaves_nothing() {
    let store = Arc::new(AgentStore::new(10, 0, 0));
    let names = ["z", "a", "m"];
    for name in names {
        store
            .create(TenantId(1), config(name))
            .await
            .expect("created");
    }
    store
        .create(TenantId(2), config("other"))
        .await
        .expect("created");
    let first = store.list(TenantId(1), None, 2);
    let first_names: Vec<_> = first.iter().map(|a| a.config.name.as_str()).collect();
    assert_eq!(first_names, ["z", "a"]);
    let rest = store.list(TenantId(1), Some(first[1].order), 2);
    let rest_names: Vec<_> = rest.iter().map(|a| a.config.name.as_str()).collect();
    assert_eq!(rest_names, ["m"]);

    for name in names {
        store.delete(TenantId(1), name).await.expect("deleted");
    }
    assert!(store.get(TenantId(1), "z").is_err());
    let tenants = store.tenants.read().expect("not poisoned");
    assert!(
        !tenants.contains_key(&TenantId(1)),
        "an emptied tenant keeps no entry"
    );
    assert!(tenants.contains_key(&TenantId(2)));
}

/// The metrics' agent totals add up every tenant's agents by state, and their conversations.
#[tokio::test]
async fn totals_count_every_tenants_agents_by_state_and_their_conversations() {
    let store = Arc::new(AgentStore::new(10, 0, 0));
    assert_eq!(store.totals(), AgentTotals::default());
    let first = store
        .create(TenantId(1), config("a"))
        .await
        .expect("created");
    store
        .create(TenantId(2), config("a"))
        .await
        .expect("created");
    {
        let mut data = first.data();
        data.transition(AgentState::Thinking, "")
            .expect("idle -> thinking");
        data.busy = true;
        data.push(CanonicalMessage::new(Role::User, "hello".into()));
    }
    let totals = store.totals();
    assert_eq!(
        totals.by_state,
        [1, 1, 0, 0],
        "idle, thinking, toolcall, reflecting"
    );
    assert_eq!(totals.busy, 1);
    assert_eq!(totals.messages, 1);
    assert_eq!(totals.conversation_bytes, 5);
    first.data().busy = false;
    store.delete(TenantId(1), "a").await.expect("deleted");
    assert_eq!(store.totals().by_state, [1, 0, 0, 0]);
}
