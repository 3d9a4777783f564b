//! Answers that list many items (pages of services, tools or agents, search results, the
//! services a pre-flight check found) kept within what gRPC clients read by default: 4 MiB a
//! message (tonic, grpc-go, grpcio, grpc-js and grpcurl all refuse a larger one, OUT_OF_RANGE
//! or RESOURCE_EXHAUSTED, unless set otherwise). A page of 100 services of 10 tools with 5 KB
//! schemas is 5 MB: answered whole, no default client could read it, and `toolplane services`
//! failed. Such a page is cut short instead, at least one item in it, and the next page goes
//! on from where it stopped. A single service larger than that is refused when it registers
//! ([`ANSWER_BOUND`]).

use std::sync::LazyLock;

use prost::Message;

use super::convert;
use crate::agent::runner::MessageBound;
use crate::agent::types::CanonicalMessage;
use crate::invoke::health::ProviderHealthBook;
use crate::registry::answer_bound::AnswerBound;
use crate::registry::model::{ServiceEntry, ValidatedService};
use crate::registry::store::ToolChange;

/// The most bytes of items one answer carries, leaving room for the rest of the answer (its
/// envelope and page token).
pub const MAX_ANSWER_ITEM_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;

/// The bound on one service's description (see [`crate::registry::answer_bound`]): a
/// registration leaving its service larger than one item of an answer may be is refused. The
/// largest message describing a service is the watch event announcing its change: the service
/// whole (`DiscoveryInfo`) and the tools changed.
pub const ANSWER_BOUND: AnswerBound = AnswerBound {
    max_bytes: MAX_ANSWER_ITEM_BYTES,
    tools: tools_bytes,
    rest: rest_bytes,
};

/// The bound on one message of an agent's conversation (see
/// [`crate::agent::runner::MessageBound`]): a turn that would add a larger one is undone.
pub const MESSAGE_BOUND: MessageBound = MessageBound {
    max_bytes: MAX_ANSWER_ITEM_BYTES,
    size: message_bytes,
};

/// The bytes `message` takes as it is encoded in an answer.
fn message_bytes(message: &CanonicalMessage) -> usize {
    super::agent_convert::message_to_pb(message).encoded_len()
}

/// The bytes `service`'s tools take in its `DiscoveryInfo` (field 4, each with its key and
/// length).
fn tools_bytes(service: &ValidatedService) -> usize {
    let (name, version) = (service.name.as_str(), service.version.as_str());
    // Encoded once, and kept for the answers that will carry them.
    service
        .tools
        .iter()
        .map(|tool| {
            let bytes = convert::encoded_tool_of(tool, name, version).len();
            prost::encoding::key_len(4) + prost::encoding::encoded_len_varint(bytes as u64) + bytes
        })
        .sum()
}

/// The bytes of `entry`'s `DiscoveryInfo` but its tools (its instances counted healthy, as
/// large as unhealthy), and of `changes` in the watch event announcing it.
fn rest_bytes(entry: &ServiceEntry, changes: &[ToolChange]) -> usize {
    static NONE_FAILING: LazyLock<ProviderHealthBook> = LazyLock::new(ProviderHealthBook::default);
    let (head, tail) = convert::discovery_info_parts(entry, &NONE_FAILING);
    let changes: usize = changes
        .iter()
        .map(|change| prost::encoding::message::encoded_len(5, &convert::tool_change_to_pb(change)))
        .sum();
    head.encoded_len() + tail.encoded_len() + changes
}

/// The first of `items` that fit in one answer ([`MAX_ANSWER_ITEM_BYTES`] of their encoded
/// sizes, as `size` gives them, each repeated field's key and length counted too), in order:
/// at least one (an item larger than that goes alone). Items past the first that does not fit
/// are never made (`items` is read no further).
pub fn fitting<T>(items: impl IntoIterator<Item = T>, size: impl Fn(&T) -> usize) -> Vec<T> {
    let mut kept = Vec::new();
    let mut total = 0usize;
    for item in items {
        // A field key (1 byte for these fields) and a length of at most 5 bytes.
        total = total.saturating_add(size(&item) + 6);
        if !kept.is_empty() && total > MAX_ANSWER_ITEM_BYTES {
            break;
        }
        kept.push(item);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items are taken while they fit; the first is always taken.
    #[test]
    fn items_are_taken_while_they_fit_and_the_first_always() {
        let mib = 1024 * 1024;
        let fit = |sizes: &[usize]| fitting(sizes.iter().copied(), |size| *size).len();
        assert_eq!(fit(&[]), 0);
        assert_eq!(fit(&[10; 100]), 100);
        assert_eq!(fit(&[mib; 5]), 3, "three MiB fit, four do not");
        assert_eq!(fit(&[5 * mib, 1]), 1, "a large first item goes alone");
        assert_eq!(fit(&[MAX_ANSWER_ITEM_BYTES - 6, 0]), 1);
    }
}
