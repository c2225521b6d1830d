//! `airlock token`: tokens for the HTTP API and the web UI, without
//! inventing and hashing one by hand. A configured token lives in
//! `airlock.yaml`'s `auth.tokens` as its SHA-256; the token itself is shown
//! once. The workspace's admin token (made by the first `serve --http`)
//! lives in the state dir and is replaced with `rotate`.

use std::fmt::Write as _;
use std::path::Path;

use airlock_core::config::{self, Config, Role, TokenConfig};
use anyhow::anyhow;
use clap::{Subcommand, ValueEnum};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::workspace::Workspace;
use crate::{Failure, print, print_json};

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Make a token; it is shown once and its SHA-256 is added to
    /// airlock.yaml's auth.tokens (a running server takes it at once).
    Create {
        /// Its name (letters, digits, `.`, `_`, `-`).
        #[arg(long, value_name = "N")]
        name: String,
        /// What it may do (repeat for several): agent submits calls,
        /// approver decides, admin does both and reads the audit log.
        #[arg(long = "role", value_name = "R", required = true, value_enum)]
        roles: Vec<RoleArg>,
        /// The person it belongs to (who decided, in the audit log; for an
        /// agent token, the calls' user).
        #[arg(long, value_name = "U")]
        user: Option<String>,
        /// Print the auth.tokens line instead of writing airlock.yaml.
        #[arg(long)]
        print: bool,
    },
    /// The tokens that sign in: configured ones and the admin token.
    List {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove a configured token from airlock.yaml (it stops working at
    /// once in a running server).
    Revoke {
        /// The token's name.
        name: String,
    },
    /// Replace the workspace's admin token: the new one is shown once and
    /// the old one stops working at once.
    Rotate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RoleArg {
    Agent,
    Approver,
    Admin,
}

impl RoleArg {
    fn role(self) -> Role {
        match self {
            RoleArg::Agent => Role::Agent,
            RoleArg::Approver => Role::Approver,
            RoleArg::Admin => Role::Admin,
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Agent => "agent",
        Role::Approver => "approver",
        Role::Admin => "admin",
    }
}

pub(crate) fn run(workspace: Workspace, command: &TokenCommand) -> Result<u8, Failure> {
    match command {
        TokenCommand::Create {
            name,
            roles,
            user,
            print: only_print,
        } => create(workspace, name, roles, user.as_deref(), *only_print),
        TokenCommand::List { json } => list(&workspace, *json),
        TokenCommand::Revoke { name } => revoke(workspace, name),
        TokenCommand::Rotate => rotate(workspace),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn create(
    workspace: Workspace,
    name: &str,
    roles: &[RoleArg],
    user: Option<&str>,
    only_print: bool,
) -> Result<u8, Failure> {
    if !valid_name(name) {
        return Err(Failure::usage(anyhow!(
            "--name {name:?}: use 1 to 64 letters, digits, `.`, `_` or `-`"
        )));
    }
    if name == airlock_http::ADMIN_TOKEN_NAME {
        return Err(Failure::usage(anyhow!(
            "{name} is the workspace's admin token; `airlock token rotate` replaces it"
        )));
    }
    // One edit at a time, on the file as it is now.
    let _lock = lock_tokens(&workspace)?;
    let before = read_config_text(&workspace)?;
    let current = load_text(&workspace, &before)?;
    let config = &current;
    if config.auth.tokens.iter().any(|token| token.name == name) {
        return Err(Failure::usage(anyhow!(
            "a token named {name} exists; revoke it first (airlock token revoke {name}) or pick another name"
        )));
    }
    if user.is_some_and(|user| user.is_empty() || user.chars().any(char::is_control)) {
        return Err(Failure::usage(anyhow!(
            "--user must be a non-empty name without control characters"
        )));
    }
    let mut roles: Vec<Role> = roles.iter().map(|role| role.role()).collect();
    roles.dedup();
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let entry = TokenConfig {
        name: name.to_owned(),
        sha256: format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes()))),
        roles,
        user: user.map(str::to_owned),
    };
    let line = entry_line(&entry);
    if only_print {
        print(&format!(
            "token {name} (shown once): {token}\nadd under auth.tokens in {}:\n    {line}",
            workspace.config_path.display()
        ));
        return Ok(0);
    }
    let after = with_entry(&before, &line).ok_or_else(|| cannot_edit(&workspace, &line))?;
    let mut expected = config.clone();
    expected.auth.tokens.push(entry.clone());
    check_edit(&workspace, &after, &expected).map_err(|_| cannot_edit(&workspace, &line))?;
    write_config(&workspace, &after)?;
    let first = config.auth.tokens.is_empty();
    let mut text = format!(
        "token {name} ({}{}), shown once:\n  {token}\nits SHA-256 is in {} (auth.tokens); sign in at http://HOST:PORT/#token={token} (the address `airlock serve --http` prints)",
        entry
            .roles
            .iter()
            .map(|role| role_name(*role))
            .collect::<Vec<_>>()
            .join(", "),
        user.map(|user| format!(", user {user}"))
            .unwrap_or_default(),
        workspace.config_path.display(),
    );
    if first {
        text.push_str(
            "\nnow that auth.tokens is set, every HTTP request needs a token (an agent over HTTP too: \
             airlock token create --name NAME --role agent); stdio agents are not affected",
        );
    }
    print(&text);
    note(workspace, "token_created", name);
    Ok(0)
}

fn list(workspace: &Workspace, json: bool) -> Result<u8, Failure> {
    let tokens = &workspace.loaded.config.auth.tokens;
    let admin_file = workspace.state_dir().join(airlock_http::ADMIN_TOKEN_FILE);
    let admin = airlock_http::read_admin_digest(&admin_file);
    if json {
        let mut list: Vec<serde_json::Value> = tokens
            .iter()
            .map(|token| {
                json!({
                    "name": token.name,
                    "roles": token.roles.iter().map(|role| role_name(*role)).collect::<Vec<_>>(),
                    "user": token.user,
                    "sha256": token.sha256,
                    "source": "auth.tokens",
                })
            })
            .collect();
        if let Some(digest) = admin {
            list.push(json!({
                "name": airlock_http::ADMIN_TOKEN_NAME,
                "roles": ["admin"],
                "user": null,
                "sha256": format!("sha256:{}", hex::encode(digest)),
                "source": "state dir",
            }));
        }
        let text = serde_json::to_string_pretty(&list).map_err(Failure::internal)?;
        print_json(&text);
        return Ok(0);
    }
    if tokens.is_empty() && admin.is_none() {
        print("no tokens (airlock token create makes one; serve --http makes the admin token)");
        return Ok(0);
    }
    let mut out = format!(
        "{:<20} {:<22} {:<16} {}\n",
        "NAME", "ROLES", "USER", "SHA-256"
    );
    for token in tokens {
        let hash = token
            .sha256
            .strip_prefix("sha256:")
            .unwrap_or(&token.sha256);
        let _ = writeln!(
            out,
            "{:<20} {:<22} {:<16} {}…",
            token.name,
            token
                .roles
                .iter()
                .map(|role| role_name(*role))
                .collect::<Vec<_>>()
                .join(","),
            airlock_core::display::safe_line(token.user.as_deref().unwrap_or("-")),
            &hash[..hash.len().min(12)]
        );
    }
    if let Some(digest) = admin {
        let _ = writeln!(
            out,
            "{:<20} {:<22} {:<16} {}… (the workspace's own; airlock token rotate)",
            airlock_http::ADMIN_TOKEN_NAME,
            "admin",
            "-",
            &hex::encode(digest)[..12]
        );
    }
    print(out.trim_end());
    Ok(0)
}

fn revoke(workspace: Workspace, name: &str) -> Result<u8, Failure> {
    if name == airlock_http::ADMIN_TOKEN_NAME {
        return Err(Failure::usage(anyhow!(
            "{name} is the workspace's admin token: `airlock token rotate` replaces it"
        )));
    }
    let _lock = lock_tokens(&workspace)?;
    let before = read_config_text(&workspace)?;
    let current = load_text(&workspace, &before)?;
    let config = &current;
    if !config.auth.tokens.iter().any(|token| token.name == name) {
        let names: Vec<&str> = config
            .auth
            .tokens
            .iter()
            .map(|token| token.name.as_str())
            .collect();
        let hint = airlock_core::suggest::nearest(name, names.iter().copied())
            .map(|near| format!("; did you mean {near}?"))
            .unwrap_or_default();
        return Err(Failure::usage(anyhow!("no token named {name}{hint}")));
    }
    let mut expected = config.clone();
    expected.auth.tokens.retain(|token| token.name != name);
    let after = without_entry(&before, |candidate| {
        check_edit(&workspace, candidate, &expected).is_ok()
    })
    .ok_or_else(|| {
        Failure::usage(anyhow!(
            "could not remove token {name} from {} by itself; delete its entry under auth.tokens",
            workspace.config_path.display()
        ))
    })?;
    write_config(&workspace, &after)?;
    print(&format!(
        "token {name} revoked: removed from {} (a running server refuses it at once)",
        workspace.config_path.display()
    ));
    note(workspace, "token_revoked", name);
    Ok(0)
}

fn rotate(workspace: Workspace) -> Result<u8, Failure> {
    let state_dir = workspace.state_dir();
    std::fs::create_dir_all(&state_dir).map_err(|error| {
        Failure::internal(anyhow!("cannot create {}: {error}", state_dir.display()))
    })?;
    let token = airlock_http::new_admin_token(&state_dir).map_err(|error| {
        Failure::internal(anyhow!("cannot write the admin token's hash: {error}"))
    })?;
    print(&format!(
        "new admin token (shown once; the old one stopped working):\n  {token}\nsign in at http://HOST:PORT/#token={token} (the address `airlock serve --http` prints)"
    ));
    note(
        workspace,
        "admin_token_rotated",
        airlock_http::ADMIN_TOKEN_NAME,
    );
    Ok(0)
}

/// Records a token change in the audit log (the configuration's own change
/// is recorded too, as `config_loaded`, when it is next loaded).
fn note(workspace: Workspace, event: &str, name: &str) {
    match workspace.broker() {
        Ok(broker) => {
            let record = airlock_broker::Record::new(event)
                .text("token", name)
                .text("user", &crate::approvals::terminal_user());
            if !broker.note(record) {
                eprintln!("airlock: {event} could not be recorded in the audit log");
            }
            broker.flush_audit();
        }
        Err(failure) => eprintln!("airlock: {event} not audited: {:#}", failure.error),
    }
}

/// One `auth.tokens` entry in flow style; strings JSON-quoted (valid YAML).
fn entry_line(entry: &TokenConfig) -> String {
    let quote = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let roles: Vec<&str> = entry.roles.iter().map(|role| role_name(*role)).collect();
    let mut line = format!(
        "- {{name: {}, sha256: {}, roles: [{}]",
        quote(&entry.name),
        quote(&entry.sha256),
        roles.join(", ")
    );
    if let Some(user) = &entry.user {
        let _ = write!(line, ", user: {}", quote(user));
    }
    line.push('}');
    line
}

/// Holds an exclusive lock on the state dir's `tokens.lock` while a token
/// edit reads and rewrites `airlock.yaml`: two edits never lose each other.
fn lock_tokens(workspace: &Workspace) -> Result<std::fs::File, Failure> {
    let state_dir = workspace.state_dir();
    std::fs::create_dir_all(&state_dir).map_err(|error| {
        Failure::internal(anyhow!("cannot create {}: {error}", state_dir.display()))
    })?;
    let path = state_dir.join("tokens.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| Failure::internal(anyhow!("cannot open {}: {error}", path.display())))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|error| Failure::internal(anyhow!("cannot lock {}: {error}", path.display())))?;
    Ok(file)
}

/// The configuration `text` holds (the built-in defaults when empty).
fn load_text(workspace: &Workspace, text: &str) -> Result<Config, Failure> {
    config::load(text, &workspace.config_path.display().to_string())
        .map(|loaded| loaded.config)
        .map_err(|error| Failure::usage(anyhow!("invalid configuration\n{error}")))
}

fn cannot_edit(workspace: &Workspace, line: &str) -> Failure {
    Failure::usage(anyhow!(
        "could not add the token to {} by itself (its auth.tokens is written in a form this does not edit); add this line under auth.tokens:\n    {line}\n(or run again with --print)",
        workspace.config_path.display()
    ))
}

fn read_config_text(workspace: &Workspace) -> Result<String, Failure> {
    if !workspace.config_exists {
        return Ok(String::new());
    }
    std::fs::read_to_string(&workspace.config_path).map_err(|error| {
        Failure::internal(anyhow!(
            "cannot read {}: {error}",
            workspace.config_path.display()
        ))
    })
}

/// The edited text is kept only if it loads to exactly `expected`.
fn check_edit(workspace: &Workspace, text: &str, expected: &Config) -> Result<(), ()> {
    let loaded =
        config::load(text, &workspace.config_path.display().to_string()).map_err(|_| ())?;
    if &loaded.config == expected {
        Ok(())
    } else {
        Err(())
    }
}

/// Written beside and renamed over, keeping the file's permissions.
fn write_config(workspace: &Workspace, text: &str) -> Result<(), Failure> {
    // A linked configuration is edited where it lives; CRLF stays CRLF.
    let path = &std::fs::canonicalize(&workspace.config_path)
        .unwrap_or_else(|_| workspace.config_path.clone());
    let crlf = std::fs::read(path).is_ok_and(|old| old.windows(2).any(|pair| pair == b"\r\n"));
    let text = if crlf {
        text.replace("\r\n", "\n").replace('\n', "\r\n")
    } else {
        text.to_owned()
    };
    let text = text.as_str();
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(|error| {
        Failure::internal(anyhow!("cannot write beside {}: {error}", path.display()))
    })?;
    use std::io::Write as _;
    temp.write_all(text.as_bytes())
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|error| Failure::internal(anyhow!("cannot write {}: {error}", path.display())))?;
    if let Ok(metadata) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(temp.path(), metadata.permissions());
    }
    temp.persist(path).map_err(|error| {
        Failure::internal(anyhow!("cannot replace {}: {error}", path.display()))
    })?;
    Ok(())
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// Where `auth.tokens` is in `lines`: the `tokens:` line's index, its
/// indentation, and the index after the last line of its value.
fn tokens_block(lines: &[&str]) -> Option<(usize, usize, usize)> {
    let auth = lines.iter().position(|line| is_key_line(line, "auth"))?;
    let end_of_auth = lines[auth + 1..]
        .iter()
        .position(|line| !is_blank_or_comment(line) && indent_of(line) == 0)
        .map_or(lines.len(), |at| auth + 1 + at);
    let tokens =
        (auth + 1..end_of_auth).find(|&at| lines[at].trim_start().starts_with("tokens:"))?;
    let indent = indent_of(lines[tokens]);
    let mut end = tokens + 1;
    for (at, line) in lines.iter().enumerate().take(end_of_auth).skip(tokens + 1) {
        if is_blank_or_comment(line) {
            continue;
        }
        let deeper = indent_of(line) > indent;
        let item_here = indent_of(line) == indent && line.trim_start().starts_with("- ");
        if !(deeper || item_here) {
            break;
        }
        end = at + 1;
    }
    Some((tokens, indent, end))
}

/// Whether `line` is the top-level key `key` with no value on the line (a
/// comment may follow).
fn is_key_line(line: &str, key: &str) -> bool {
    line.strip_prefix(key)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| {
            let rest = rest.trim();
            rest.is_empty() || rest.starts_with('#')
        })
}

/// `text` with `entry` (one flow-style line) added to `auth.tokens`, or
/// `None` where its form is not one this edits.
fn with_entry(text: &str, entry: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines.iter().map(|line| (*line).to_owned()).collect();
    match tokens_block(&lines) {
        None => {
            if let Some(auth) = lines.iter().position(|line| is_key_line(line, "auth")) {
                // An auth: block without tokens:.
                out.insert(auth + 1, format!("  tokens:\n    {entry}"));
            } else if lines.iter().any(|line| line.starts_with("auth:")) {
                // auth: in flow style: not edited here.
                return None;
            } else {
                out.push(format!("auth:\n  tokens:\n    {entry}"));
            }
        }
        Some((tokens, indent, end)) => {
            let head = lines[tokens].trim_start().strip_prefix("tokens:")?;
            let (value, comment) = match head.find('#') {
                Some(at) => (head[..at].trim(), head[at..].trim_end()),
                None => (head.trim(), ""),
            };
            let pad = " ".repeat(indent);
            match value {
                "[]" => {
                    let comment = if comment.is_empty() {
                        String::new()
                    } else {
                        format!(" {comment}")
                    };
                    out[tokens] = format!("{pad}tokens:{comment}");
                    out.insert(tokens + 1, format!("{pad}  {entry}"));
                }
                "" => {
                    // A block list: after its last line, at its items' indent.
                    let item_indent = lines[tokens + 1..end]
                        .iter()
                        .find(|line| line.trim_start().starts_with("- "))
                        .map_or(indent + 2, |line| indent_of(line));
                    out.insert(end, format!("{}{entry}", " ".repeat(item_indent)));
                }
                _ => return None,
            }
        }
    }
    let mut joined = out.join("\n");
    joined.push('\n');
    Some(joined)
}

/// `text` without the one `auth.tokens` item for which `keeps` holds once
/// it is gone (an empty list becomes `tokens: []`).
fn without_entry(text: &str, keeps: impl Fn(&str) -> bool) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (tokens, indent, end) = tokens_block(&lines)?;
    let starts: Vec<usize> = (tokens + 1..end)
        .filter(|&at| lines[at].trim_start().starts_with("- "))
        .collect();
    for (n, &start) in starts.iter().enumerate() {
        let stop = starts.get(n + 1).copied().unwrap_or(end);
        let mut out: Vec<String> = Vec::new();
        out.extend(lines[..start].iter().map(|line| (*line).to_owned()));
        out.extend(lines[stop..].iter().map(|line| (*line).to_owned()));
        if starts.len() == 1 {
            let head = lines[tokens].trim_start().strip_prefix("tokens:")?;
            let comment = head
                .find('#')
                .map(|at| format!(" {}", head[at..].trim_end()))
                .unwrap_or_default();
            out[tokens] = format!("{}tokens: []{comment}", " ".repeat(indent));
        }
        let mut candidate = out.join("\n");
        candidate.push('\n');
        if keeps(&candidate) {
            return Some(candidate);
        }
    }
    None
}
