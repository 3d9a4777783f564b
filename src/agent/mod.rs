//! Agents (seed 002): the Sentinel domain types and state machine, conversations, the model
//! providers, and the tool-calling loop that invokes tools through the invocation engine.

pub mod builtin;
pub mod error;
pub mod model;
pub mod model_calls;
pub mod model_retries;
pub mod openai;
pub(crate) mod openai_answer;
pub(crate) mod openai_stream;
pub mod runner;
pub mod store;
pub mod turn_events;
pub mod types;

pub use error::{AgentError, SentinelError};
