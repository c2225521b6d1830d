//! TypeScript declarations of the tools a script may call, made from their
//! JSON Schemas (DESIGN §5.2 "Discovery"): what the model reads in the
//! tool's description (up to 8 KiB), in `airlock://codemode/types.d.ts`,
//! and from `codemode.get_tools` inside the sandbox.

use airlock_broker::ListedTool;
use serde_json::{Map, Value};

/// The most of the declarations the tool's description holds; beyond it,
/// the names only.
pub const DESCRIPTION_BUDGET: usize = 8 * 1024;

/// How deep a schema is followed before it is `unknown`.
const MAX_DEPTH: usize = 8;

/// The discovery tools every script has (where the profiles let it).
pub const SEARCH_TOOLS: &str = "search_tools";
pub const GET_TOOLS: &str = "get_tools";

/// `declare const codemode: { … }` for `tools`, with `search_tools` and
/// `get_tools` and the errors a call throws.
pub fn declarations(tools: &[ListedTool], discovery: bool) -> String {
    let mut out = String::from("declare const codemode: {\n");
    for tool in tools {
        out.push_str(&member(tool));
    }
    if discovery {
        out.push_str(
            "  /** Tools whose name or description has every word of `query`. */\n  \
             search_tools(args: { query: string }): Promise<{ name: string; description: string }[]>;\n  \
             /** The named tools' schemas and declarations. */\n  \
             get_tools(args: { names: string[] }): Promise<{ name: string; description: string; input_schema: unknown; output_schema?: unknown; declaration: string }[]>;\n",
        );
    }
    out.push_str(
        "};\n\
         /** A call the policy refused (catchable); `reason` is \"denied\" or \"elicitation_unsupported\". */\n\
         declare class ToolCallDeniedError extends Error { tool: string; code: string; reason: string }\n\
         /** A call that failed (not found, invalid input, an upstream error…). */\n\
         declare class ToolCallError extends Error { tool: string; code: string }\n",
    );
    out
}

/// What the tool's description says of the script's tools: the
/// declarations, within [`DESCRIPTION_BUDGET`]; beyond it, the names and
/// where the declarations are.
pub fn catalogue(tools: &[ListedTool], discovery: bool) -> String {
    let declared = declarations(tools, discovery);
    if declared.len() <= DESCRIPTION_BUDGET {
        return format!("\n\n```ts\n{declared}```");
    }
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    format!(
        " Tools: {}. Their declarations: codemode.get_tools({{names}}) and codemode.search_tools({{query}}) in a script, or the resource airlock://codemode/types.d.ts.",
        names.join(", ")
    )
}

/// One tool's member of `codemode`.
pub fn member(tool: &ListedTool) -> String {
    let doc = tool
        .description
        .lines()
        .next()
        .unwrap_or_default()
        .replace("*/", "* /");
    let output = tool
        .output_schema
        .as_ref()
        .map_or_else(|| "any".to_owned(), |schema| type_of(schema, 0));
    format!(
        "  /** {doc} */\n  {}(args: {}): Promise<{output}>;\n",
        property_name(&tool.name),
        type_of(&tool.input_schema, 0)
    )
}

fn property_name(name: &str) -> String {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if identifier {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    }
}

/// A JSON Schema as a TypeScript type (what the declarations need:
/// objects, arrays, scalars, enums, unions; anything else `unknown`).
pub fn type_of(schema: &Value, depth: usize) -> String {
    let Some(schema) = schema.as_object() else {
        return "unknown".to_owned();
    };
    if depth > MAX_DEPTH {
        return "unknown".to_owned();
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return union(values.iter().map(Value::to_string).collect());
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            return union(
                options
                    .iter()
                    .map(|option| type_of(option, depth + 1))
                    .collect(),
            );
        }
    }
    match schema.get("type") {
        Some(Value::String(kind)) => of_kind(kind, schema, depth),
        Some(Value::Array(kinds)) => union(
            kinds
                .iter()
                .filter_map(Value::as_str)
                .map(|kind| of_kind(kind, schema, depth))
                .collect(),
        ),
        _ if schema.contains_key("properties") => of_kind("object", schema, depth),
        _ => "unknown".to_owned(),
    }
}

