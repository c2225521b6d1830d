//! `airlock session open|list|show|close` (DESIGN §5.3): sessions from the
//! terminal. Opening is a `session_open` call through the whole pipeline
//! (policy, audit); the terminal's operator sees and closes any session.

use std::fmt::Write as _;

use airlock_broker::Broker;
use airlock_core::display::safe_line;
use airlock_core::{Principal, ToolCall};
use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::{Failure, now_ms, print, print_json};

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Open a session: `--args` holds session_open's arguments (roots,
    /// workdir, env, network, ttl, idle_ttl, labels, limits). Prints its id.
    Open(OpenArgs),
    /// The open sessions (every principal's), newest first.
    List(ListArgs),
    /// One session, open or ended.
    Show {
        /// The session id (ses-…).
        id: String,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Close a session: its pending approvals are cancelled.
    Close {
        /// The session id (ses-…).
        id: String,
        /// Why, for the audit log.
        #[arg(long, value_name = "R")]
        reason: Option<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct OpenArgs {
    /// session_open's arguments, a JSON object: inline, `@FILE` or `-`
    /// (standard input).
    #[arg(long, value_name = "JSON|@FILE|-", default_value = "{}")]
    args: String,
    /// The user the session is opened for (its calls must name the same).
    #[arg(long, value_name = "U")]
    user: Option<String>,
    /// The agent the session is opened for.
    #[arg(long, value_name = "A")]
    agent: Option<String>,
    /// The profile whose `sessions.auto` allowance applies.
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// Print the whole answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// The ended sessions too.
    #[arg(long)]
    include_ended: bool,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// The operator at the terminal: sees and closes every session.
fn operator() -> Principal {
    Principal {
        user: Some(crate::approvals::terminal_user()),
        admin: true,
        ..Principal::default()
    }
}

pub(crate) fn run(broker: &Broker, command: &SessionCommand) -> Result<u8, Failure> {
    match command {
        SessionCommand::Open(args) => open(broker, args),
        SessionCommand::List(args) => {
            let sessions = broker
                .sessions_of(&operator(), true, args.include_ended)
                .map_err(Failure::internal)?;
            if args.json {
                print_json(&Value::Array(sessions).to_string());
                return Ok(0);
            }
            if sessions.is_empty() {
                print("no open sessions");
                return Ok(0);
            }
            let mut out = String::new();
            for session in &sessions {
                let _ = writeln!(out, "{}", line(session));
            }
            print(out.trim_end());
            Ok(0)
        }
        SessionCommand::Show { id, json } => {
            let session = broker.session_for(&operator(), id).map_err(refused)?;
            if *json {
                print_json(&session.to_string());
            } else {
                print(&details(&session));
            }
            Ok(0)
        }
        SessionCommand::Close { id, reason } => {
            let session = broker
                .close_session(
                    &operator(),
                    id,
                    reason.as_deref().or(Some("closed at the terminal")),
                )
                .map_err(refused)?;
            print(&format!("closed {}", text(&session, "session_id")));
            Ok(0)
        }
    }
}

/// A refusal by its code: a session not found or ended is exit 4 (like a
/// denial), anything else 1.
fn refused(error: airlock_broker::BrokerError) -> Failure {
    use airlock_core::ErrorCode;
    let code = match error.code() {
        ErrorCode::SessionNotFound | ErrorCode::SessionClosed | ErrorCode::SessionExpired => 4,
        _ => 1,
    };
    Failure::with_code(code, error.to_string())
}

fn open(broker: &Broker, args: &OpenArgs) -> Result<u8, Failure> {
    let given = if args.args == "-" {
        let mut given = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut given)
            .map_err(|error| Failure::usage(anyhow!("--args -: {error}")))?;
        given
    } else if let Some(path) = args.args.strip_prefix('@') {
        std::fs::read_to_string(path)
            .map_err(|error| Failure::usage(anyhow!("--args @{path}: {error}")))?
    } else {
        args.args.clone()
    };
    let arguments: Value = serde_json::from_str(&given)
        .map_err(|error| Failure::usage(anyhow!("--args is not valid JSON: {error}")))?;
    if !arguments.is_object() {
        return Err(Failure::usage(anyhow!("--args must be a JSON object")));
    }
    if let Some(profile) = &args.profile
        && !broker.config().profiles.contains_key(profile)
    {
        return Err(Failure::usage(anyhow!("unknown profile {profile}")));
    }
    let mut call = ToolCall::new(
        "session_open",
        arguments,
        broker.policy().origin_of("session_open", None),
        now_ms(),
    );
    call.principal = Principal {
        user: args.user.clone(),
        agent: args.agent.clone(),
        ..Principal::default()
    };
    call.profile = args.profile.clone();
    let envelope = broker.submit(&call, &airlock_broker::Mode::Defer, &|_| {});
    broker.flush_audit();
    if args.json || envelope.status != airlock_core::envelope::Status::Allowed {
        return crate::approvals::print_envelope(&envelope);
    }
    let session = envelope.data.clone().unwrap_or(Value::Null);
    print(&text(&session, "session_id"));
    Ok(0)
}

fn text(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::String(text)) => safe_line(text).into_owned(),
        Some(Value::Null) | None => "-".to_owned(),
        Some(other) => safe_line(&other.to_string()).into_owned(),
    }
}

/// One line of `session list`.
fn line(session: &Value) -> String {
    format!(
        "{}  {}  expires {}  user {}  agent {}  roots {}",
        text(session, "session_id"),
        text(session, "status"),
        text(session, "expires_at"),
        text(session, "user"),
        text(session, "agent"),
        roots(session),
    )
}

fn roots(session: &Value) -> String {
    session
        .get("roots")
        .and_then(Value::as_array)
        .map(|roots| {
            roots
                .iter()
                .map(|root| {
                    let path = root.get("path").and_then(Value::as_str).unwrap_or("");
                    let mode = root.get("mode").and_then(Value::as_str).unwrap_or("");
                    format!(
                        "{}:{}",
                        safe_line(if path.is_empty() { "." } else { path }),
                        safe_line(mode)
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `session show`'s text.
fn details(session: &Value) -> String {
    let mut out = String::new();
    for key in [
        "session_id",
        "status",
        "user",
        "agent",
        "profile",
        "expires_at",
        "workdir",
        "end_reason",
        "authority_hash",
    ] {
        let _ = writeln!(out, "{key}: {}", text(session, key));
    }
    let _ = writeln!(out, "roots: {}", roots(session));
    let _ = writeln!(
        out,
        "network: {}",
        safe_line(
            &session
                .get("network")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string()
        )
    );
    let _ = writeln!(
        out,
        "limits: {}",
        safe_line(
            &session
                .get("limits")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string()
        )
    );
    out.trim_end().to_owned()
}
