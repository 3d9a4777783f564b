//! How large one service's description may grow. Every discovery answer naming a service
//! (`GetService`, a page of services, a watch event) carries it whole, with its tools and live
//! instances, and gRPC clients read at most 4 MiB in one message by default: a registration
//! that would make its service's description larger is refused before anything is stored,
//! rather than stored and then unreadable (every watcher of the tenant failing on its event).
//!
//! The domain knows no encoding: the transport supplies the measures (see
//! `grpc::page_bytes::ANSWER_BOUND`) and [`super::Registry::with_answer_bound`] applies them.

use super::error::{RegistryError, ViolationKind};
use super::model::{ServiceEntry, ValidatedService};
use super::store::ToolChange;

/// The transport's measures of the largest message describing one service, and its bound.
#[derive(Debug, Clone, Copy)]
pub struct AnswerBound {
    /// Most bytes of the message.
    pub max_bytes: usize,
    /// The bytes a registration's tools take in it (measured outside the store's lock).
    pub tools: fn(&ValidatedService) -> usize,
    /// The bytes the rest takes: the service's name, version, endpoint and live instances,
    /// and the tool changes announced with it.
    pub rest: fn(&ServiceEntry, &[ToolChange]) -> usize,
}

/// An [`AnswerBound`] with a registration's tools measured: what is left is for the rest.
#[derive(Debug, Clone, Copy)]
pub struct AnswerRoom {
    /// The bytes the registration's tools take.
    tools: usize,
    /// The bound measured against.
    bound: AnswerBound,
}

impl AnswerBound {
    /// Measures `service`'s tools; refused when they alone take more than the bound.
    pub fn room(&self, service: &ValidatedService) -> Result<AnswerRoom, RegistryError> {
        let tools = (self.tools)(service);
        if tools > self.max_bytes {
            return Err(RegistryError::invalid(
                "registration.tools",
                ViolationKind::Field,
                format!(
                    "the {} tools take {tools} bytes in a discovery answer, over the {} a gRPC \
                     client reads in one message by default (4 MiB, less room for the \
                     envelope): register fewer or smaller tools, or split them across services",
                    service.tools.len(),
                    self.max_bytes
                ),
            ));
        }
        Ok(AnswerRoom {
            tools,
            bound: *self,
        })
    }
}

impl AnswerRoom {
    /// The bytes the registration's tools take.
    pub fn tools(&self) -> usize {
        self.tools
    }

    /// Checks `entry` (the service as the registration leaves it, announced with `changes`)
    /// against the bound. Its tools are its leading contract's: measured when that registered
    /// (replicas of a newer version may lead: the service is described with their tools beside
    /// every instance), else counted as the registration's.
    pub fn check(&self, entry: &ServiceEntry, changes: &[ToolChange]) -> Result<(), RegistryError> {
        let tools = entry.contract.answer_bytes().unwrap_or(self.tools);
        let total = tools + (self.bound.rest)(entry, changes);
        if total > self.bound.max_bytes {
            return Err(RegistryError::invalid(
                "registration",
                ViolationKind::Field,
                format!(
                    "service {} would take {total} bytes in a discovery answer (its tools \
                     {}, its {} instances and the changes announced the rest), over the {} a \
                     gRPC client reads in one message by default: register fewer or smaller \
                     tools, or fewer instances",
                    entry.name,
                    tools,
                    entry.instances.len(),
                    self.bound.max_bytes
                ),
            ));
        }
        Ok(())
    }
}
