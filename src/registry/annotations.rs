//! Hints about a tool's behaviour, as MCP's tool annotations give them (a title, and whether
//! it is read-only, destructive, idempotent, or reaches an open world): declared by providers,
//! kept from imported MCP servers, served to MCP clients as the tools' annotations. They are
//! the provider's word; toolplane checks only that a title is short and printable.

use serde_json::Value;

/// The longest title, in bytes.
pub const MAX_TITLE_BYTES: usize = 256;

/// Hints about a tool's behaviour, as MCP's tool annotations give them: the provider's word,
/// never checked. A hint `None` is not said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ToolAnnotations {
    /// A short human-readable name for display; empty when none.
    pub title: String,
    /// The tool does not change its environment.
    pub read_only: Option<bool>,
    /// The tool may change its environment destructively.
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    pub idempotent: Option<bool>,
    /// The tool may reach an open world of external entities.
    pub open_world: Option<bool>,
}

impl ToolAnnotations {
    /// Whether nothing is said.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The hints as MCP's JSON names them, only those said: the form
    /// [`super::validate::definition_sha256`] hashes.
    pub fn to_mcp_json(&self) -> serde_json::Map<String, Value> {
        let mut json = serde_json::Map::new();
        if !self.title.is_empty() {
            json.insert("title".into(), Value::String(self.title.clone()));
        }
        for (name, hint) in [
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        ] {
            if let Some(hint) = hint {
                json.insert(name.into(), Value::Bool(hint));
            }
        }
        json
    }
}

/// Why `title` cannot be a tool's title, if it cannot.
pub fn check_title(title: &str) -> Result<(), String> {
    if title.len() > MAX_TITLE_BYTES {
        return Err(format!(
            "title is {} bytes; at most {MAX_TITLE_BYTES} are allowed",
            title.len()
        ));
    }
    if title.chars().any(char::is_control) {
        return Err("title holds a control character (a line break, a tab ...)".to_owned());
    }
    Ok(())
}

/// `title` made one [`check_title`] accepts, for a title toolplane takes from elsewhere (an
/// imported MCP server's): each control character (a line break, a tab ...) becomes a space,
/// and a title past [`MAX_TITLE_BYTES`] is cut at a character boundary, ending in `…`.
pub fn fitted_title(title: &str) -> String {
    let spaced: String = title
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if spaced.len() <= MAX_TITLE_BYTES {
        return spaced;
    }
    const ELLIPSIS: char = '…';
    let mut end = MAX_TITLE_BYTES - ELLIPSIS.len_utf8();
    while !spaced.is_char_boundary(end) {
        end -= 1;
    }
    let mut fitted = spaced[..end].to_owned();
    fitted.push(ELLIPSIS);
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Only what is said appears, under MCP's names.
    #[test]
    fn the_mcp_form_holds_only_the_hints_said() {
        assert!(ToolAnnotations::default().to_mcp_json().is_empty());
        let hints = ToolAnnotations {
            title: "Delete a file".into(),
            destructive: Some(true),
            read_only: Some(false),
            ..ToolAnnotations::default()
        };
        assert!(!hints.is_empty());
        assert_eq!(
            Value::Object(hints.to_mcp_json()),
            json!({"title": "Delete a file", "readOnlyHint": false, "destructiveHint": true})
        );
    }

    #[test]
    fn titles_are_short_and_printable() {
        assert!(check_title("List issues").is_ok());
        assert!(check_title(&"x".repeat(MAX_TITLE_BYTES)).is_ok());
        assert!(check_title(&"x".repeat(MAX_TITLE_BYTES + 1)).is_err());
        assert!(check_title("two\nlines").is_err());
    }

    /// A title from elsewhere is made one the check accepts, keeping what it can.
    #[test]
    fn a_fitted_title_passes_the_check() {
        assert_eq!(fitted_title("List issues"), "List issues");
        assert_eq!(fitted_title("two\nlines\t"), "two lines ");
        // Cut inside a three-byte character: the cut falls back to its start.
        let long = format!("x{}", "€".repeat(100));
        let fitted = fitted_title(&long);
        assert!(check_title(&fitted).is_ok(), "{fitted}");
        assert!(fitted.ends_with("€…"), "{fitted}");
        assert!(long.starts_with(fitted.trim_end_matches('…')));
        assert_eq!(
            fitted_title(&"x".repeat(MAX_TITLE_BYTES)).len(),
            MAX_TITLE_BYTES
        );
    }
}
