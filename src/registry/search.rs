//! Tool search: a tenant's live tools ranked by how well they match a query of words, for an
//! agent choosing among more tools than fit in its prompt.
//!
//! Ranking is Okapi BM25 (k1 = 1.2, b = 0.75) over each tool's terms
//! ([`super::search_terms`]): its name (weighted), its service's name, its description and its
//! input parameters' names and descriptions. Document frequencies and the average length are
//! taken over the tools searched (the tenant's live tools passing the filters), at each search.
//!
//! Written here rather than taken from a search crate (`bm25`, `tantivy`): those keep an index
//! of their own over every tool, a second copy to keep in step with registrations, instances,
//! leases and expiry. Here each registration's tools carry their own small index
//! ([`super::search_index`], built on first use), and a search reads the live services of the
//! registry's snapshot, so it is never stale: it costs a lookup per query word per service,
//! plus the tools that hold the words.

use std::sync::Arc;

use super::error::{RegistryError, ViolationKind};
use super::model::{ServiceEntry, ToolRef};
use super::search_index::ServiceSearchIndex;
use super::search_terms::for_each_term;
use super::store::ToolFilter;

/// The longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// The most distinct words a query may hold (after stop words are left out).
pub const MAX_QUERY_TERMS: usize = 32;
/// How many matches a search answers with when the request does not say.
pub const DEFAULT_MAX_RESULTS: usize = 10;
/// The most matches a search answers with.
pub const MAX_RESULTS: usize = 100;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A query: its distinct search terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    terms: Vec<String>,
}

impl SearchQuery {
    /// Reads a query; the error names the `query` field and says what to change.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        let invalid =
            |problem: String| RegistryError::invalid("query", ViolationKind::Field, problem);
        if text.trim().is_empty() {
            return Err(invalid(
                "query is empty: give one or more words to search for".into(),
            ));
        }
        if text.len() > MAX_QUERY_BYTES {
            return Err(invalid(format!(
                "query is {} bytes; a query holds at most {MAX_QUERY_BYTES}",
                text.len()
            )));
        }
        let terms = distinct_terms(text, usize::MAX);
        if terms.is_empty() {
            return Err(invalid(format!(
                "query {text:?} has no words to search for: common words (\"the\", \"with\", \
                 \"of\" ...) and punctuation are left out"
            )));
        }
        if terms.len() > MAX_QUERY_TERMS {
            return Err(invalid(format!(
                "query holds {} distinct words; at most {MAX_QUERY_TERMS}",
                terms.len()
            )));
        }
        Ok(Self { terms })
    }

    /// A query of the first [`MAX_QUERY_TERMS`] distinct words of a longer text (a
    /// conversation), or `None` when it holds none to search for.
    pub fn from_text(text: &str) -> Option<Self> {
        let terms = distinct_terms(text, MAX_QUERY_TERMS);
        (!terms.is_empty()).then_some(Self { terms })
    }

    /// The terms searched for, stemmed and in the order first written.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }
}

/// The first `most` distinct search terms of `text`, in the order first written.
fn distinct_terms(text: &str, most: usize) -> Vec<String> {
    let mut terms = Vec::new();
    for_each_term(text, |term| {
        if terms.len() < most && !terms.contains(&term) {
            terms.push(term);
        }
    });
    terms
}

/// How many matches to answer with: `0` means [`DEFAULT_MAX_RESULTS`].
pub fn max_results(requested: i32) -> Result<usize, RegistryError> {
    match usize::try_from(requested) {
        Ok(0) => Ok(DEFAULT_MAX_RESULTS),
        Ok(count) if count <= MAX_RESULTS => Ok(count),
        _ => Err(RegistryError::invalid(
            "max_results",
            ViolationKind::Field,
            format!(
                "max_results is {requested}; give 1 to {MAX_RESULTS}, or 0 for \
                 {DEFAULT_MAX_RESULTS}"
            ),
        )),
    }
}

/// A tool that matched, and how well.
#[derive(Debug, Clone)]
pub struct SearchHit {
    /// The tool.
    pub tool: ToolRef,
    /// Its BM25 score: higher is better; comparable only within one search.
    pub score: f64,
}

/// The best matches of a search.
#[derive(Debug, Clone, Default)]
pub struct SearchResults {
    /// The best matches, best first (ties by tool name, then service name).
    pub hits: Vec<SearchHit>,
    /// How many tools matched at least one word, beside those returned.
    pub total_matches: usize,
}

/// One service searched: its entry, its index, and which of its tools pass the filters
/// (`None`: all of them).
struct Searched<'a> {
    entry: &'a Arc<ServiceEntry>,
    index: &'a ServiceSearchIndex,
    allowed: Option<Vec<bool>>,
    /// Where its tools' scores start in the scores of every tool searched.
    offset: usize,
}

impl Searched<'_> {
    fn allows(&self, tool: usize) -> bool {
        self.allowed.as_ref().is_none_or(|allowed| allowed[tool])
    }
}

/// The services searched, and over the tools passing the filters: how many, and their
/// documents' length together.
struct Corpus<'a> {
    services: Vec<Searched<'a>>,
    tools: u64,
    total_length: u64,
    /// How many tools the services hold, filtered or not: the length of the scores.
    slots: usize,
}

