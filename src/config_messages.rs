//! How a configuration that does not read is worded: where (a line and column of the file, the
//! variable that set a setting, the setting's path) and, for a setting toolplane does not
//! have, the ones it may have meant.

use std::collections::HashMap;

/// Where byte `at` of `text` is, as an editor counts: `line 2, column 16`.
pub(super) fn line_and_column(text: &str, at: usize) -> String {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {column}")
}

/// A setting that does not read, named as where it was set: the variable that set it
/// (`TOOLPLANE_MAX_TTL: ...`), else its path in the file (`mcp_imports[0].url: ...`).
pub(super) fn located(
    error: &serde_path_to_error::Error<toml::de::Error>,
    from_env: &HashMap<String, String>,
) -> String {
    let message = error.inner().message();
    let suggested = unknown_field_suggestion(message);
    let message = suggested.as_deref().unwrap_or(message);
    let path = error.path().to_string();
    let top = path.split(['.', '[']).next().unwrap_or_default();
    match from_env.get(top) {
        Some(variable) => format!("{variable}: {message}"),
        // An unknown key at the top names itself; an error of the whole table has no path.
        None if path == "." || (path == top && message.starts_with("unknown field")) => {
            message.to_owned()
        }
        None => format!("{path}: {message}"),
    }
}

/// How close a setting's name must be to an unknown one's to be suggested for it: spelt alike
/// (1 less the Damerau-Levenshtein distance over the longer name's length: a letter missing
/// from `max_invoke_timout` is 0.94), or with words in common ([`words_in_common`]). Not
/// Jaro-Winkler, which weighs a common prefix (`max_`) over the rest.
const SUGGESTED_SIMILARITY: f64 = 0.7;
/// The share of words in common that suggests a setting whatever their order:
/// `rate_limit_per_tool` suggests `tool_rate_limits`.
const SUGGESTED_WORDS: f64 = 2.0 / 3.0;

/// serde's message for a setting not known (`unknown field `rate_limit_per_tool`, expected one
/// of `listen`, ... 70 names`) as the settings it may have meant, the closest first (at most
/// three): `unknown field `rate_limit_per_tool`; did you mean `rate_limit_per_second` or
/// `tool_rate_limits`?`. `None` for any other message, or when no name
/// is close: serde's list is kept then.
fn unknown_field_suggestion(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, expected) = rest.split_once("`, expected one of ")?;
    let known = expected
        .split(", ")
        .filter_map(|name| name.strip_prefix('`')?.strip_suffix('`'));
    let meant = meant(unknown, known, |name| format!("`{name}`"))?;
    Some(format!("unknown field `{unknown}`; did you mean {meant}?"))
}

/// The names of `known` close to `unknown` (at most three, the closest first), each as
/// `shown` writes it, joined as a sentence says them: `a`, `a or b`, `a, b or c`.
fn meant<'k>(
    unknown: &str,
    known: impl Iterator<Item = &'k str>,
    shown: impl Fn(&str) -> String,
) -> Option<String> {
    let mut close: Vec<(f64, &str)> = known
        .filter_map(|name| {
            let spelt = strsim::normalized_damerau_levenshtein(unknown, name);
            let words = words_in_common(unknown, name);
            (spelt >= SUGGESTED_SIMILARITY || words >= SUGGESTED_WORDS)
                .then_some((spelt.max(words), name))
        })
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0));
    let names: Vec<String> = close.iter().take(3).map(|(_, name)| shown(name)).collect();
    let (last, first) = names.split_last()?;
    Some(match first {
        [] => last.clone(),
        _ => format!("{} or {last}", first.join(", ")),
    })
}

/// The `TOOLPLANE_*` variables toolplane's other programs read (the command line's client
/// commands, the example provider) and the one naming the configuration file: set for them,
/// they are no misspelt setting.
const OTHER_VARIABLES: &[&str] = &[
    "TOOLPLANE_CONFIG",
    "TOOLPLANE_ENDPOINT",
    "TOOLPLANE_TENANT_ID",
    "TOOLPLANE_CA_FILE",
    "TOOLPLANE_CLIENT_CERT_FILE",
    "TOOLPLANE_CLIENT_KEY_FILE",
    "TOOLPLANE_TOKEN",
    "TOOLPLANE_TOKEN_FILE",
    "TOOLPLANE_INSTANCE_ID",
];

