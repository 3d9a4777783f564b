//! The words tool search matches on: a text split into words, lowercased, English stop words
//! left out and the rest stemmed, so that a query's "issues" finds a tool's "issue" and
//! `getPullRequest` reads as "get pull request".
//!
//! Words are split at every character that is not a letter or digit (so `list_issues`,
//! `aws-s3` and `github.com` are two words each) and where the case changes from lower to
//! upper (`getPullRequest`), or from an upper-case run to a capitalized word (`HTTPServer`:
//! "http", "server"; the whole word counts too). Stop words are NLTK's English list (the `stop-words` crate: "the",
//! "with", "of" ...); stems are Snowball's English stemmer (`rust-stemmers`, as tantivy uses).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use rust_stemmers::{Algorithm, Stemmer};
use serde_json::Value;

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

static STOP_WORDS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    stop_words::get(stop_words::LANGUAGE::English)
        .into_iter()
        .filter(|word| !word.is_empty())
        .collect()
});

/// How often a tool's name counts beside its other words: a query naming what a tool is
/// called ranks it above tools that only mention the word.
pub const NAME_WEIGHT: u16 = 3;

/// How deep into a schema parameters are looked for.
const SCHEMA_DEPTH: usize = 16;

/// Calls `each` with every search term of `text`, in order (a term may come more than once).
/// A word the case splits counts whole too (`GitHub`: "git", "hub" and "github"), so a query
/// and a name that write a word in different cases still meet.
pub fn for_each_term(text: &str, mut each: impl FnMut(String)) {
    let mut term = |word: &str| {
        let word = word.to_lowercase();
        if !STOP_WORDS.contains(&word) {
            each(STEMMER.stem(&word).into_owned());
        }
    };
    for run in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
    {
        let parts = case_parts(run);
        for part in &parts {
            term(part);
        }
        if parts.len() > 1 {
            term(run);
        }
    }
}

/// The words of `text` split as search terms are (at every character that is not a letter or
/// digit, and where the case changes), lowercased, but neither stemmed nor filtered: for
/// reading what a name says (`getPullRequest`: "get", "pull", "request").
pub fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .flat_map(case_parts)
        .map(str::to_lowercase)
        .collect()
}

/// A run of letters and digits split where the case changes.
fn case_parts(run: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for (position, &(offset, c)) in chars.iter().enumerate().skip(1) {
        let previous = chars[position - 1].1;
        let next_is_lower = chars
            .get(position + 1)
            .is_some_and(|(_, n)| n.is_lowercase());
        let case_break = c.is_uppercase()
            && (previous.is_lowercase() || (previous.is_uppercase() && next_is_lower));
        if case_break {
            parts.push(&run[start..offset]);
            start = offset;
        }
    }
    parts.push(&run[start..]);
    parts
}

/// How often each term occurs in a tool's document: its name (counted [`NAME_WEIGHT`]
/// times), its service's name, its title (its annotations'; may be empty), its description,
/// and the names, titles and descriptions of its input schema's parameters.
pub fn tool_terms(
    service: &str,
    name: &str,
    title: &str,
    description: &str,
    input_schema: &str,
) -> HashMap<String, u16> {
    let schema: Value = serde_json::from_str(input_schema).unwrap_or(Value::Null);
    let mut schema_words = String::new();
    schema_text(&schema, &mut schema_words, SCHEMA_DEPTH);
    let mut counted: HashMap<String, u16> = HashMap::new();
    for (text, weight) in [
        (name, NAME_WEIGHT),
        (service, 1),
        (title, 1),
        (description, 1),
        (schema_words.as_str(), 1),
    ] {
        for_each_term(text, |term| {
            let count = counted.entry(term).or_default();
            *count = count.saturating_add(weight);
        });
    }
    counted
}

/// Appends the parameter names, titles and descriptions of a JSON Schema to `out`, looking
/// `depth` levels down (into nested objects, array items, definitions and combinators, not
/// into enum values, defaults or examples, which are data).
fn schema_text(schema: &Value, out: &mut String, depth: usize) {
    if depth == 0 {
        return;
    }
    match schema {
        Value::Object(fields) => {
            for (key, value) in fields {
                match (key.as_str(), value) {
                    ("title" | "description", Value::String(text)) => {
                        out.push(' ');
                        out.push_str(text);
                    }
                    ("properties", Value::Object(properties)) => {
                        for (name, property) in properties {
                            out.push(' ');
                            out.push_str(name);
                            schema_text(property, out, depth - 1);
                        }
                    }
                    ("enum" | "const" | "default" | "examples", _) => {}
                    (_, Value::Object(_) | Value::Array(_)) => {
                        schema_text(value, out, depth - 1);
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                schema_text(item, out, depth - 1);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut all = Vec::new();
        for_each_term(text, |term| all.push(term));
        all
    }

    #[test]
    fn names_split_at_separators_and_case_changes() {
        assert_eq!(terms("list_issues"), ["list", "issu"]);
        assert_eq!(
            terms("getPullRequest"),
            ["get", "pull", "request", "getpullrequest"]
        );
        assert_eq!(
            terms("HTTPServer aws-s3"),
            ["http", "server", "httpserver", "aw", "s3"]
        );
        assert_eq!(terms("  über.Straße "), ["über", "straße"]);
        assert_eq!(terms("GitHub"), ["git", "hub", "github"]);
        assert!(terms("--- ").is_empty());
    }

    #[test]
    fn stop_words_go_and_the_rest_is_stemmed() {
        assert_eq!(
            terms("Lists the issues of a repository"),
            ["list", "issu", "repositori"]
        );
        assert_eq!(terms("list_issues"), terms("listing issue"));
        assert!(terms("the of and with").is_empty());
    }

    #[test]
    fn a_tools_terms_weigh_its_name_and_read_its_parameters() {
        let schema = r#"{"type":"object","properties":{"owner":{"type":"string",
            "description":"Account owning the repository"},"state":{"enum":["closed"]}},
            "$defs":{"Label":{"properties":{"colour":{"title":"Label colour"}}}}}"#;
        let terms = tool_terms(
            "github",
            "list_issues",
            "Issue list",
            "Lists issues.",
            schema,
        );
        let count = |term: &str| terms.get(term).copied().unwrap_or(0);
        assert_eq!(count("issu"), NAME_WEIGHT + 2);
        assert_eq!(count("list"), NAME_WEIGHT + 2);
        assert_eq!(count("github"), 1);
        assert_eq!(count("owner"), 1);
        assert_eq!(count("account"), 1);
        assert_eq!(count("state"), 1);
        assert_eq!(count("closed"), 0, "enum values are data");
        assert_eq!(count("colour"), 2);
        assert_eq!(count("absent"), 0);
    }
}
