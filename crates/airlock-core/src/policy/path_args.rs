//! Where a call's paths are: the path parameters of a built-in tool, and for
//! any other tool every string, anywhere in the arguments, that names a file
//! (DESIGN §13). An upstream server's arguments have no schema airlock
//! trusts: a path may hide under any name, nested in objects and arrays, as
//! a `file://` URI, with `..`, or through a symlink. The policy checks each
//! as it is written; the broker resolves each like the sandbox does and
//! checks the call again with the resolved paths in their places
//! ([`super::evaluate_resolved`]).

use serde_json::Value;

use crate::call::{ToolCall, ToolOrigin};
use crate::tools::FOREIGN_PATH_PARAMS;

/// One path argument of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArgument {
    /// Where it is, as a JSON pointer (`/options/file`, `/paths/2`).
    pub pointer: String,
    /// How messages name it (`options.file`, `paths[2]`).
    pub param: String,
    /// The path (a `file:` URI's decoded path).
    pub path: String,
}

/// The longest string taken for a path.
const MAX_PATH_CHARS: usize = 4096;

/// How deep the arguments are searched; deeper values are not looked at
/// (JSON-RPC input is limited in depth before it gets here).
const MAX_DEPTH: usize = 64;

/// The path arguments of `call`. A built-in tool's are its path parameters
/// (`apply_patch` names its paths in the patch text instead); any other
/// tool's are every string that looks like a path or a `file:` URI, and every
/// string under a path-like name ([`FOREIGN_PATH_PARAMS`]), at any depth.
pub fn path_arguments(call: &ToolCall) -> Vec<PathArgument> {
    let mut found = Vec::new();
    match &call.origin {
        ToolOrigin::Builtin(tool) => {
            for param in tool.path_params() {
                if let Some(path) = call.args.get(*param).and_then(Value::as_str) {
                    found.push(PathArgument {
                        pointer: format!("/{param}"),
                        param: (*param).to_owned(),
                        path: path.to_owned(),
                    });
                }
            }
        }
        ToolOrigin::Sampling { .. } => {}
        ToolOrigin::Upstream { .. } | ToolOrigin::Resource { .. } | ToolOrigin::Unknown => {
            collect(&call.args, "", "", false, 0, &mut found);
        }
    }
    found
}

