//! The search index of one service's tools: for each term, the tools holding it and how often.
//!
//! One is kept with each [`super::instance::Contract`] (a registration's tools), built on the
//! first search that reads it: a search then looks its words up in each live service's index
//! and touches only the tools that hold them, instead of every tool of the tenant. A contract
//! never changes, so its index is never stale; a re-registration with other tools is a new
//! contract with an index of its own, and one that leaves is dropped with it.

use std::collections::HashMap;
use std::sync::Arc;

use super::model::RegisteredTool;
use super::search_terms::tool_terms;

/// One tool holding a term: its index in the contract's tools and how often it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posting {
    /// The tool's index in the contract's tools.
    pub tool: u32,
    /// How often the tool's document holds the term (its name's words count more).
    pub frequency: u16,
}

/// The search index of one service's tools.
#[derive(Debug, Default)]
pub struct ServiceSearchIndex {
    postings: HashMap<Box<str>, Box<[Posting]>>,
    lengths: Box<[u32]>,
    total_length: u64,
}

impl ServiceSearchIndex {
    /// The index of `tools` as offered by the service named `service`.
    pub fn build(service: &str, tools: &[Arc<RegisteredTool>]) -> Self {
        let mut postings: HashMap<String, Vec<Posting>> = HashMap::new();
        let mut lengths = Vec::with_capacity(tools.len());
        for (index, tool) in tools.iter().enumerate() {
            let terms = tool_terms(
                service,
                tool.name.as_str(),
                &tool.annotations.title,
                &tool.description,
                &tool.input_schema,
            );
            lengths.push(terms.values().map(|&count| u32::from(count)).sum());
            for (term, frequency) in terms {
                postings.entry(term).or_default().push(Posting {
                    tool: index as u32,
                    frequency,
                });
            }
        }
        Self {
            postings: postings
                .into_iter()
                .map(|(term, tools)| (term.into_boxed_str(), tools.into_boxed_slice()))
                .collect(),
            total_length: lengths.iter().map(|&length| u64::from(length)).sum(),
            lengths: lengths.into_boxed_slice(),
        }
    }

    /// The tools holding `term`, in tool order.
    pub fn postings(&self, term: &str) -> &[Posting] {
        self.postings.get(term).map_or(&[], |postings| postings)
    }

    /// How many terms the `tool`th tool's document holds, counting repeats.
    pub fn length(&self, tool: usize) -> u32 {
        self.lengths[tool]
    }

    /// The lengths of every tool's document together.
    pub fn total_length(&self) -> u64 {
        self.total_length
    }
}
