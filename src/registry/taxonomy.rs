//! A tool's domains and categories (seed 003, "domain and category inference"): the area it
//! works in (`github`, `github.issues`) and the kind of operation it is (`crud.read`,
//! `search`). A provider may declare either list when it registers; a list it leaves empty is
//! inferred here from the service's and the tool's names.
//!
//! Inference reads names, not behaviour: it helps callers find tools and is never a promise
//! that a `crud.read` tool changes nothing.
//!
//! - The primary domain is the service name's words (split at `-`) without the ones saying
//!   what kind of program it is ([`SERVER_WORDS`]: `github-mcp-server` is `github`). A
//!   service named after a cloud first is `cloud.` and the cloud (`aws-s3` is `cloud.aws`).
//! - The tool name's words (split as search splits them: `getPullRequest`, `get_pull_request`
//!   and `get-pull-request` alike) lose the leading ones that repeat the service's name
//!   (`structs_query_player` in `structs` is `query_player`); the first word left that is a
//!   verb of [`VERBS`] (`slack_post_message` has `post`) gives the categories, and the words
//!   after it, up to a preposition, give the sub-domain, the last made plural:
//!   `get_pull_request` is `pull_requests`, so the tool's domains are `github` and
//!   `github.pull_requests`.
//! - A name with no verb of [`VERBS`] has no categories and only the primary domain.

use super::search_terms::plain_words;
use crate::shown::shown;

/// The most domains, and the most categories, one tool may declare.
pub const MAX_LABELS: usize = 16;
/// The longest domain or category, in bytes.
pub const MAX_LABEL_LEN: usize = 64;

/// Words of a service name that say what kind of program it is, not what it works on.
pub const SERVER_WORDS: &[&str] = &[
    "mcp", "server", "service", "svc", "api", "tool", "tools", "provider",
];

/// Clouds whose name first in a service name makes its domain `cloud.NAME`.
const CLOUDS: &[&str] = &["aws", "azure", "gcp"];

/// Words that end a sub-domain (`list_issues_for_repo` is about `issues`).
const PREPOSITIONS: &[&str] = &[
    "at", "by", "for", "from", "in", "into", "of", "on", "to", "with",
];

/// Words skipped before a sub-domain (`list_all_issues` is about `issues`).
const DETERMINERS: &[&str] = &["a", "all", "an", "my", "the"];

const READ: &[&str] = &["crud.read"];
const SEARCH: &[&str] = &["crud.read", "search"];
const CREATE: &[&str] = &["crud.create"];
const WRITE: &[&str] = &["crud.create", "crud.update"];
const UPDATE: &[&str] = &["crud.update"];
const DELETE: &[&str] = &["crud.delete"];
/// Verbs that name an action outside create, read, update and delete: they mark where the
/// sub-domain starts and give no category.
const ACTION: &[&str] = &[];

/// The verbs inference knows, and the categories each gives.
pub const VERBS: &[(&str, &[&str])] = &[
    ("get", READ),
    ("list", READ),
    ("read", READ),
    ("fetch", READ),
    ("describe", READ),
    ("show", READ),
    ("view", READ),
    ("retrieve", READ),
    ("download", READ),
    ("count", READ),
    ("inspect", READ),
    ("check", READ),
    ("search", SEARCH),
    ("find", SEARCH),
    ("query", SEARCH),
    ("lookup", SEARCH),
    ("browse", SEARCH),
    ("create", CREATE),
    ("add", CREATE),
    ("insert", CREATE),
    ("new", CREATE),
    ("post", CREATE),
    ("make", CREATE),
    ("register", CREATE),
    ("upload", CREATE),
    ("import", CREATE),
    ("write", WRITE),
    ("save", WRITE),
    ("upsert", WRITE),
    ("update", UPDATE),
    ("edit", UPDATE),
    ("set", UPDATE),
    ("modify", UPDATE),
    ("patch", UPDATE),
    ("put", UPDATE),
    ("rename", UPDATE),
    ("change", UPDATE),
    ("move", UPDATE),
    ("assign", UPDATE),
    ("unassign", UPDATE),
    ("enable", UPDATE),
    ("disable", UPDATE),
    ("replace", UPDATE),
    ("close", UPDATE),
    ("reopen", UPDATE),
    ("merge", UPDATE),
    ("lock", UPDATE),
    ("unlock", UPDATE),
    ("archive", UPDATE),
    ("delete", DELETE),
    ("remove", DELETE),
    ("destroy", DELETE),
    ("drop", DELETE),
    ("purge", DELETE),
    ("erase", DELETE),
    ("unregister", DELETE),
    ("clear", DELETE),
    ("run", ACTION),
    ("execute", ACTION),
    ("exec", ACTION),
    ("invoke", ACTION),
    ("call", ACTION),
    ("send", ACTION),
    ("start", ACTION),
    ("stop", ACTION),
    ("restart", ACTION),
    ("deploy", ACTION),
    ("trigger", ACTION),
    ("publish", ACTION),
    ("notify", ACTION),
    ("sync", ACTION),
    ("build", ACTION),
    ("calculate", ACTION),
    ("compute", ACTION),
    ("validate", ACTION),
    ("verify", ACTION),
    ("generate", ACTION),
    ("convert", ACTION),
    ("translate", ACTION),
    ("summarize", ACTION),
    ("analyze", ACTION),
];

