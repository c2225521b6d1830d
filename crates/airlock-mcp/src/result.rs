//! An envelope as an MCP tool result: the envelope is the `structuredContent`,
//! the text content is one plain sentence (and, as the MCP specification asks
//! of tools with structured results, the serialized JSON for clients that read
//! only text), `isError` is true for denied and error. An upstream call that
//! reached its server is that server's own result, the envelope in its
//! `_meta`.

use airlock_core::envelope::{Envelope, Status};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

pub(crate) fn to_result(envelope: &Envelope) -> CallToolResult {
    if let Some(result) = upstream_result(envelope) {
        return result;
    }
    let structured = serde_json::to_value(envelope).unwrap_or(Value::Null);
    let is_error = matches!(envelope.status, Status::Denied | Status::Error);
    let content = vec![
        ContentBlock::text(sentence(envelope)),
        ContentBlock::text(structured.to_string()),
    ];
    // Constructed with `resultType: complete` (2026-07-28's); rmcp drops it
    // for older peers.
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(structured);
    result
}

/// The `_meta` key under which a forwarded result carries airlock's
/// envelope (without its `data`, which is the result itself).
pub(crate) const ENVELOPE_META: &str = "airlock/envelope";

/// An upstream tool's own result, where the call reached it: its content,
/// `structuredContent` (which its `outputSchema` describes), `isError` and
/// `_meta` as it gave them, so that a client sees what it would see without
/// airlock; airlock's envelope rides along in `_meta["airlock/envelope"]`.
fn upstream_result(envelope: &Envelope) -> Option<CallToolResult> {
    if envelope.op.method != "mcp.call" {
        return None;
    }
    let data = envelope.data.as_ref()?;
    if !data.get("content").is_some_and(Value::is_array) {
        return None;
    }
    let mut result = serde_json::from_value::<CallToolResult>(data.clone()).ok()?;
    let mut shown = envelope.clone();
    shown.data = None;
    let mut meta = result.meta.take().unwrap_or_default();
    meta.0.insert(
        ENVELOPE_META.to_owned(),
        serde_json::to_value(&shown).unwrap_or(Value::Null),
    );
    result.meta = Some(meta);
    result.result_type = Some(rmcp::model::ResultType::COMPLETE);
    Some(result)
}

/// The JSON-RPC error an upstream (or a client) answered with, where the
/// envelope carries one: to be passed on as it was.
pub(crate) fn passed_jsonrpc_error(envelope: &Envelope) -> Option<rmcp::ErrorData> {
    let error = envelope.data.as_ref()?.get("jsonrpc_error")?;
    let code = i32::try_from(error.get("code")?.as_i64()?).ok()?;
    let message = error.get("message")?.as_str()?.to_owned();
    let data = error.get("data").filter(|data| !data.is_null()).cloned();
    Some(rmcp::ErrorData::new(
        rmcp::model::ErrorCode(code),
        message,
        data,
    ))
}

/// One plain sentence saying what happened.
pub(crate) fn sentence(envelope: &Envelope) -> String {
    let tool = &envelope.op.tool;
    let on = envelope
        .op
        .path
        .as_deref()
        .map(|path| format!(" on {path}"))
        .unwrap_or_default();
    match envelope.status {
        Status::Allowed => {
            let data = envelope.data.as_ref();
            let number = |key: &str| data.and_then(|d| d.get(key)).and_then(Value::as_u64);
            match envelope.op.method.as_str() {
                "fs.read" => match data.and_then(|d| d.get("returned_range")) {
                    Some(range) => format!(
                        "Read {}: lines {}-{} of {} bytes.",
                        envelope.op.path.as_deref().unwrap_or("?"),
                        range.get("start_line").and_then(Value::as_u64).unwrap_or(0),
                        range.get("end_line").and_then(Value::as_u64).unwrap_or(0),
                        number("size_bytes").unwrap_or(0)
                    ),
                    None => format!("Read{on}."),
                },
                "fs.apply_patch" => format!("Applied {tool}{on}."),
                "hitl.status" => format!(
                    "Proposal {} is {}.",
                    data.and_then(|d| d.get("hitl_id"))
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    data.and_then(|d| d.get("status"))
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                ),
                _ => {
                    // What a walk did not look into, so fewer results than a
                    // listing shows are never a mystery.
                    let left_out = data
                        .and_then(|d| d.get("left_out"))
                        .map(|left| {
                            let parts: Vec<String> = ["hidden", "ignored", "protected"]
                                .iter()
                                .filter_map(|why| {
                                    let n = left.get(*why).and_then(Value::as_u64)?;
                                    (n > 0).then(|| format!("{n} {why}"))
                                })
                                .collect();
                            format!(" Not looked into: {} (entries).", parts.join(", "))
                        })
                        .unwrap_or_default();
                    match number("match_count").or_else(|| number("count")) {
                        Some(count) => format!("{tool}{on}: {count} found.{left_out}"),
                        None => format!("{tool}{on} done.{left_out}"),
                    }
                }
            }
        }
        Status::HitlRequired => match &envelope.hitl {
            Some(hitl) => format!(
                "{tool}{on} needs a human's approval: proposal {} ({} risk, {}), expires in {} s; \
                 call proposal_status with this hitl_id to learn the outcome.",
                hitl.hitl_id,
                hitl.risk.map_or("unknown", |risk| risk.as_str()),
                hitl.summary.as_deref().unwrap_or(""),
                hitl.ttl_seconds.unwrap_or(0)
            ),
            None => format!("{tool}{on} needs a human's approval."),
        },
        Status::Denied => match &envelope.error {
            Some(error) => format!(
                "Denied {tool}{on} ({}): {}",
                error.code.as_str(),
                error.message
            ),
            None => format!("Denied {tool}{on}."),
        },
        Status::Error => match &envelope.error {
            Some(error) => format!(
                "{tool}{on} failed ({}): {}",
                error.code.as_str(),
                error.message
            ),
            None => format!("{tool}{on} failed."),
        },
    }
}
