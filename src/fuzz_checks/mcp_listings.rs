//! What an import makes of an MCP server's tool list: the server is another party, and what
//! it lists is registered (or held back for approval) as it is read.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::ListToolsResult;

use crate::cli::review_imports::approved_tools_line;
use crate::envelope::TenantId;
use crate::mcp::approval::{ApprovedTools, Verdict};
use crate::mcp::import::{
    CheckedTools, ListedTool, McpImport, McpSource, keep_within_limit, read_listing,
};
use crate::registry::ServiceName;
use crate::registry::model::ServiceSpec;
use crate::registry::validate::{RegistrationLimits, validate_service};

/// Fewer tools than the default allows, so that listings past the limit are tried too.
const MAX_TOOLS: usize = 8;

/// The import the listings are read for: service `fuzzed` of an HTTP server, no approvals.
fn fuzzed_import() -> McpImport {
    McpImport {
        service: ServiceName::parse("fuzzed").expect("a service name"),
        source: McpSource::Http("http://127.0.0.1:9/mcp".to_owned()),
        tenant: TenantId(0),
        refresh_interval: Duration::from_secs(60),
        auth: None,
        approved_tools: None,
    }
}

/// An MCP server's `tools/list` answer (`{"tools": [...]}`, JSON), read as an import reads
/// it. What the import takes registers as one service (a tool of a name listed already, or
/// past `max_tools_per_service`, is left out, not the whole listing refused); each tool's
/// definition hash is the one it is registered with; reading the listing again with the
/// outcomes kept from the first reading takes the same tools; and the `approved_tools` line
/// `toolplane config review-imports` prints for them is read back as approving each of them.
pub fn mcp_listings(data: &[u8]) {
    let Ok(listing) = serde_json::from_slice::<ListToolsResult>(data) else {
        return;
    };
    let import = fuzzed_import();
    let service = import.service.clone();
    let limits = RegistrationLimits {
        max_tools: MAX_TOOLS,
        ..RegistrationLimits::default()
    };
    let mut checked = CheckedTools::default();
    let taken = read_listing(&import, None, &limits, &listing.tools, &mut checked);
    let mut tools = taken.iter().map(|tool| tool.spec.clone()).collect();
    keep_within_limit(&import, &limits, &mut tools, &mut checked);
    let spec = ServiceSpec {
        name: service.to_string(),
        version: "0.0.0".to_owned(),
        endpoint: import.endpoint(),
        tools,
        ttl: None,
        instance_id: String::new(),
    };
    let registered = validate_service(&spec, &limits)
        .unwrap_or_else(|error| panic!("the tools an import takes do not register: {error}"));
    for tool in &registered.tools {
        let listed = taken
            .iter()
            .find(|listed| listed.spec.name == tool.name.as_str());
        let listed = listed.expect("registered from the listing");
        assert_eq!(listed.sha256, tool.definition_sha256, "{}", tool.name);
    }

    let hashes = |listed: &[ListedTool]| -> Vec<(String, String)> {
        (listed.iter())
            .map(|tool| (tool.spec.name.clone(), tool.sha256.clone()))
            .collect()
    };
    let again = read_listing(&import, None, &limits, &listing.tools, &mut checked);
    assert_eq!(
        hashes(&again),
        hashes(&taken),
        "read again with the outcomes kept"
    );

    let line = approved_tools_line(&taken);
    let table: toml::Table =
        toml::from_str(&line).unwrap_or_else(|error| panic!("{line:?} is not TOML: {error}"));
    let approvals: BTreeMap<String, String> = table["approved_tools"]
        .as_table()
        .expect("a table")
        .iter()
        .map(|(name, sha256)| (name.clone(), sha256.as_str().expect("a string").to_owned()))
        .collect();
    let approved = ApprovedTools::check(&service, &approvals)
        .unwrap_or_else(|error| panic!("{line:?} is refused: {error}"));
    let judged = read_listing(
        &import,
        Some(&approved),
        &limits,
        &listing.tools,
        &mut checked,
    );
    for tool in &judged {
        assert_eq!(tool.verdict, Some(Verdict::Approved), "{line:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds are tool lists an import reads as their names say: the check is run on
    /// listings it takes, in part or whole.
    #[test]
    fn the_seeds_are_listings_as_named() {
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/mcp_listings");
        let import = fuzzed_import();
        for (seed, listed, taken) in [
            ("github_like.json", 3, 3),
            ("name_listed_twice.json", 4, 2),
            ("past_the_limit.json", 11, 11),
            ("left_out_and_refs.json", 5, 3),
        ] {
            let data = std::fs::read(seeds.join(seed)).expect("a seed");
            let listing: ListToolsResult = serde_json::from_slice(&data).expect("a tool list");
            let limits = RegistrationLimits::default();
            let mut checked = CheckedTools::default();
            let read = read_listing(&import, None, &limits, &listing.tools, &mut checked);
            assert_eq!((listing.tools.len(), read.len()), (listed, taken), "{seed}");
        }
    }
}