impl<'a> Corpus<'a> {
    fn of(services: &'a [Arc<ServiceEntry>], filter: &ToolFilter) -> Self {
        let mut corpus = Corpus {
            services: Vec::with_capacity(services.len()),
            tools: 0,
            total_length: 0,
            slots: 0,
        };
        for entry in services {
            if filter
                .service
                .as_ref()
                .is_some_and(|name| *name != entry.name)
            {
                continue;
            }
            let index = entry.contract.search_index(&entry.name);
            let tools = &entry.contract.tools;
            let allowed = filter.filters_tools().then(|| {
                tools
                    .iter()
                    .map(|tool| filter.matches_tool(tool))
                    .collect::<Vec<_>>()
            });
            match &allowed {
                None => {
                    corpus.tools += tools.len() as u64;
                    corpus.total_length += index.total_length();
                }
                Some(allowed) => {
                    for (tool, _) in allowed.iter().enumerate().filter(|(_, allowed)| **allowed) {
                        corpus.tools += 1;
                        corpus.total_length += u64::from(index.length(tool));
                    }
                }
            }
            corpus.services.push(Searched {
                entry,
                index,
                allowed,
                offset: corpus.slots,
            });
            corpus.slots += tools.len();
        }
        corpus
    }

    /// Every tool's BM25 score for `query`, by slot (0 for those holding none of its words,
    /// or not passing the filters).
    fn scores(&self, query: &SearchQuery) -> Vec<f64> {
        let documents = self.tools as f64;
        let average_length = (self.total_length as f64 / documents).max(1.0);
        let mut scores = vec![0.0f64; self.slots];
        for term in &query.terms {
            let with: usize = self
                .services
                .iter()
                .map(|service| {
                    let postings = service.index.postings(term);
                    match service.allowed {
                        None => postings.len(),
                        Some(_) => postings
                            .iter()
                            .filter(|posting| service.allows(posting.tool as usize))
                            .count(),
                    }
                })
                .sum();
            let with = with as f64;
            let weight = (1.0 + (documents - with + 0.5) / (with + 0.5)).ln();
            for service in &self.services {
                for posting in service.index.postings(term) {
                    let tool = posting.tool as usize;
                    if !service.allows(tool) {
                        continue;
                    }
                    let frequency = f64::from(posting.frequency);
                    let length = f64::from(service.index.length(tool));
                    let norm = K1 * (1.0 - B + B * length / average_length);
                    scores[service.offset + tool] +=
                        weight * frequency * (K1 + 1.0) / (frequency + norm);
                }
            }
        }
        scores
    }
}

/// A tool that holds a word of the query: its score, and where it is.
#[derive(Debug, Clone, Copy)]
struct Match {
    score: f64,
    /// Its service's place in the corpus.
    service: u32,
    /// Its place in its service's tools.
    tool: u32,
}

/// Ranks the tools of the live `services` that pass `filter` against `query`, and keeps the
/// best `limit`.
pub fn rank(
    services: &[Arc<ServiceEntry>],
    filter: &ToolFilter,
    query: &SearchQuery,
    limit: usize,
) -> SearchResults {
    let corpus = Corpus::of(services, filter);
    if corpus.tools == 0 {
        return SearchResults::default();
    }
    let scores = corpus.scores(query);
    let mut matches = Vec::new();
    for (service, searched) in corpus.services.iter().enumerate() {
        let tools = searched.entry.contract.tools.len();
        let slots = &scores[searched.offset..searched.offset + tools];
        for (tool, &score) in slots.iter().enumerate().filter(|(_, score)| **score > 0.0) {
            matches.push(Match {
                score,
                service: service as u32,
                tool: tool as u32,
            });
        }
    }
    let total_matches = matches.len();
    let tool_of = |found: &Match| {
        let entry = corpus.services[found.service as usize].entry;
        (entry, &entry.contract.tools[found.tool as usize])
    };
    let by_score = |a: &Match, b: &Match| b.score.total_cmp(&a.score);
    // Best first; ties in (tool name, service name) order.
    let order = |a: &Match, b: &Match| {
        by_score(a, b).then_with(|| {
            let (x_service, x) = tool_of(a);
            let (y_service, y) = tool_of(b);
            (x.name.as_str(), x_service.name.as_str())
                .cmp(&(y.name.as_str(), y_service.name.as_str()))
        })
    };
    if limit > 0 && matches.len() > limit {
        // The best `limit` by score alone, whose comparisons are cheap; then, of the tools
        // scoring no less than the last of them, the names decide between those tied with it.
        // Tools of documents of one length often tie, and comparing the names of every tied
        // pair (finding each tool's service by a binary search) cost about a sixth of a
        // search over 10,000 tools in the benchmark (BENCHMARKS.md, item 33).
        matches.select_nth_unstable_by(limit - 1, by_score);
        let cut = matches[limit - 1].score;
        matches.retain(|found| found.score >= cut);
        if matches.len() > limit {
            matches.select_nth_unstable_by(limit - 1, order);
        }
    }
    matches.truncate(limit);
    matches.sort_unstable_by(order);
    let hits = matches
        .iter()
        .map(|found| {
            let (entry, tool) = tool_of(found);
            SearchHit {
                tool: ToolRef {
                    service: Arc::clone(entry),
                    tool: Arc::clone(tool),
                },
                score: found.score,
            }
        })
        .collect();
    SearchResults {
        hits,
        total_matches,
    }
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
