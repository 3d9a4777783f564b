//! The names tools are offered to a model under. A chat-completions function name is 1-64 of
//! `[A-Za-z0-9_-]` and names one function of the request: the model's call names it, and the
//! turn calls the tool it stands for, so two tools must never share one. Also which tools an
//! agent is allowed.

use std::collections::{HashMap, HashSet};

use crate::agent::store::Agent;
use crate::registry::ToolRef;

/// The names of the tools `agent` is allowed, when it is not allowed every tool.
pub(super) fn allowed_names(agent: &Agent) -> Option<HashSet<&str>> {
    let allowed = agent.config.allowed_tools.as_ref()?;
    Some(allowed.iter().map(String::as_str).collect())
}

/// Whether `found` is among the `allowed` names (`None`: every tool is).
pub(super) fn is_allowed<S>(allowed: Option<&HashSet<S>>, found: &ToolRef) -> bool
where
    S: std::borrow::Borrow<str> + std::hash::Hash + Eq,
{
    allowed.is_none_or(|allowed| allowed.contains(found.tool.name.as_str()))
}

/// The most characters of a function name.
const MAX_LENGTH: usize = 64;

/// Whether `name` may be a function name as it is.
fn is_plain(name: &str) -> bool {
    (1..=MAX_LENGTH).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The function name of each tool of `tools` (service and tool name), in order, none the same
/// as another. A tool is offered under its own name when no other tool offered has that name
/// and it is a valid function name; else as `SERVICE__TOOL`, dots made underscores, cut to 64
/// characters. When that is taken too (a tool's own name, or another tool's cut the same, or
/// `a.b` beside `a_b`), it ends in `_2`, `_3` ... instead, cut to fit.
pub(super) fn function_names<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> Vec<String> {
    let mut offered_by: HashMap<&str, usize> = HashMap::new();
    for (_, tool) in tools.clone() {
        *offered_by.entry(tool).or_default() += 1;
    }
    let own = |tool: &str| offered_by[tool] == 1 && is_plain(tool);
    // Tools' own names first, so none of them is ever renamed for a derived one.
    let mut taken: HashSet<String> = (tools.clone().into_iter())
        .filter(|(_, tool)| own(tool))
        .map(|(_, tool)| tool.to_owned())
        .collect();
    let mut names = Vec::new();
    for (service, tool) in tools {
        if own(tool) {
            names.push(tool.to_owned());
            continue;
        }
        let joined = format!("{service}__{}", tool.replace('.', "_"));
        let cut = |length: usize| joined.chars().take(length).collect::<String>();
        let mut name = cut(MAX_LENGTH);
        let mut next = 2;
        while taken.contains(&name) {
            let suffix = format!("_{next}");
            name = cut(MAX_LENGTH - suffix.len()) + &suffix;
            next += 1;
        }
        taken.insert(name.clone());
        names.push(name);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of `tools`, checked to be valid function names, none twice.
    fn names(tools: &[(&str, &str)]) -> Vec<String> {
        let names = function_names(tools.iter().copied());
        let distinct: HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        for name in &names {
            assert!(is_plain(name), "{name:?}");
        }
        names
    }

    #[test]
    fn a_tool_is_offered_under_its_own_name_when_it_can_be() {
        assert_eq!(
            names(&[("files", "read"), ("files", "write"), ("mail", "send-mail")]),
            ["read", "write", "send-mail"]
        );
    }

    #[test]
    fn a_name_two_services_offer_or_no_function_may_have_is_joined_to_its_service() {
        let long = "t".repeat(70);
        assert_eq!(
            names(&[
                ("files", "read"),
                ("docs", "read"),
                ("files", "list.all"),
                ("files", &long),
            ]),
            [
                "files__read".to_owned(),
                "docs__read".to_owned(),
                "files__list_all".to_owned(),
                format!("files__{}", "t".repeat(57)),
            ]
        );
    }

    /// Names that would come out the same are told apart: `a.b` beside `a_b`, a joined name
    /// that is another tool's own name, long names the same in their first 64 characters.
    #[test]
    fn two_tools_never_share_a_name() {
        assert_eq!(
            names(&[("s", "x.y"), ("s", "x_y"), ("t", "x_y")]),
            ["s__x_y", "s__x_y_2", "t__x_y"]
        );
        assert_eq!(
            names(&[("s", "x.y"), ("u", "s__x_y")]),
            ["s__x_y_2", "s__x_y"],
            "a tool's own name is never taken from it"
        );
        let stem = "list_repository_collaborators_with_their_permissions_for";
        let (first, second) = (
            format!("{stem}_an_organization"),
            format!("{stem}_an_organizations"),
        );
        let named = names(&[
            ("github-enterprise", &first),
            ("github-enterprise", &second),
        ]);
        let expected = format!("github-enterprise__{stem}");
        assert_eq!(named[0], expected[..64]);
        assert_eq!(named[1], format!("{}_2", &expected[..62]));
    }
}
