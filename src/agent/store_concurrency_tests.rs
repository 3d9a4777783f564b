//! Agents kept on disk under concurrent changes: tasks create, move and delete agents of a few
//! names at once (clashing on names, on busy agents and on agents deleted meanwhile). What
//! memory holds when they are done must be what a server reads back from the directory:
//! memory and disk never part.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::agent::types::AgentState;

const TENANTS: [TenantId; 2] = [TenantId(1), TenantId(2)];
const NAMES: [&str; 4] = ["planner", "coder", "critic", "runner"];
const TASKS: u64 = 8;
const CHANGES_PER_TASK: usize = 150;

/// What a restart must bring back of each agent: tenant, name, id, state and its history.
type Kept = Vec<(TenantId, String, String, AgentState, usize)>;

fn kept_of(store: &AgentStore) -> Kept {
    let mut kept = Vec::new();
    for tenant in TENANTS {
        for agent in store.list(tenant, None, usize::MAX) {
            let data = agent.data();
            kept.push((
                tenant,
                agent.config.name.clone(),
                agent.id.to_string(),
                data.status.state,
                data.transitions.len(),
            ));
        }
    }
    kept
}

/// Makes changes at random; answers how many of them were made (not refused).
async fn change_at_random(store: Arc<AgentStore>, seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut made = 0;
    for _ in 0..CHANGES_PER_TASK {
        let tenant = TENANTS[rng.random_range(0..TENANTS.len())];
        let name = NAMES[rng.random_range(0..NAMES.len())];
        // Refusals (a name taken, an agent busy or gone, a move the machine forbids) are part
        // of the run.
        let outcome = match rng.random_range(0..4) {
            0 => {
                let config = AgentConfig {
                    name: name.to_owned(),
                    model: None,
                    system_prompt: None,
                    allowed_tools: None,
                };
                store.create(tenant, config).await.map(drop)
            }
            1 => store.delete(tenant, name).await,
            _ => {
                let to = AgentState::ALL[rng.random_range(0..AgentState::ALL.len())];
                store.transition(tenant, name, to).await.map(drop)
            }
        };
        made += usize::from(outcome.is_ok());
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_memory_holds_after_concurrent_changes_is_read_back_from_disk() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let store = Arc::new(
        AgentStore::new(100, 0, 0)
            .kept_in(directory.path())
            .expect("agents read"),
    );
    let tasks: Vec<_> = (0..TASKS)
        .map(|seed| tokio::spawn(change_at_random(Arc::clone(&store), seed)))
        .collect();
    let mut made = 0;
    for task in tasks {
        made += task.await.expect("a task of changes");
    }
    assert!(made > TASKS as usize, "changes were made: {made}");
    let in_memory = kept_of(&store);
    drop(store);

    let read_back = AgentStore::new(100, 0, 0)
        .kept_in(directory.path())
        .expect("agents read back");
    assert_eq!(kept_of(&read_back), in_memory);
}
