//! Tools as RTFS capability definitions (seed 003, "RTFS export"): a JSON Schema as an RTFS
//! type expression, and a tool as the `(capability ...)` form that names its schemas, where
//! it is served, its domains and its categories.
//!
//! Types follow the seed's table: `string` is `:string` (with or without `enum`), `integer`
//! `:int`, `number` `:float`, `boolean` `:bool`, `array` `[:vector ITEM]`, `object`
//! `[:map [:key TYPE] [:key {:optional true} TYPE] ...]`, and `null`, a nullable type (a
//! `type` list holding `"null"`) or anything else `:any`, as the seed's graceful degradation
//! asks of a schema that does not convert. References inside the schema (`#/$defs/...`,
//! `#/definitions/...`) are followed, [`MAX_DEPTH`] levels deep at most.
//!
//! Written here rather than taken from a crate: no crate writes RTFS.

use serde_json::Value;

/// How deep types are followed (nesting and references together) before `:any` is written.
pub const MAX_DEPTH: usize = 16;

/// One tool, as the capability definition is written for it.
#[derive(Debug, Clone, Copy)]
pub struct CapabilityTool<'a> {
    /// The service offering it.
    pub service: &'a str,
    /// The service's version.
    pub version: &'a str,
    /// Where the service is served: an `mcp+` URL for an MCP server, else a gRPC endpoint.
    pub endpoint: &'a str,
    /// The tool's name.
    pub name: &'a str,
    /// What it does.
    pub description: &'a str,
    /// Its input schema.
    pub input_schema: &'a Value,
    /// Its output schema, when it declares one.
    pub output_schema: Option<&'a Value>,
    /// Its domains.
    pub domains: &'a [String],
    /// Its categories.
    pub categories: &'a [String],
}

/// The RTFS capability definition of `tool`: `(capability :mcp.SERVICE.TOOL ...)` for a tool
/// served over MCP, `:grpc.SERVICE.TOOL` for one served over gRPC, with its version,
/// description, schemas, provider, domains and categories.
pub fn capability(tool: &CapabilityTool<'_>) -> String {
    let (kind, provider) = match tool.endpoint.strip_prefix("mcp+") {
        Some(url) => (
            "mcp",
            format!(
                "{{:type :mcp\n             :server-url {}\n             :tool-name {}}}",
                string(url),
                string(tool.name)
            ),
        ),
        None => (
            "grpc",
            format!(
                "{{:type :grpc\n             :endpoint {}\n             :service {}\n             :tool-name {}}}",
                string(tool.endpoint),
                string(tool.service),
                string(tool.name)
            ),
        ),
    };
    let mut text = format!(
        "(capability {}\n  :version {}\n  :description {}\n  :input-schema {}",
        keyword(&format!("{kind}.{}.{}", tool.service, tool.name)),
        string(tool.version),
        string(tool.description),
        type_expr_at(tool.input_schema, 2 + ":input-schema ".len()),
    );
    if let Some(output) = tool.output_schema {
        text.push_str(&format!(
            "\n  :output-schema {}",
            type_expr_at(output, 2 + ":output-schema ".len())
        ));
    }
    text.push_str(&format!(
        "\n  :provider {provider}\n  :domains {}\n  :categories {})\n",
        strings(tool.domains),
        strings(tool.categories)
    ));
    text
}

/// The RTFS type expression of `schema`, written from column 0.
pub fn type_expr(schema: &Value) -> String {
    type_expr_at(schema, 0)
}

/// The type expression of `schema`, for a place starting at column `indent` (the entries of
/// a map go on lines of their own, two columns in).
fn type_expr_at(schema: &Value, indent: usize) -> String {
    Converter { root: schema }.convert(schema, indent, MAX_DEPTH)
}

struct Converter<'a> {
    root: &'a Value,
}

impl Converter<'_> {
    fn convert(&self, schema: &Value, indent: usize, depth: usize) -> String {
        let Some(fields) = schema.as_object().filter(|_| depth > 0) else {
            return ":any".to_owned();
        };
        if let Some(target) = fields
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| self.resolve(reference))
        {
            return self.convert(target, indent, depth - 1);
        }
        let kind = match fields.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            // A list of types: a nullable one (or several) is `:any`, one alone is itself.
            Some(Value::Array(kinds)) if kinds.len() == 1 => kinds[0].as_str().unwrap_or(""),
            None if fields.contains_key("properties") => "object",
            _ => "",
        };
        match kind {
            "string" => ":string".to_owned(),
            "integer" => ":int".to_owned(),
            "number" => ":float".to_owned(),
            "boolean" => ":bool".to_owned(),
            "array" => {
                let items = fields.get("items").unwrap_or(&Value::Null);
                let item = self.convert(items, indent + "[:vector ".len(), depth - 1);
                format!("[:vector {item}]")
            }
            "object" => self.map(fields, indent, depth),
            _ => ":any".to_owned(),
        }
    }

    fn map(&self, fields: &serde_json::Map<String, Value>, indent: usize, depth: usize) -> String {
        let required: Vec<&str> = (fields.get("required").and_then(Value::as_array))
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(properties) = fields.get("properties").and_then(Value::as_object) else {
            return "[:map]".to_owned();
        };
        let pad = " ".repeat(indent + 2);
        let mut text = "[:map".to_owned();
        for (name, property) in properties {
            let key = key(name);
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                " {:optional true}"
            };
            let column = indent + 2 + 1 + key.len() + optional.len() + 1;
            let kind = self.convert(property, column, depth - 1);
            text.push_str(&format!("\n{pad}[{key}{optional} {kind}]"));
        }
        text.push(']');
        text
    }

    /// The schema a local reference (`#/...`, a JSON pointer into the root) points at.
    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }
}

