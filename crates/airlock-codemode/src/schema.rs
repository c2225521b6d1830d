//! Checking a script's call arguments against the tool's JSON Schema before
//! the call goes anywhere, so that a mistake comes back at once as
//! `invalid_input` with the JSON path of the value, not as whatever the
//! tool makes of it.
//!
//! The keywords tool schemas use are checked: `type`, `properties`,
//! `required`, `additionalProperties`, `items`, `enum`, `const`, `anyOf`,
//! `oneOf`, `allOf`, the bounds of numbers, strings and arrays. Others
//! (`$ref`, `pattern`, formats) are left to the tool, which checks its
//! arguments again.

use serde_json::Value;

/// The first place `value` breaks `schema`: `(JSON pointer, what is wrong)`.
pub fn check(schema: &Value, value: &Value) -> Result<(), (String, String)> {
    walk(schema, value, &mut String::new(), 0)
}

const MAX_DEPTH: usize = 64;

fn walk(
    schema: &Value,
    value: &Value,
    at: &mut String,
    depth: usize,
) -> Result<(), (String, String)> {
    let Some(schema) = schema.as_object() else {
        // `true`, `{}`-like or not a schema at all: nothing to check here.
        return match schema {
            Value::Bool(false) => Err((pointer(at), "no value is allowed here".to_owned())),
            _ => Ok(()),
        };
    };
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let fail = |at: &String, message: String| Err((pointer(at), message));
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !kinds.is_empty() && !kinds.iter().any(|kind| is_a(value, kind)) {
            return fail(
                at,
                format!("expected {}, got {}", kinds.join(" or "), kind_of(value)),
            );
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return fail(
            at,
            format!("must be one of {}", Value::Array(allowed.clone())),
        );
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return fail(at, format!("must be {constant}"));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array)
            && !options.is_empty()
            && !options
                .iter()
                .any(|option| walk(option, value, &mut at.clone(), depth + 1).is_ok())
        {
            return fail(
                at,
                format!("matches none of the {} allowed shapes", options.len()),
            );
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for part in all {
            walk(part, value, at, depth + 1)?;
        }
    }
    match value {
        Value::Object(object) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(name) {
                        return fail(at, format!("`{name}` is required"));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (name, item) in object {
                let len = at.len();
                at.push('/');
                at.push_str(&name.replace('~', "~0").replace('/', "~1"));
                let checked = match properties.and_then(|properties| properties.get(name)) {
                    Some(property) => walk(property, item, at, depth + 1),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => {
                            at.truncate(len);
                            return fail(at, format!("unknown property `{name}`"));
                        }
                        Some(extra) => walk(extra, item, at, depth + 1),
                        None => Ok(()),
                    },
                };
                checked?;
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            bound(
                schema,
                "minItems",
                "maxItems",
                items.len() as f64,
                "items",
                at,
            )?;
            if let Some(each) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    let len = at.len();
                    at.push_str(&format!("/{index}"));
                    walk(each, item, at, depth + 1)?;
                    at.truncate(len);
                }
            }
        }
        Value::String(text) => {
            bound(
                schema,
                "minLength",
                "maxLength",
                text.chars().count() as f64,
                "characters",
                at,
            )?;
        }
        Value::Number(number) => {
            if let Some(number) = number.as_f64() {
                bound(schema, "minimum", "maximum", number, "", at)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn bound(
    schema: &serde_json::Map<String, Value>,
    low: &str,
    high: &str,
    measured: f64,
    unit: &str,
    at: &str,
) -> Result<(), (String, String)> {
    let words = |limit: &Value, side: &str| {
        if unit.is_empty() {
            format!("must be {side} {limit}")
        } else {
            format!("must have {side} {limit} {unit}")
        }
    };
    if let Some(limit) = schema.get(low)
        && limit.as_f64().is_some_and(|limit| measured < limit)
    {
        return Err((pointer(at), words(limit, "at least")));
    }
    if let Some(limit) = schema.get(high)
        && limit.as_f64().is_some_and(|limit| measured > limit)
    {
        return Err((pointer(at), words(limit, "at most")));
    }
    Ok(())
}

fn pointer(at: &str) -> String {
    if at.is_empty() {
        "/".to_owned()
    } else {
        at.to_owned()
    }
}

fn is_a(value: &Value, kind: &str) -> bool {
    match kind {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        _ => true,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check;

    #[test]
    fn the_first_break_is_named_by_its_path() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "mode": {"enum": ["a", "b"]}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert_eq!(
            check(&schema, &json!({"path": "x", "lines": [1, 2]})),
            Ok(())
        );
        let broken = [
            (json!({}), "/", "`path` is required"),
            (json!({"path": 3}), "/path", "expected string, got number"),
            (
                json!({"path": ""}),
                "/path",
                "must have at least 1 characters",
            ),
            (
                json!({"path": "x", "lines": [1, 0]}),
                "/lines/1",
                "must be at least 1",
            ),
            (
                json!({"path": "x", "lines": [1.5]}),
                "/lines/0",
                "expected integer, got number",
            ),
            (
                json!({"path": "x", "mode": "c"}),
                "/mode",
                "must be one of [\"a\",\"b\"]",
            ),
            (
                json!({"path": "x", "extra/~": 1}),
                "/",
                "unknown property `extra/~`",
            ),
            (json!([]), "/", "expected object, got array"),
        ];
        for (value, at, message) in broken {
            assert_eq!(
                check(&schema, &value),
                Err((at.to_owned(), message.to_owned())),
                "{value}"
            );
        }
    }
}
