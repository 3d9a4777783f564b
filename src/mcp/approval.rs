//! Approval of imported tools (seed 003's approval flow): an `[[mcp_imports]]` entry with an
//! `approved_tools` table registers only the tools the table names, each only while its
//! definition hashes to the `definition_sha256` given there. A tool the server adds, or changes
//! after it was reviewed (a reworded description is enough), is held back: not registered,
//! so no caller or model sees or calls it, logged once at WARN with the hash to approve, and
//! counted in `toolplane_mcp_import_held_tools`. `toolplane config review-imports` lists each
//! server's tools with their hashes for review.

use std::collections::BTreeMap;

use crate::registry::{ServiceName, ToolName};

/// The tools an import may register, each with the definition hash it was reviewed at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApprovedTools(BTreeMap<ToolName, String>);

/// What approval says of one listed tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Approved at this definition: registered.
    Approved,
    /// Not named in `approved_tools`: held.
    NotApproved,
    /// Approved at another definition (the one given): held until approved again.
    Changed(String),
}

impl Verdict {
    /// How the review and the logs name it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Approved => "approved",
            Verdict::NotApproved => "not_approved",
            Verdict::Changed(_) => "changed",
        }
    }
}

impl ApprovedTools {
    /// The `approved_tools` table of `service`'s entry, checked: tool names as registrations
    /// take them, hashes of 64 lowercase hex digits.
    pub fn check(service: &ServiceName, table: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut approved = BTreeMap::new();
        for (name, sha256) in table {
            let tool = ToolName::parse(name).map_err(|problem| {
                format!("mcp_imports: approved_tools of service {service}: {problem}")
            })?;
            let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
            if sha256.len() != 64 || !sha256.bytes().all(hex) {
                return Err(format!(
                    "mcp_imports: approved_tools of service {service}: {name} = {sha256:?} is \
                     not a definition_sha256 (64 lowercase hex digits, as `toolplane config \
                     review-imports` prints them)"
                ));
            }
            approved.insert(tool, sha256.clone());
        }
        Ok(Self(approved))
    }

    /// Whether the tool `name`, whose definition hashes to `sha256`, may be registered.
    pub fn verdict(&self, name: &str, sha256: &str) -> Verdict {
        let approved = ToolName::parse(name)
            .ok()
            .and_then(|tool| self.0.get(&tool));
        match approved {
            Some(approved) if approved == sha256 => Verdict::Approved,
            Some(approved) => Verdict::Changed(approved.clone()),
            None => Verdict::NotApproved,
        }
    }

    /// How many tools are approved.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no tool is approved.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A listed tool approval held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTool {
    /// Its name.
    pub name: String,
    /// The hash of its definition as listed now: the value to approve.
    pub sha256: String,
    /// Why it is held.
    pub verdict: Verdict,
}

/// The tools an import held back at its last listing, so that each is logged once per
/// definition rather than at every listing.
#[derive(Debug, Default)]
pub struct HeldLog(BTreeMap<String, String>);

impl HeldLog {
    /// Logs, at WARN, each tool of `held` not held at the same definition before, and keeps
    /// `held` as the tools held now.
    pub fn report(&mut self, service: &ServiceName, held: &[HeldTool]) {
        let mut now = BTreeMap::new();
        for tool in held {
            if self.0.get(&tool.name) != Some(&tool.sha256) {
                let approved = match &tool.verdict {
                    Verdict::Changed(approved) => approved.as_str(),
                    Verdict::Approved | Verdict::NotApproved => "",
                };
                tracing::warn!(
                    service = %service,
                    tool = %tool.name,
                    verdict = tool.verdict.as_str(),
                    definition_sha256 = %tool.sha256,
                    approved_sha256 = approved,
                    "an MCP tool is held back until approved: review it (toolplane config \
                     review-imports) and add {} = \"{}\" to the import's approved_tools",
                    tool.name,
                    tool.sha256
                );
            }
            now.insert(tool.name.clone(), tool.sha256.clone());
        }
        self.0 = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn table(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(name, sha)| ((*name).to_owned(), (*sha).to_owned()))
            .collect()
    }

    /// Protects the verdicts: the same hash approves, another holds, no entry holds.
    #[test]
    fn a_tool_is_approved_only_at_the_definition_reviewed() {
        let service = ServiceName::parse("github").expect("valid");
        let approved =
            ApprovedTools::check(&service, &table(&[("list_issues", SHA)])).expect("valid");
        assert_eq!(approved.verdict("list_issues", SHA), Verdict::Approved);
        let other = SHA.replace('0', "1");
        assert_eq!(
            approved.verdict("list_issues", &other),
            Verdict::Changed(SHA.to_owned())
        );
        assert_eq!(approved.verdict("create_issue", SHA), Verdict::NotApproved);
        assert!(ApprovedTools::default().verdict("x", SHA) == Verdict::NotApproved);
    }

    /// Protects the checks of the table: names as registrations take them, full hashes.
    #[test]
    fn malformed_tables_are_refused_naming_the_entry() {
        let service = ServiceName::parse("github").expect("valid");
        for (entries, says) in [
            (table(&[("has space", SHA)]), "tool name"),
            (table(&[("list_issues", "abc")]), "list_issues"),
            (
                table(&[("list_issues", &SHA.to_uppercase())]),
                "64 lowercase",
            ),
        ] {
            let error = ApprovedTools::check(&service, &entries).expect_err("refused");
            assert!(error.contains(says) && error.contains("github"), "{error}");
        }
    }
}