fn of_kind(kind: &str, schema: &Map<String, Value>, depth: usize) -> String {
    match kind {
        "string" => "string".to_owned(),
        "number" | "integer" => "number".to_owned(),
        "boolean" => "boolean".to_owned(),
        "null" => "null".to_owned(),
        "array" => {
            let item = schema
                .get("items")
                .map_or_else(|| "unknown".to_owned(), |items| type_of(items, depth + 1));
            if item.contains(' ') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        "object" => object(schema, depth),
        _ => "unknown".to_owned(),
    }
}

fn object(schema: &Map<String, Value>, depth: usize) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields: Vec<String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let optional = if required.contains(&name.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    format!(
                        "{}{optional}: {}",
                        property_name(name),
                        type_of(property, depth + 1)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    match schema.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(extra @ Value::Object(_)) => {
            fields.push(format!("[key: string]: {}", type_of(extra, depth + 1)));
        }
        _ if fields.is_empty() => fields.push("[key: string]: unknown".to_owned()),
        _ => {}
    }
    format!("{{ {} }}", fields.join("; "))
}

fn union(mut members: Vec<String>) -> String {
    members.dedup();
    match members.len() {
        0 => "never".to_owned(),
        1 => members.remove(0),
        _ => members.join(" | "),
    }
}

/// `search_tools({query})`: the tools whose name or description holds
/// every word of `query` (case-insensitive), at most 20.
pub fn search(tools: &[ListedTool], query: &str) -> Value {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let found: Vec<Value> = tools
        .iter()
        .filter(|tool| {
            let text = format!("{} {}", tool.name, tool.description).to_lowercase();
            words.iter().all(|word| text.contains(word.as_str()))
        })
        .take(20)
        .map(|tool| serde_json::json!({"name": tool.name, "description": tool.description}))
        .collect();
    Value::Array(found)
}

/// `get_tools({names})`: each named tool's schemas and declaration.
pub fn get(tools: &[ListedTool], names: &[String]) -> Value {
    let found: Vec<Value> = names
        .iter()
        .filter_map(|name| tools.iter().find(|tool| &tool.name == name))
        .map(|tool| {
            let mut entry = serde_json::json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "declaration": member(tool).lines().map(str::trim).collect::<Vec<_>>().join("\n"),
            });
            if let Some(output) = &tool.output_schema {
                entry["output_schema"] = output.clone();
            }
            entry
        })
        .collect();
    Value::Array(found)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::type_of;

    #[test]
    fn the_description_holds_declarations_up_to_its_budget() {
        let tool = |n: usize| airlock_broker::ListedTool {
            name: format!("up__tool_{n}"),
            description: "Does one thing.".to_owned(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            output_schema: None,
            annotations: None,
        };
        let few: Vec<_> = (0..3).map(tool).collect();
        let text = super::catalogue(&few, true);
        assert!(
            text.contains("  up__tool_2(args: { text: string }): Promise<any>;"),
            "{text}"
        );
        assert!(
            text.contains("search_tools(args: { query: string })"),
            "{text}"
        );
        let many: Vec<_> = (0..200).map(tool).collect();
        let text = super::catalogue(&many, true);
        assert!(text.len() < super::DESCRIPTION_BUDGET, "{}", text.len());
        assert!(
            text.starts_with(" Tools: up__tool_0, up__tool_1,"),
            "{text}"
        );
        assert!(text.contains("airlock://codemode/types.d.ts"));
    }

    #[test]
    fn schemas_become_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "max": {"type": "integer"},
                "mode": {"enum": ["a", "b"]},
                "lines": {"type": "array", "items": {"type": ["string", "null"]}},
                "odd-name": {"type": "boolean"}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert_eq!(
            type_of(&schema, 0),
            "{ path: string; max?: number; mode?: \"a\" | \"b\"; lines?: (string | null)[]; \"odd-name\"?: boolean }"
        );
        assert_eq!(
            type_of(&json!({"type": "object"}), 0),
            "{ [key: string]: unknown }"
        );
        assert_eq!(type_of(&json!(true), 0), "unknown");
    }
}