/// Checks a domain or category: 1 to [`MAX_LABEL_LEN`] bytes of dot-separated words of
/// lowercase letters, digits, `_` and `-` (`github.pull_requests`, `crud.read`).
pub fn check_label(label: &str) -> Result<(), String> {
    let word_ok = |word: &str| {
        !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
    };
    if label.is_empty() || label.len() > MAX_LABEL_LEN {
        return Err(format!(
            "{} must be 1 to {MAX_LABEL_LEN} bytes, got {}",
            shown(label),
            label.len()
        ));
    }
    if !label.split('.').all(word_ok) {
        return Err(format!(
            "{label:?} must be dot-separated words of lowercase letters, digits, '_' and '-', \
             e.g. github.issues or crud.read"
        ));
    }
    Ok(())
}

/// Checks a declared list of domains or categories ([`check_label`] each, at most
/// [`MAX_LABELS`]) and returns it without repeats, in the order given.
pub fn check_labels(labels: &[String]) -> Result<Vec<String>, String> {
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "at most {MAX_LABELS} may be declared, got {}",
            labels.len()
        ));
    }
    let mut kept: Vec<String> = Vec::with_capacity(labels.len());
    for label in labels {
        check_label(label)?;
        if !kept.contains(label) {
            kept.push(label.clone());
        }
    }
    Ok(kept)
}

