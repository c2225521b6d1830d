//! `airlock grants [--json]` and `airlock grants revoke ID|--all`: the
//! "always allow" grants in force, and taking them back (each revocation is
//! audited as `grant_revoked`).

use std::fmt::Write as _;

use airlock_broker::{Broker, GrantRow, grant_view};

use crate::now_ms;
use airlock_core::display::safe_line;
use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::approvals::terminal_user;
use crate::{Failure, print, print_json};

#[derive(Debug, Args)]
pub(crate) struct GrantsArgs {
    #[command(subcommand)]
    command: Option<GrantsCommand>,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum GrantsCommand {
    /// Revoke one grant (by its id or a unique prefix of it), or all of them.
    Revoke {
        #[arg(
            value_name = "ID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        id: Option<String>,
        /// Revoke every grant in force.
        #[arg(long)]
        all: bool,
        /// JSON instead of a line.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(broker: &Broker, args: &GrantsArgs) -> Result<u8, Failure> {
    match &args.command {
        None => list(broker, args.json),
        Some(GrantsCommand::Revoke { id, all, json }) => {
            let by = terminal_user();
            let revoked = if *all {
                broker.revoke_all_grants(&by, airlock_core::Channel::Terminal)
            } else {
                let id = id.as_deref().unwrap_or_default();
                broker
                    .revoke_grant(id, &by, airlock_core::Channel::Terminal)
                    .map(|grant| vec![grant])
            }
            .map_err(|error| Failure {
                code: if matches!(
                    error.code(),
                    airlock_core::ErrorCode::NotFound | airlock_core::ErrorCode::Ambiguous
                ) {
                    2
                } else {
                    1
                },
                error: anyhow!(crate::approvals::error_line(&error)),
            })?;
            if *json {
                let list: Vec<Value> = revoked.iter().map(grant_view).collect();
                let text = serde_json::to_string_pretty(&serde_json::json!({"revoked": list}))
                    .map_err(Failure::internal)?;
                print_json(&text);
            } else if revoked.is_empty() {
                print("no grants in force");
            } else {
                let ids: Vec<String> = revoked
                    .iter()
                    .map(|grant| safe_line(&grant.id).into_owned())
                    .collect();
                print(&format!("revoked {}", ids.join(", ")));
            }
            Ok(0)
        }
    }
}

fn list(broker: &Broker, json: bool) -> Result<u8, Failure> {
    let grants = broker.grants().map_err(Failure::internal)?;
    if json {
        let list: Vec<Value> = grants.iter().map(grant_view).collect();
        let text = serde_json::to_string_pretty(&list).map_err(Failure::internal)?;
        print_json(&text);
        return Ok(0);
    }
    if grants.is_empty() {
        print("no grants in force");
        return Ok(0);
    }
    let now = now_ms();
    let mut out = format!(
        "{:<42} {:<11} {:<24} {:<10} {:>9} {}\n",
        "ID", "TOOL", "PATH", "SCOPE", "EXPIRES", "USER"
    );
    for grant in &grants {
        let _ = writeln!(
            out,
            "{:<42} {:<11} {:<24} {:<10} {:>9} {}",
            safe_line(&grant.id),
            safe_line(&grant.tool),
            safe_line(grant.path_glob.as_deref().unwrap_or("*")),
            scope(grant),
            expires(grant, now),
            safe_line(grant.user.as_deref().unwrap_or("-")),
        );
    }
    print(out.trim_end());
    Ok(0)
}

fn scope(grant: &GrantRow) -> &'static str {
    if grant.session.is_some() {
        "session"
    } else {
        "persistent"
    }
}

/// Time left, as `7h59m`, `12m`, `40s`; `never` for a grant without an end.
fn expires(grant: &GrantRow, now: u64) -> String {
    let Some(at) = grant.expires_ms else {
        return "never".to_owned();
    };
    let seconds = at.saturating_sub(now).div_ceil(1000);
    match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m", seconds / 60),
        _ => format!("{}h{}m", seconds / 3600, seconds % 3600 / 60),
    }
}