fn collect(
    value: &Value,
    pointer: &str,
    param: &str,
    named_path: bool,
    depth: usize,
    found: &mut Vec<PathArgument>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::String(text) => {
            let path = if named_path {
                Some(file_uri_path(text).unwrap_or_else(|| text.clone()))
            } else {
                looks_like_path(text)
            };
            if let Some(path) = path {
                found.push(PathArgument {
                    pointer: pointer.to_owned(),
                    param: if param.is_empty() {
                        "arguments".to_owned()
                    } else {
                        param.to_owned()
                    },
                    path,
                });
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                collect(
                    item,
                    &format!("{pointer}/{index}"),
                    &format!("{param}[{index}]"),
                    named_path,
                    depth + 1,
                    found,
                );
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                let name = if param.is_empty() {
                    key.clone()
                } else {
                    format!("{param}.{key}")
                };
                let named = FOREIGN_PATH_PARAMS
                    .iter()
                    .any(|known| known.eq_ignore_ascii_case(key));
                collect(
                    item,
                    &format!("{pointer}/{escaped}"),
                    &name,
                    named,
                    depth + 1,
                    found,
                );
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The path a string names, if it looks like one: a `file:` URI (its decoded
/// path), an absolute path, a home-relative one (`~/…`), one that starts with
/// a dot (`./x`, `../x`, `.env`), or a relative path with a slash and no
/// whitespace (`src/main.rs`). Prose, bare words and URLs of other schemes are
/// not paths.
pub fn looks_like_path(text: &str) -> Option<String> {
    if text.is_empty() || text.chars().count() > MAX_PATH_CHARS {
        return None;
    }
    if let Some(path) = file_uri_path(text) {
        return Some(path);
    }
    if text.chars().any(|c| c.is_control()) {
        return None;
    }
    let spaced = text.chars().any(char::is_whitespace);
    let scheme = text
        .split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && !scheme.contains('/'));
    let path_like = text.starts_with('/')
        || (!spaced && (text.starts_with('~') || text.starts_with('.')))
        || (!spaced && !scheme && text.contains('/'));
    path_like.then(|| text.to_owned())
}

/// The path of a `file:` URI (`file:///a/b`, `file://localhost/a/b`,
/// `file:/a/b`), percent-decoded; `None` for anything else. Invalid escapes
/// and bytes that are not UTF-8 stay as written.
pub fn file_uri_path(text: &str) -> Option<String> {
    let scheme = text.get(..5)?;
    if !scheme.eq_ignore_ascii_case("file:") {
        return None;
    }
    let rest = &text[5..];
    let path = match rest.strip_prefix("//") {
        // `file://host/path`: the host is dropped (it can only be this one).
        Some(after) => match after.find('/') {
            Some(slash) => &after[slash..],
            None => "/",
        },
        None => rest,
    };
    // A query or fragment is no part of the path.
    let path = path.split(['?', '#']).next().unwrap_or(path);
    Some(percent_decode(path))
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// `args` with each `(pointer, replacement)` put in place (pointers that do
/// not lead to a string are left alone).
pub fn replaced(args: &Value, replacements: &[(String, String)]) -> Value {
    let mut args = args.clone();
    for (pointer, replacement) in replacements {
        if let Some(slot) = args.pointer_mut(pointer)
            && slot.is_string()
        {
            *slot = Value::String(replacement.clone());
        }
    }
    args
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_looks_like_a_path() {
        for (text, path) in [
            ("/etc/passwd", Some("/etc/passwd")),
            ("/home/my files/x.txt", Some("/home/my files/x.txt")),
            ("src/main.rs", Some("src/main.rs")),
            ("../up", Some("../up")),
            (".env", Some(".env")),
            ("~/.ssh/id_rsa", Some("~/.ssh/id_rsa")),
            ("file:///tmp/a%20b", Some("/tmp/a b")),
            ("FILE://localhost/etc/x", Some("/etc/x")),
            ("file:/x?y#z", Some("/x")),
            ("file://host", Some("/")),
            ("hello world", None),
            ("a/b c", None),
            ("https://example.com/a", None),
            ("plain", None),
            ("", None),
            ("x\ny/z", None),
        ] {
            assert_eq!(looks_like_path(text).as_deref(), path, "{text:?}");
        }
    }

    #[test]
    fn every_path_anywhere_in_foreign_arguments() {
        let mut call = ToolCall::new(
            "fs__write",
            json!({
                "content": "some text with a/b in it",
                "options": {"target": "plain-name", "deep": [{"uri": "file:///etc/x"}]},
                "paths": ["a", "b/c"],
                "a/b": ".git/config",
            }),
            ToolOrigin::Unknown,
            0,
        );
        let found: Vec<(String, String, String)> = path_arguments(&call)
            .into_iter()
            .map(|arg| (arg.pointer, arg.param, arg.path))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "/options/target".to_owned(),
                    "options.target".to_owned(),
                    "plain-name".to_owned()
                ),
                (
                    "/options/deep/0/uri".to_owned(),
                    "options.deep[0].uri".to_owned(),
                    "/etc/x".to_owned()
                ),
                ("/paths/0".to_owned(), "paths[0]".to_owned(), "a".to_owned()),
                (
                    "/paths/1".to_owned(),
                    "paths[1]".to_owned(),
                    "b/c".to_owned()
                ),
                (
                    "/a~1b".to_owned(),
                    "a/b".to_owned(),
                    ".git/config".to_owned()
                ),
            ]
        );
        let replaced = replaced(
            &call.args,
            &[("/options/deep/0/uri".to_owned(), "/x".to_owned())],
        );
        assert_eq!(replaced["options"]["deep"][0]["uri"], "/x");
        call.args = replaced;
    }
}
