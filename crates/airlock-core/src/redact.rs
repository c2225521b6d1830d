//! Redaction of tool parameters for the audit log and for display (DESIGN §8).
//!
//! [`redact_params`] walks a parameter value (objects and arrays, recursively) and
//! returns a copy that is safe to keep forever:
//!
//! - the value of a member whose name looks like a secret ([`is_secret_name`]) becomes
//!   `"[redacted]"`, whatever its type;
//! - a string longer than [`MAX_STRING_CHARS`] characters becomes
//!   `{"truncated": "<its first 200 characters>", "sha256": "sha256:<hash of the whole
//!   string>", "len": <its length in bytes>}`, so the full content can still be matched
//!   against a file or a proposal by its hash.
//!
//! Numbers stay numbers: [`crate::canonical`] hashes every number exactly, integers
//! beyond 2^53 included.
//!
//! ```
//! use airlock_core::redact::redact_params;
//! use serde_json::json;
//!
//! let redacted = redact_params(&json!({"url": "https://x", "headers": {"Authorization": "Bearer abc"}}));
//! assert_eq!(redacted, json!({"url": "https://x", "headers": {"Authorization": "[redacted]"}}));
//! ```

use serde_json::{Map, Value};

use crate::canonical;

/// What a secret value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Strings longer than this many characters (Unicode scalar values) are cut.
pub const MAX_STRING_CHARS: usize = 200;

/// Name fragments that mark a secret wherever they appear in a member name, compared
/// case-insensitively.
const SECRET_FRAGMENTS: [&str; 11] = [
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "authorization",
    "cookie",
    "credential",
    "private",
    "apikey",
    "api_key",
];

/// A redacted copy of `params` (see the module documentation for the rules).
pub fn redact_params(params: &Value) -> Value {
    match params {
        Value::Object(map) => {
            let mut redacted = Map::with_capacity(map.len());
            for (name, item) in map {
                let item = if is_secret_name(name) {
                    Value::String(REDACTED.to_owned())
                } else {
                    redact_params(item)
                };
                redacted.insert(name.clone(), item);
            }
            Value::Object(redacted)
        }
        Value::Array(items) => Value::Array(items.iter().map(redact_params).collect()),
        Value::String(text) => redact_string(text),
        Value::Number(_) | Value::Null | Value::Bool(_) => params.clone(),
    }
}

/// Whether a member named `name` holds a secret: its name contains one of token,
/// password, passwd, passphrase, secret, authorization, cookie, credential, private,
/// apikey or api_key (in any case), or one of its words is `key`.
///
/// Words are split at non-alphanumeric characters and at lower-to-upper case changes,
/// so `key`, `api-key`, `SSH_KEY`, `accessKey` and `key_id` are secrets while
/// `keyboard` and `monkey` are not.
pub fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if SECRET_FRAGMENTS
        .iter()
        .any(|fragment| lower.contains(fragment))
    {
        return true;
    }
    words(name).any(|word| word.eq_ignore_ascii_case("key"))
}

/// The words of a member name: runs of alphanumeric characters, also split where a
/// lowercase letter or digit is followed by an uppercase letter (camelCase).
fn words(name: &str) -> impl Iterator<Item = &str> {
    let mut cuts = Vec::new();
    let mut previous: Option<char> = None;
    for (index, character) in name.char_indices() {
        let boundary = match previous {
            Some(before) => {
                !character.is_alphanumeric()
                    || !before.is_alphanumeric()
                    || (character.is_uppercase() && (before.is_lowercase() || before.is_numeric()))
            }
            None => false,
        };
        if boundary {
            cuts.push(index);
        }
        previous = Some(character);
    }
    cuts.push(name.len());
    let mut start = 0;
    cuts.into_iter().filter_map(move |end| {
        let word = name[start..end].trim_matches(|c: char| !c.is_alphanumeric());
        start = end;
        (!word.is_empty()).then_some(word)
    })
}

fn redact_string(text: &str) -> Value {
    match text.char_indices().nth(MAX_STRING_CHARS) {
        None => Value::String(text.to_owned()),
        Some((cut, _)) => {
            let mut note = Map::with_capacity(3);
            note.insert(
                "truncated".to_owned(),
                Value::String(text[..cut].to_owned()),
            );
            note.insert(
                "sha256".to_owned(),
                Value::String(canonical::sha256_hex(text.as_bytes())),
            );
            note.insert("len".to_owned(), Value::from(text.len()));
            Value::Object(note)
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn secrets_are_redacted_by_member_name_at_any_depth() {
        let params = json!({
            "path": "src/main.rs",
            "api_key": "k1",
            "apiKey": "k2",
            "X-Api-Key": "k3",
            "key": 7,
            "accessKey": "k4",
            "keyboard": "qwerty",
            "monkey": "banana",
            "GITHUB_TOKEN": "ghp_x",
            "headers": {"Authorization": "Bearer abc", "Cookie": "a=b", "accept": "*/*"},
            "users": [{"name": "ann", "Password": {"nested": "x"}}, {"passwd": null}],
            "db": {"credentials": ["u", "p"], "private_key_pem": "-----BEGIN"},
            "client_secret": "s",
            "passphrase": "p",
        });
        assert_eq!(
            redact_params(&params),
            json!({
                "path": "src/main.rs",
                "api_key": "[redacted]",
                "apiKey": "[redacted]",
                "X-Api-Key": "[redacted]",
                "key": "[redacted]",
                "accessKey": "[redacted]",
                "keyboard": "qwerty",
                "monkey": "banana",
                "GITHUB_TOKEN": "[redacted]",
                "headers": {"Authorization": "[redacted]", "Cookie": "[redacted]", "accept": "*/*"},
                "users": [{"name": "ann", "Password": "[redacted]"}, {"passwd": "[redacted]"}],
                "db": {"credentials": "[redacted]", "private_key_pem": "[redacted]"},
                "client_secret": "[redacted]",
                "passphrase": "[redacted]",
            })
        );
    }

    #[test]
    fn secret_names_split_into_words() {
        for name in [
            "key",
            "KEY",
            "ssh_key",
            "key_id",
            "signing.key",
            "publicKey",
            "aws2Key",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "keyboard", "monkey", "hotkeys", "path", "content", "Keynote",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn long_strings_are_cut_with_the_hash_and_length_of_the_whole() {
        let long = "é".repeat(250);
        let redacted = redact_params(&json!({"content": long, "list": ["short", "x".repeat(201)]}));
        assert_eq!(
            redacted,
            json!({
                "content": {
                    "truncated": "é".repeat(200),
                    "sha256": canonical::sha256_hex(long.as_bytes()),
                    "len": 500,
                },
                "list": ["short", {
                    "truncated": "x".repeat(200),
                    "sha256": canonical::sha256_hex("x".repeat(201).as_bytes()),
                    "len": 201,
                }],
            })
        );
    }

    #[test]
    fn a_string_of_exactly_the_limit_is_kept() {
        let text = "y".repeat(MAX_STRING_CHARS);
        assert_eq!(redact_params(&json!(text)), json!(text));
    }

    #[test]
    fn numbers_stay_numbers_however_large() {
        let text = r#"{"id":9007199254740993,"n":3,"f":0.5,"b":true,"z":null}"#;
        let params: Value = serde_json::from_str(text).unwrap();
        let redacted = redact_params(&params);
        assert_eq!(redacted, params);
        // And the audit chain hashes the large one exactly.
        assert_eq!(
            canonical::to_canonical_string(&redacted),
            r#"{"b":true,"f":0.5,"id":9007199254740993,"n":3,"z":null}"#
        );
    }
}