/// Whether `filter` is one of `labels`, or a label starts with it and a dot: `github` takes
/// a tool of `github.issues`, and `crud` one of `crud.read`.
pub fn labels_match(labels: &[String], filter: &str) -> bool {
    labels.iter().any(|label| {
        label
            .strip_prefix(filter)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// The domain a service's name says it works in (see the module docs).
pub fn primary_domain(service: &str) -> String {
    let words: Vec<&str> = service
        .split('-')
        .filter(|word| !word.is_empty() && !SERVER_WORDS.contains(word))
        .collect();
    match words.first() {
        None => service.to_owned(),
        Some(first) if CLOUDS.contains(first) => format!("cloud.{first}"),
        Some(_) => words.join("-"),
    }
}

/// A tool's name read as a verb and the sub-domain after it (see the module docs).
struct NameReading {
    categories: &'static [&'static str],
    sub_domain: Option<String>,
}

fn read_name(service: &str, tool: &str) -> Option<NameReading> {
    let service_words: Vec<&str> = service.split('-').collect();
    let words = plain_words(tool);
    let mut rest = words
        .iter()
        .skip_while(|word| service_words.contains(&word.as_str()));
    let categories = rest.find_map(|word| {
        VERBS
            .iter()
            .find(|(verb, _)| verb == word)
            .map(|(_, categories)| *categories)
    })?;
    let mut object: Vec<String> = rest
        .skip_while(|word| DETERMINERS.contains(&word.as_str()))
        .take_while(|word| !PREPOSITIONS.contains(&word.as_str()))
        .cloned()
        .collect();
    if let Some(last) = object.last_mut() {
        *last = pluralizer::pluralize(last, 2, false);
    }
    let sub_domain = Some(object.join("_")).filter(|joined| !joined.is_empty());
    Some(NameReading {
        categories,
        sub_domain,
    })
}

/// The domains inferred for `tool` of `service`: the primary domain, then the primary domain
/// and the sub-domain (`["github", "github.issues"]`), when the name gives one that makes a
/// valid label.
pub fn infer_domains(service: &str, tool: &str) -> Vec<String> {
    let primary = primary_domain(service);
    let mut domains = vec![primary.clone()];
    if let Some(sub_domain) = read_name(service, tool).and_then(|reading| reading.sub_domain) {
        let full = format!("{primary}.{sub_domain}");
        if check_label(&full).is_ok() {
            domains.push(full);
        }
    }
    domains.retain(|domain| check_label(domain).is_ok());
    domains
}

/// The categories inferred for `tool` of `service` from its verb (empty when it has no verb
/// of [`VERBS`]).
pub fn infer_categories(service: &str, tool: &str) -> Vec<String> {
    read_name(service, tool)
        .map(|reading| {
            reading
                .categories
                .iter()
                .map(|category| (*category).to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|label| (*label).to_owned()).collect()
    }

    /// Protects the seed's examples of domain and category inference.
    #[test]
    fn the_seeds_examples_are_inferred_as_it_gives_them() {
        assert_eq!(primary_domain("github"), "github");
        assert_eq!(primary_domain("aws-s3-server"), "cloud.aws");
        assert_eq!(
            infer_domains("github", "list_issues"),
            strings(&["github", "github.issues"])
        );
        assert_eq!(
            infer_domains("github", "get_pull_request"),
            strings(&["github", "github.pull_requests"])
        );
        assert_eq!(infer_categories("github", "list_issues"), ["crud.read"]);
        assert_eq!(infer_categories("github", "create_issue"), ["crud.create"]);
        assert_eq!(
            infer_categories("github", "search_code"),
            ["crud.read", "search"]
        );
    }

    /// Protects the reading of names written in other styles, prefixed with the service, or
    /// with words after the object.
    #[test]
    fn names_in_every_style_read_alike() {
        for name in ["getPullRequest", "get-pull-request", "GetPullRequest"] {
            assert_eq!(
                infer_domains("github-mcp-server", name),
                strings(&["github", "github.pull_requests"]),
                "{name}"
            );
        }
        assert_eq!(
            infer_domains("structs", "structs_query_player"),
            strings(&["structs", "structs.players"])
        );
        assert_eq!(
            infer_categories("structs", "structs_query_player"),
            ["crud.read", "search"]
        );
        assert_eq!(
            infer_domains("github", "list_all_issues_for_repo"),
            strings(&["github", "github.issues"])
        );
        assert_eq!(
            infer_domains("structs", "structs_calculate_power"),
            strings(&["structs", "structs.powers"])
        );
        assert!(infer_categories("structs", "structs_calculate_power").is_empty());
        assert_eq!(
            infer_domains("slack", "slack_post_message"),
            strings(&["slack", "slack.messages"])
        );
        assert_eq!(infer_categories("tools", "issue_list"), ["crud.read"]);
        assert_eq!(infer_domains("tools", "issue_list"), ["tools"]);
    }

    /// Protects names inference cannot read fully: no verb, a verb alone, only server words.
    #[test]
    fn names_without_a_known_verb_get_only_the_primary_domain() {
        assert_eq!(infer_domains("weather", "forecast"), ["weather"]);
        assert!(infer_categories("weather", "forecast").is_empty());
        assert_eq!(infer_domains("docs", "search"), ["docs"]);
        assert_eq!(infer_categories("docs", "search"), ["crud.read", "search"]);
        assert_eq!(infer_domains("mcp-server", "echo"), ["mcp-server"]);
        let long = format!("get_{}", "x".repeat(100));
        assert_eq!(infer_domains("github", &long), ["github"]);
    }

    /// Protects the rules for declared labels and for filters.
    #[test]
    fn labels_are_checked_and_filters_match_whole_words() {
        for good in [
            "github",
            "github.pull_requests",
            "crud.read",
            "cloud.aws",
            "a-b.c_d",
        ] {
            assert!(check_label(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "GitHub",
            "github.",
            ".github",
            "a..b",
            "has space",
            &"a".repeat(65),
        ] {
            assert!(check_label(bad).is_err(), "{bad}");
        }
        assert_eq!(
            check_labels(&strings(&["a", "b", "a"])).expect("valid labels"),
            strings(&["a", "b"])
        );
        assert!(check_labels(&vec!["a".to_owned(); MAX_LABELS + 1]).is_err());
        let labels = strings(&["github", "github.issues"]);
        assert!(labels_match(&labels, "github"));
        assert!(labels_match(&labels, "github.issues"));
        assert!(!labels_match(&labels, "git"));
        assert!(!labels_match(&labels, "github.iss"));
        assert!(labels_match(&strings(&["crud.read"]), "crud"));
    }
}