/// A warning for each of the `TOOLPLANE_*` variables `unread` that no setting reads (of the
/// settings `fields`), unless [`OTHER_VARIABLES`] holds it or the configuration (`table`)
/// names it as a value (the variable an import's token is read from, say): it names the
/// settings' variables it may have meant (of settings a variable can set: not tables or
/// lists).
pub(super) fn unread_variable_warnings(
    mut unread: Vec<String>,
    fields: &toml::Table,
    table: &toml::Table,
) -> Vec<String> {
    unread.sort();
    let variable = |field: &str| format!("{}{}", super::ENV_PREFIX, field.to_ascii_uppercase());
    // Tables and lists are set in the file only.
    let settable: Vec<&str> = (fields.iter())
        .filter(|(_, default)| !matches!(default, toml::Value::Table(_) | toml::Value::Array(_)))
        .map(|(field, _)| field.as_str())
        .collect();
    unread
        .into_iter()
        .filter(|name| !OTHER_VARIABLES.contains(&name.as_str()) && !names(table, name))
        .map(|name| {
            let setting = name[super::ENV_PREFIX.len()..].to_ascii_lowercase();
            match meant(&setting, settable.iter().copied(), variable) {
                Some(meant) => {
                    format!("{name} is set, but no setting reads it; did you mean {meant}?")
                }
                None => format!(
                    "{name} is set, but no setting reads it (the settings and their variables \
                     are listed in the README's Configuration section)"
                ),
            }
        })
        .collect()
}

/// Whether `name` is a string value anywhere in `table`.
fn names(table: &toml::Table, name: &str) -> bool {
    fn holds(value: &toml::Value, name: &str) -> bool {
        match value {
            toml::Value::String(text) => text == name,
            toml::Value::Array(values) => values.iter().any(|value| holds(value, name)),
            toml::Value::Table(table) => table.values().any(|value| holds(value, name)),
            _ => false,
        }
    }
    table.values().any(|value| holds(value, name))
}

/// The words (between underscores, a plural's `s` dropped) two names have in common, as a
/// share of the longer one's.
fn words_in_common(one: &str, other: &str) -> f64 {
    let words = |name: &str| -> Vec<String> {
        (name.split('_').filter(|word| !word.is_empty()))
            .map(|word| word.strip_suffix('s').unwrap_or(word).to_owned())
            .collect()
    };
    let (one, other) = (words(one), words(other));
    let shared = one.iter().filter(|word| other.contains(word)).count();
    shared as f64 / one.len().max(other.len()).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::{unknown_field_suggestion, unread_variable_warnings};

    const SERDE: &str = "unknown field `rate_limit_per_tool`, expected one of `listen`, \
        `rate_limit_per_second`, `rate_limit_burst`, `tool_rate_limits`, `agents_path`";

    #[test]
    fn an_unknown_setting_is_answered_with_the_closest_known_ones() {
        assert_eq!(
            unknown_field_suggestion(SERDE).as_deref(),
            Some(
                "unknown field `rate_limit_per_tool`; did you mean `rate_limit_per_second` or \
                 `tool_rate_limits`?"
            )
        );
        let one = "unknown field `lisen`, expected one of `listen`, `agents_path`";
        assert_eq!(
            unknown_field_suggestion(one).as_deref(),
            Some("unknown field `lisen`; did you mean `listen`?")
        );
        // A shared prefix alone suggests nothing.
        let typo = "unknown field `max_invoke_timout`, expected one of `max_invoke_timeout`, \
            `max_conversation_bytes`, `mcp_listen`";
        assert_eq!(
            unknown_field_suggestion(typo).as_deref(),
            Some("unknown field `max_invoke_timout`; did you mean `max_invoke_timeout`?")
        );
        let longer = "unknown field `mcp_listen_address`, expected one of `mcp_listen`, \
            `mcp_allowed_hosts`, `listen`";
        assert_eq!(
            unknown_field_suggestion(longer).as_deref(),
            Some("unknown field `mcp_listen_address`; did you mean `mcp_listen`?")
        );
    }

    #[test]
    fn a_variable_no_setting_reads_is_warned_of_unless_something_else_reads_it() {
        let fields: toml::Table = toml::from_str(
            "rate_limit_per_second = 0\ntool_rate_limits = {}\nlisten = \"\"\nmax_ttl = \"1h\"",
        )
        .expect("TOML");
        let table: toml::Table =
            toml::from_str("[[mcp_imports]]\nbearer_token_env = \"TOOLPLANE_DOCS_TOKEN\"")
                .expect("TOML");
        let unread = [
            "TOOLPLANE_RATE_LIMIT_PER_TOOL",
            "TOOLPLANE_ENDPOINT",
            "TOOLPLANE_DOCS_TOKEN",
            "TOOLPLANE_FROBNICATE",
        ];
        let warnings = unread_variable_warnings(
            unread.iter().map(|name| (*name).to_owned()).collect(),
            &fields,
            &table,
        );
        assert_eq!(
            warnings,
            [
                "TOOLPLANE_FROBNICATE is set, but no setting reads it (the settings and their \
                 variables are listed in the README's Configuration section)",
                "TOOLPLANE_RATE_LIMIT_PER_TOOL is set, but no setting reads it; did you mean \
                 TOOLPLANE_RATE_LIMIT_PER_SECOND?",
            ]
        );
    }

    #[test]
    fn without_a_close_one_serdes_list_is_kept() {
        let far = "unknown field `zzz`, expected one of `listen`, `agents_path`";
        assert_eq!(unknown_field_suggestion(far), None);
        assert_eq!(unknown_field_suggestion("invalid type: string"), None);
    }
}