/// A map key: a keyword when the name makes one (`:owner`), else a string.
fn key(name: &str) -> String {
    let starts_well = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let keyword_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '?' | '!' | '*'));
    if starts_well && keyword_chars {
        format!(":{name}")
    } else {
        string(name)
    }
}

/// A keyword naming a capability (`:mcp.github.list_issues`).
fn keyword(name: &str) -> String {
    format!(":{name}")
}

/// An RTFS string literal.
fn string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A vector of strings (`["github" "github.issues"]`).
fn strings(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|item| string(item)).collect();
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Protects the seed's example conversion, exactly as it writes it.
    #[test]
    fn the_seeds_example_converts_as_it_gives_it() {
        let schema = json!({
            "type": "object",
            "properties": {
                "owner": {"type": "string"},
                "repo": {"type": "string"},
                "state": {"type": "string", "enum": ["open", "closed", "all"]}
            },
            "required": ["owner", "repo"]
        });
        assert_eq!(
            type_expr(&schema),
            "[:map\n  [:owner :string]\n  [:repo :string]\n  [:state {:optional true} :string]]"
        );
    }

    /// Protects the table's other rows, nesting, references and what degrades to `:any`.
    #[test]
    fn every_type_of_the_table_converts_and_the_rest_is_any() {
        for (schema, expected) in [
            (json!({"type": "integer"}), ":int"),
            (json!({"type": "number"}), ":float"),
            (json!({"type": "boolean"}), ":bool"),
            (json!({"type": "null"}), ":any"),
            (json!({"type": ["string", "null"]}), ":any"),
            (json!({"type": ["string"]}), ":string"),
            (
                json!({"type": "array", "items": {"type": "integer"}}),
                "[:vector :int]",
            ),
            (json!({"type": "array"}), "[:vector :any]"),
            (json!({"type": "object"}), "[:map]"),
            (json!({"anyOf": [{"type": "string"}]}), ":any"),
            (json!(true), ":any"),
            (json!({"$ref": "#/nowhere"}), ":any"),
        ] {
            assert_eq!(type_expr(&schema), expected, "{schema}");
        }
        let nested = json!({
            "type": "object", "required": ["start"],
            "properties": {
                "start": {"$ref": "#/$defs/Point"},
                "tags": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                "odd key": {"type": "string"}
            },
            "$defs": {"Point": {"type": "object", "required": ["x"],
                                "properties": {"x": {"type": "number"}}}}
        });
        assert_eq!(
            type_expr(&nested),
            "[:map\n  [\"odd key\" {:optional true} :string]\n  [:start [:map\n            [:x :float]]]\n  [:tags {:optional true} [:vector [:map\n                                     [:x :float]]]]]"
        );
        let looping = json!({"$ref": "#"});
        assert_eq!(type_expr(&looping), ":any");
    }

    /// Protects the capability form of the seed (section 11.4), for MCP and gRPC providers.
    #[test]
    fn a_tool_is_written_as_the_seeds_capability_form() {
        let input = json!({"type": "object", "required": ["owner"],
                           "properties": {"owner": {"type": "string"}}});
        let domains = ["github".to_owned(), "github.issues".to_owned()];
        let categories = ["crud.read".to_owned()];
        let tool = CapabilityTool {
            service: "github",
            version: "1.0.0",
            endpoint: "mcp+https://api.github.com/mcp",
            name: "list_issues",
            description: "List issues in a \"GitHub\" repository",
            input_schema: &input,
            output_schema: Some(&json!({"type": "array", "items": {"type": "string"}})),
            domains: &domains,
            categories: &categories,
        };
        assert_eq!(
            capability(&tool),
            "(capability :mcp.github.list_issues\n  :version \"1.0.0\"\n  \
             :description \"List issues in a \\\"GitHub\\\" repository\"\n  \
             :input-schema [:map\n                  [:owner :string]]\n  \
             :output-schema [:vector :string]\n  \
             :provider {:type :mcp\n             :server-url \"https://api.github.com/mcp\"\n             \
             :tool-name \"list_issues\"}\n  \
             :domains [\"github\" \"github.issues\"]\n  :categories [\"crud.read\"])\n"
        );
        let grpc = CapabilityTool {
            endpoint: "http://10.0.0.7:7001",
            output_schema: None,
            ..tool
        };
        let written = capability(&grpc);
        assert!(
            written.starts_with("(capability :grpc.github.list_issues\n"),
            "{written}"
        );
        assert!(
            written.contains(
                ":provider {:type :grpc\n             :endpoint \"http://10.0.0.7:7001\""
            ),
            "{written}"
        );
        assert!(!written.contains(":output-schema"), "{written}");
    }
}
