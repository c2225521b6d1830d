//! `airlock tools`: every built-in tool with its arguments, from the same
//! schemas `tools/list` serves over MCP.

use std::fmt::Write as _;

use clap::Args;
use serde_json::Value;

use crate::{Failure, print, print_json};

#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// The tools as MCP lists them (name, description, inputSchema,
    /// annotations), one JSON array.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: &ToolsArgs) -> Result<u8, Failure> {
    let tools = airlock_mcp::builtin_tools();
    if args.json {
        let text = serde_json::to_string_pretty(&tools).map_err(Failure::internal)?;
        print_json(&text);
        return Ok(0);
    }
    let mut out = String::new();
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default();
        let kind = if tool["annotations"]["readOnlyHint"] == Value::Bool(true) {
            "read"
        } else {
            "write: asks a human unless the policy allows it"
        };
        let _ = writeln!(out, "{name} ({kind})");
        if let Some(description) = tool["description"].as_str() {
            let _ = writeln!(out, "  {description}");
        }
        let schema = &tool["inputSchema"];
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = schema["properties"].as_object() {
            for (argument, spec) in properties {
                let mut kind = spec["type"].as_str().unwrap_or("any").to_owned();
                if let Some(values) = spec["enum"].as_array() {
                    let values: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
                    kind = values.join(" | ");
                }
                let need = if required.contains(&argument.as_str()) {
                    ", required"
                } else {
                    ""
                };
                let about = spec["description"]
                    .as_str()
                    .map(|text| format!(": {text}"))
                    .unwrap_or_default();
                let _ = writeln!(out, "    {argument} ({kind}{need}){about}");
            }
        }
        out.push('\n');
    }
    out.push_str(
        "Arguments are one JSON object: airlock call TOOL --args '{...}'. Upstream MCP servers' tools \
         (upstreams: in airlock.yaml) are listed by `airlock serve` as <upstream>__<tool>.",
    );
    print(&out);
    Ok(0)
}
