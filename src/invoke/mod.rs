//! The invocation engine: every tool call through the control plane is resolved, validated
//! against the schema compiled at registration, rate limited, bounded by a deadline, retried
//! only under the caller's policy, checked against the output schema, and recorded.

pub mod audit;
pub mod caller;
mod checks;
mod engine;
pub mod error;
pub mod health;
pub mod heavy;
mod in_flight;
pub mod limits;
pub mod policy;
mod record_canonical;
mod record_checkpoints;
mod record_file;
mod record_filter;
mod record_guard;
mod record_index;
pub(crate) mod record_lines_check;
mod record_lookup;
mod record_readers;
mod record_replay;
mod record_ring;
pub mod record_stats;
mod record_status;
mod record_sync;
pub mod records;
mod route;
mod tool_bucket;

pub use checks::check_input;
pub use engine::{
    DEFAULT_MAX_TIMEOUT, Failed, Invocation, Invoked, Invoker, InvokerOptions, answer_within,
};
pub use error::InvokeError;
pub use record_guard::reason_of;
pub use record_lookup::{FILE_BYTES_PER_PAGE, FilePage, HeldPage};
