//! The OpenAPI 3.1 description of the HTTP API, built from the request types'
//! JSON Schemas (derived from the structs the handlers parse) and the table
//! of routes below.

use schemars::Schema;
use serde_json::{Map, Value, json};

/// One documented route: method, path, the role it needs, what it does, its
/// request body (by component name), and its answers.
struct Route {
    method: &'static str,
    path: &'static str,
    role: &'static str,
    summary: &'static str,
    body: Option<&'static str>,
    /// Status code and the component its body is (`None`: no body schema).
    answers: &'static [(u16, &'static str)],
}

const ROUTES: &[Route] = &[
    Route {
        method: "post",
        path: "/v1/tools/call",
        role: "agent",
        summary: "Submit a tool call: the envelope, or 202 while a human must decide",
        body: Some("CallBody"),
        answers: &[
            (200, "Envelope"),
            (202, "Pending"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (413, "Error"),
            (429, "Envelope"),
        ],
    },
    Route {
        method: "post",
        path: "/v1/hooks/{agent}",
        role: "agent",
        summary: "An agent's hook event: airlock's verdict, once a human decided where the policy asks",
        body: Some("HookBody"),
        answers: &[
            (200, "HookVerdict"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (413, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/hitl/pending",
        role: "approver",
        summary: "The pending approvals, newest first",
        body: None,
        answers: &[(200, "ApprovalList"), (401, "Error"), (403, "Error")],
    },
    Route {
        method: "get",
        path: "/hitl/pending/{id}",
        role: "approver",
        summary: "One approval, with its diff",
        body: None,
        answers: &[
            (200, "Approval"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
        ],
    },
    Route {
        method: "post",
        path: "/hitl/decide/{id}",
        role: "approver",
        summary: "Approve or deny an approval",
        body: Some("DecideBody"),
        answers: &[
            (200, "Envelope"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (409, "Error"),
            (413, "Error"),
        ],
    },
    Route {
        method: "post",
        path: "/hitl/decide-batch",
        role: "approver",
        summary: "Decide several approvals, each its own decision, in creation order; approving stops at the first that fails to apply",
        body: Some("BatchBody"),
        answers: &[
            (200, "BatchResults"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (413, "Error"),
        ],
    },
    Route {
        method: "post",
        path: "/hitl/preview/{id}",
        role: "approver",
        summary: "The diff approving with an edited version (content) would apply; decides nothing",
        body: Some("PreviewBody"),
        answers: &[
            (200, "Preview"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (409, "Error"),
            (413, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/hitl/result/{id}",
        role: "agent",
        summary: "The outcome of a call that waited for a human: 202 while pending",
        body: None,
        answers: &[
            (200, "Envelope"),
            (202, "Pending"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/hitl/grants",
        role: "approver",
        summary: "The \"always allow\" grants in force, oldest first",
        body: None,
        answers: &[(200, "GrantList"), (401, "Error"), (403, "Error")],
    },
    Route {
        method: "delete",
        path: "/hitl/grants/{id}",
        role: "approver",
        summary: "Revoke a grant (by id or a unique prefix); audited as grant_revoked",
        body: None,
        answers: &[
            (200, "Revoked"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/hitl/events",
        role: "approver (all) or agent (its own)",
        summary: "Server-sent events: created, decided and expired approvals (an agent's stream has only its own)",
        body: None,
        answers: &[(200, "EventStream"), (401, "Error"), (403, "Error")],
    },
    Route {
        method: "post",
        path: "/v1/sessions",
        role: "agent",
        summary: "Open a session (DESIGN §5.3): its roots, workdir, environment, network and limits, clamped by the configuration",
        body: Some("SessionOpen"),
        answers: &[
            (201, "Session"),
            (202, "Pending"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (413, "Error"),
            (429, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/v1/sessions",
        role: "agent (its own) or admin (all=true)",
        summary: "The caller's open sessions (include_ended: the ended ones too)",
        body: None,
        answers: &[
            (200, "SessionList"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/v1/sessions/{id}",
        role: "agent (its own) or admin",
        summary: "One session, open or ended",
        body: None,
        answers: &[
            (200, "Session"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
        ],
    },
    Route {
        method: "delete",
        path: "/v1/sessions/{id}",
        role: "agent (its own) or admin",
        summary: "Close a session: its pending approvals are cancelled and its commands stopped",
        body: None,
        answers: &[
            (200, "Session"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (409, "Error"),
        ],
    },
    Route {
        method: "post",
        path: "/v1/sessions/{id}/signal",
        role: "agent (its own)",
        summary: "Signal a session's running commands (term, int or kill)",
        body: Some("SessionSignal"),
        answers: &[
            (200, "SignalResult"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
            (404, "Error"),
            (409, "Error"),
            (413, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/v1/stats",
        role: "approver",
        summary: "Approval analytics over the audit log: calls, asks, decisions, timeouts, undos, time to decision, a timeline of decisions; all or by tool, risk, approver or session",
        body: None,
        answers: &[
            (200, "Stats"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/metrics",
        role: "admin",
        summary: "Prometheus text (version 0.0.4): calls by tool, decision and risk; approvals pending; time to decision; apply failures; upstream and audit append latency; checkpoints",
        body: None,
        answers: &[(200, ""), (401, "Error"), (403, "Error"), (404, "Error")],
    },
    Route {
        method: "get",
        path: "/audit",
        role: "admin",
        summary: "Audit records matching a query, oldest first",
        body: None,
        answers: &[
            (200, "AuditRecords"),
            (400, "Error"),
            (401, "Error"),
            (403, "Error"),
        ],
    },
    Route {
        method: "get",
        path: "/audit/verify",
        role: "admin",
        summary: "Verify the audit log's hash chain",
        body: None,
        answers: &[(200, "AuditCheck"), (401, "Error"), (403, "Error")],
    },
    Route {
        method: "get",
        path: "/hitl/link/{id}/{decision}",
        role: "link",
        summary: "A signed link: a page showing the approval and a form to confirm; decides nothing",
        body: None,
        answers: LINK_ANSWERS,
    },
    Route {
        method: "post",
        path: "/hitl/link/{id}/{decision}",
        role: "link",
        summary: "Confirm a signed link: decides (channel link) and spends the link",
        body: Some("LinkForm"),
        answers: LINK_ANSWERS,
    },
    Route {
        method: "get",
        path: "/openapi.json",
        role: "any",
        summary: "This description",
        body: None,
        answers: &[(200, "")],
    },
];

/// A signed link answers with a page, whatever happened.
const LINK_ANSWERS: &[(u16, &str)] = &[
    (200, "Page"),
    (400, "Page"),
    (403, "Page"),
    (404, "Page"),
    (409, "Page"),
];

/// The document, given the request bodies' and the audit query's schemas.
#[expect(clippy::too_many_arguments, reason = "one schema per request type")]
pub(crate) fn document(
    call: Schema,
    hook: Schema,
    decide: Schema,
    preview: Schema,
    batch: Schema,
    audit_params: Schema,
    stats_params: Schema,
    sessions_params: Schema,
) -> Value {
    let mut schemas = json!({
        "Error": {
            "type": "object",
            "required": ["status", "error"],
            "properties": {
                "status": {"const": "error"},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                },
            },
        },
        "Envelope": {
            "type": "object",
            "required": ["schema_version", "status", "op"],
            "properties": {
                "schema_version": {"type": "string"},
                "status": {"enum": ["allowed", "denied", "error", "hitl_required"]},
                "op": {"type": "object"},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "reason": {
                            "type": "object",
                            "description": "On every denial: which layer refused and by what",
                            "required": ["layer", "rule"],
                            "properties": {
                                "layer": {"enum": ["sandbox", "write_allowlist", "profile", "rule", "default_risk", "risk_policy", "grant", "hitl", "human", "timeout", "limit"]},
                                "rule": {"type": "string"},
                                "profile": {"type": "string"},
                                "risk": {"enum": ["low", "medium", "high", "critical"]},
                            },
                        },
                    },
                },
            },
        },
        "SessionOpen": session_open_schema(),
        "Session": {
            "type": "object",
            "required": ["session_id", "status", "expires_ms", "roots", "workdir", "network", "authority_hash"],
            "properties": {
                "session_id": {"type": "string"},
                "status": {"enum": ["open", "closed", "expired"]},
                "created_ms": {"type": "integer"},
                "expires_ms": {"type": "integer"},
                "expires_at": {"type": "string"},
                "idle_ttl_ms": {"type": "integer"},
                "roots": {"type": "array", "items": {"type": "object"}},
                "workdir": {"type": "string"},
                "env": {"type": "array", "items": {"type": "string"}},
                "env_dropped": {"type": "array", "items": {"type": "string"}},
                "network": {},
                "limits": {"type": "object"},
                "labels": {"type": "object"},
                "authority_hash": {"type": "string"},
            },
        },
        "SessionList": {
            "type": "object",
            "required": ["sessions"],
            "properties": {"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/Session"}}},
        },
        "SessionSignal": {
            "type": "object",
            "required": ["signal"],
            "additionalProperties": false,
            "properties": {"signal": {"enum": ["term", "int", "kill"]}},
        },
        "SignalResult": {
            "type": "object",
            "required": ["session_id", "signal", "delivered"],
            "properties": {
                "session_id": {"type": "string"},
                "signal": {"enum": ["term", "int", "kill"]},
                "delivered": {"type": "boolean"},
            },
        },
        "HookVerdict": {
            "type": "object",
            "required": ["verdict"],
            "properties": {
                "verdict": {"enum": ["allow", "deny", "none", "notice"]},
                "reason": {"type": ["string", "null"]},
                "updated_input": {"type": ["object", "null"]},
            },
        },
        "Pending": {
            "type": "object",
            "required": ["approval_id", "status"],
            "properties": {
                "approval_id": {"type": ["string", "null"]},
                "status": {"type": "string"},
            },
        },
        "Approval": {
            "type": "object",
            "required": ["id", "status", "tool", "risk", "created_ms", "expires_ms"],
            "properties": {
                "id": {"type": "string"},
                "status": {"type": "string"},
                "tool": {"type": "string"},
                "risk": {"type": "string"},
                "diff": {"type": ["string", "null"]},
                "created_ms": {"type": "integer"},
                "expires_ms": {"type": "integer"},
                "undone": {"type": "boolean"},
                "always": {
                    "description": "The always-allows that may be chosen now, each stated in full (null where none may)",
                    "type": ["object", "null"],
                    "properties": {
                        "session": {"type": ["string", "null"]},
                        "persistent": {"type": ["string", "null"]},
                    },
                },
            },
        },
        "ApprovalList": {
            "type": "object",
            "required": ["approvals"],
            "properties": {"approvals": {"type": "array", "items": {"$ref": "#/components/schemas/Approval"}}},
        },
        "Grant": {
            "type": "object",
            "required": ["id", "tool", "scope", "created_ms"],
            "properties": {
                "id": {"type": "string"},
                "tool": {"type": "string"},
                "path_glob": {"type": ["string", "null"]},
                "scope": {"enum": ["session", "persistent"]},
                "session": {"type": ["string", "null"]},
                "user": {"type": ["string", "null"]},
                "created_ms": {"type": "integer"},
                "created_by": {"type": ["string", "null"]},
                "expires_ms": {"type": ["integer", "null"]},
                "approval_id": {"type": ["string", "null"]},
            },
        },
        "GrantList": {
            "type": "object",
            "required": ["grants"],
            "properties": {"grants": {"type": "array", "items": {"$ref": "#/components/schemas/Grant"}}},
        },
        "Revoked": {
            "type": "object",
            "required": ["revoked"],
            "properties": {"revoked": {"$ref": "#/components/schemas/Grant"}},
        },
        "Figures": {
            "type": "object",
            "required": ["calls", "allowed", "denied_by_policy", "asks", "approved", "edited", "denied", "timeouts", "cancelled", "undone", "decision_ms"],
            "properties": {
                "calls": {"type": "integer"},
                "allowed": {"type": "integer"},
                "denied_by_policy": {"type": "integer"},
                "asks": {"type": "integer"},
                "approved": {"type": "integer"},
                "edited": {"type": "integer"},
                "denied": {"type": "integer"},
                "timeouts": {"type": "integer"},
                "cancelled": {"type": "integer"},
                "undone": {"type": "integer"},
                "decision_ms": {
                    "type": "object",
                    "required": ["count"],
                    "properties": {
                        "count": {"type": "integer"},
                        "p50": {"type": ["integer", "null"]},
                        "p90": {"type": ["integer", "null"]},
                        "p99": {"type": ["integer", "null"]},
                        "max": {"type": ["integer", "null"]},
                    },
                },
            },
        },
        "Stats": {
            "type": "object",
            "required": ["since", "by", "total", "groups", "grants_in_force", "timeline_unit", "timeline"],
            "properties": {
                "since": {"type": ["string", "null"]},
                "by": {"enum": ["tool", "risk", "approver", "session", null]},
                "total": {"$ref": "#/components/schemas/Figures"},
                "groups": {"type": "array", "items": {
                    "allOf": [{"$ref": "#/components/schemas/Figures"}],
                    "type": "object",
                    "required": ["key"],
                    "properties": {"key": {"type": ["string", "null"]}},
                }},
                "grants_in_force": {"type": "integer"},
                "timeline_unit": {"enum": ["hour", "day"]},
                "timeline": {"type": "array", "items": {
                    "type": "object",
                    "required": ["at", "approved", "denied", "timeouts"],
                    "properties": {
                        "at": {"type": "string"},
                        "approved": {"type": "integer"},
                        "denied": {"type": "integer"},
                        "timeouts": {"type": "integer"},
                    },
                }},
            },
        },
        "AuditRecords": {
            "type": "object",
            "required": ["records"],
            "properties": {"records": {"type": "array", "items": {"type": "object"}}},
        },
        "AuditCheck": {
            "type": "object",
            "required": ["ok", "records", "last_seq"],
            "properties": {
                "ok": {"type": "boolean"},
                "records": {"type": "integer"},
                "last_seq": {"type": "integer"},
                "repairs": {"type": "array", "items": {"type": "string"}},
                "first_bad_seq": {"type": "integer"},
                "line": {"type": "integer"},
                "offset": {"type": "integer"},
                "problem": {"type": "string"},
            },
        },
        // The schema of an event stream describes each event (as
        // `itemSchema` does from OpenAPI 3.2 on), not the stream's text.
        "EventStream": {
            "description": "One event: `created`, `decided` or `expired` with the approval as `/hitl/pending/{id}` shows it, or `resync` (data `{}`): events were missed, reload the list",
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"enum": ["created", "decided", "expired", "resync"]},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": "#/components/schemas/EventData"},
                },
            },
        },
        "EventData": {
            "type": "object",
            "properties": {
                "type": {"enum": ["created", "decided", "expired"]},
                "approval": {"$ref": "#/components/schemas/Approval"},
            },
        },
        "Page": {"type": "string"},
        "BatchResults": {
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "required": ["id", "outcome"],
                "properties": {
                    "id": {"type": "string"},
                    "outcome": {"enum": ["decided", "refused", "skipped"]},
                    "envelope": {"$ref": "#/components/schemas/Envelope"},
                    "error": {"type": "object"},
                },
            }}},
        },
        "Preview": {
            "type": "object",
            "required": ["diff"],
            "properties": {"diff": {"type": "string"}},
        },
        "LinkForm": {
            "type": "object",
            "properties": {"reason": {"type": "string"}},
        },
    });
    for (name, schema) in [
        ("CallBody", call),
        ("HookBody", hook),
        ("DecideBody", decide),
        ("PreviewBody", preview),
        ("BatchBody", batch),
    ] {
        add_component(&mut schemas, name, schema);
    }
    let mut paths = Map::new();
    for route in ROUTES {
        let mut operation = json!({
            "summary": route.summary,
            "description": format!("Role: {}.", route.role),
            "responses": answers(route),
        });
        if route.role == "any" || route.role == "link" {
            operation["security"] = json!([]);
        }
        let mut parameters = Vec::new();
        if route.path.contains("{id}") {
            parameters.push(json!({"name": "id", "in": "path", "required": true,
                "schema": {"type": "string"}}));
        }
        if route.path.contains("{agent}") {
            parameters.push(json!({"name": "agent", "in": "path", "required": true,
                "schema": {"enum": ["claude-code", "codex", "gemini"]}}));
        }
        if route.path.contains("{decision}") {
            parameters.push(json!({"name": "decision", "in": "path", "required": true,
                "schema": {"enum": ["approve", "deny"]}}));
            for (name, description) in [
                ("exp", "The approval's expiry (ms since the epoch)"),
                ("sig", "HMAC-SHA256 over the id, decision and expiry (hex)"),
            ] {
                parameters.push(json!({"name": name, "in": "query", "required": true,
                    "description": description, "schema": {"type": "string"}}));
            }
        }
        if route.path == "/audit" {
            parameters.extend(query_parameters(&audit_params));
        }
        if route.path == "/v1/stats" {
            parameters.extend(query_parameters(&stats_params));
        }
        if route.path == "/v1/sessions" && route.method == "get" {
            parameters.extend(query_parameters(&sessions_params));
        }
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        if let Some(body) = route.body {
            let (required, media) = if body == "LinkForm" {
                (false, "application/x-www-form-urlencoded")
            } else {
                (true, "application/json")
            };
            operation["requestBody"] = json!({
                "required": required,
                "content": {media: {
                    "schema": {"$ref": format!("#/components/schemas/{body}")}
                }},
            });
        }
        let entry = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}));
        entry[route.method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "airlock",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "airlock's HTTP approval API (DESIGN §10). Errors have the envelope's error shape.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    })
}

/// `session_open`'s arguments, as the tool lists them.
fn session_open_schema() -> Value {
    airlock_core::tools::schemas()
        .iter()
        .find(|schema| schema.name == "session_open")
        .map_or_else(
            || json!({"type": "object"}),
            |schema| schema.input_schema.clone(),
        )
}

/// A request type's schema as a component; its `$defs` become components
/// of their own, and the references to them follow.
fn add_component(schemas: &mut Value, name: &str, schema: Schema) {
    let text = schema
        .to_value()
        .to_string()
        .replace("\"#/$defs/", "\"#/components/schemas/");
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    object.remove("$schema");
    if let Some(Value::Object(defs)) = object.remove("$defs") {
        for (def, schema) in defs {
            schemas[def] = schema;
        }
    }
    schemas[name] = Value::Object(object);
}

fn answers(route: &Route) -> Value {
    let mut out = Map::new();
    for (status, component) in route.answers {
        let description = match status {
            200 => "OK",
            201 => "Created",
            202 => "Accepted: a human must decide",
            400 => "Malformed input",
            401 => "No or unknown bearer token",
            403 => {
                "Not allowed for this token, or the request came under a host name or from a browser origin the listener does not answer"
            }
            404 => "Unknown id",
            409 => "Already decided, expired, or a link already used; a session closed or expired",
            413 => "Body too large",
            415 => "The body is not sent as application/json",
            429 => "Too many pending approvals",
            _ => "",
        };
        let mut answer = json!({"description": description});
        if !component.is_empty() {
            let media = match *component {
                "EventStream" => "text/event-stream",
                "Page" => "text/html",
                _ => "application/json",
            };
            answer["content"] = json!({media: {
                "schema": {"$ref": format!("#/components/schemas/{component}")}
            }});
        }
        out.insert(status.to_string(), answer);
    }
    // Every route: no Host is 400, a Host or Origin that is not the
    // listener's is 403, both as JSON errors (on a page route too).
    let error = json!({"schema": {"$ref": "#/components/schemas/Error"}});
    for status in ["400", "403"] {
        let answer = out.entry(status.to_owned()).or_insert_with(|| {
            json!({"description": if status == "400" { "Malformed input, or no Host header" } else { "" }})
        });
        if answer["description"] == "" {
            answer["description"] = json!(
                "The request came under a host name or from a browser origin the listener does not answer"
            );
        }
        answer["content"]["application/json"] = error.clone();
    }
    // A JSON body must be sent as application/json.
    if route.body.is_some_and(|body| body != "LinkForm") {
        out.insert(
            "415".to_owned(),
            json!({"description": "The body is not sent as application/json",
                   "content": {"application/json": error}}),
        );
    }
    Value::Object(out)
}

/// The query parameters of a query struct's schema.
fn query_parameters(schema: &Schema) -> Vec<Value> {
    let value = schema.clone().to_value();
    let Some(properties) = value.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property
                .as_object_mut()
                .and_then(|object| object.remove("description"));
            let mut parameter = json!({"name": name, "in": "query", "required": false,
                "schema": property});
            if let Some(description) = description {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}
