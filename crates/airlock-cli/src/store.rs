//! Which store a process keeps its state in (DESIGN §3 `store:`, §7.2):
//! with `store.url` unset, the SQLite file in the state dir (the broker
//! opens it); with `store.url: postgres://…`, one PostgreSQL database that
//! every instance with that URL shares. A process joins it once, as one
//! instance, and keeps it: a reload that names another store is refused.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_core::config::{Config, expand_env};
use airlock_store::{PgOptions, Store};
use anyhow::anyhow;
use clap::Subcommand;

use crate::workspace::Workspace;
use crate::{Failure, print};

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Copy a workspace's state (approvals, grants, undo snapshots, events,
    /// chat messages) and its audit chain from a SQLite state dir into an
    /// empty PostgreSQL database, in one transaction; the chain is verified
    /// before and after.
    Migrate {
        /// `sqlite:PATH`: the state dir (holding airlock.db and, by default,
        /// audit.jsonl) or the airlock.db file.
        #[arg(long, value_name = "sqlite:PATH")]
        from: String,
        /// `postgres://user@host/database` (`${VAR}` from the environment);
        /// default: the configuration's store.url.
        #[arg(long, value_name = "URL")]
        to: Option<String>,
        /// The audit log to copy (default: audit.jsonl beside airlock.db).
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
    },
}

pub(crate) fn run(workspace: &Workspace, command: &StoreCommand) -> Result<u8, Failure> {
    let StoreCommand::Migrate { from, to, audit } = command;
    let config = &workspace.loaded.config;
    let Some(path) = from.strip_prefix("sqlite:") else {
        return Err(Failure::usage(anyhow!(
            "--from {from:?}: give sqlite:PATH (a state dir or its airlock.db)"
        )));
    };
    let path = PathBuf::from(path);
    let database = if path.is_dir() {
        path.join("airlock.db")
    } else {
        path
    };
    let audit = audit.clone().unwrap_or_else(|| {
        database.parent().map_or_else(
            || PathBuf::from("audit.jsonl"),
            |dir| dir.join("audit.jsonl"),
        )
    });
    let url = to
        .clone()
        .or_else(|| config.store.url.clone())
        .ok_or_else(|| Failure::usage(anyhow!("give --to postgres://… (or set store.url)")))?;
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Failure::usage(anyhow!(
            "--to: give a postgres://user@host/database URL"
        )));
    }
    let mut target_config = config.clone();
    target_config.store.url = Some(url.clone());
    let target = join(&url, &target_config, &workspace.root)?;
    let key = config
        .audit
        .hmac_key_env
        .as_deref()
        .and_then(|name| std::env::var(name).ok())
        .filter(|key| !key.is_empty());
    let migrated = airlock_broker::migrate_store(
        &database,
        &audit,
        key.as_deref().map(str::as_bytes),
        &target,
    )
    .map_err(|error| match error.code() {
        airlock_core::ErrorCode::Conflict
        | airlock_core::ErrorCode::InvalidInput
        | airlock_core::ErrorCode::NotFound => Failure::usage(anyhow!("{error}")),
        _ => Failure::internal(anyhow!("{error}")),
    })?;
    let copied = &migrated.copied;
    print(&format!(
        "migrated {} approvals, {} grants, {} snapshot files, {} events, {} chat messages and {} audit records into {}; the chain verifies through seq {}",
        copied.approvals,
        copied.grants,
        copied.snapshot_files,
        copied.events,
        copied.chat_messages,
        copied.audit_records,
        airlock_pg::redacted(&url),
        migrated.head.as_ref().map_or(0, |head| head.seq),
    ));
    Ok(0)
}

/// The store this process chose at its first use: the URL (`None`:
/// SQLite) and, for PostgreSQL, the store.
type Chosen = (Option<String>, Option<Arc<Store>>);

static CHOSEN: Mutex<Option<Chosen>> = Mutex::new(None);

/// The shared store `config.store` names, joined once per process; `None`
/// when the state is in the state dir's SQLite file.
pub(crate) fn shared_store(
    config: &Config,
    root: &std::path::Path,
) -> Result<Option<Arc<Store>>, Failure> {
    let url = config.store.url.clone();
    let mut chosen = CHOSEN
        .lock()
        .map_err(|_| Failure::internal(anyhow!("the store choice is poisoned")))?;
    if let Some((first, store)) = chosen.as_ref() {
        if *first != url {
            return Err(Failure::usage(anyhow!(
                "store.url changed; restart airlock to use another store"
            )));
        }
        return Ok(store.clone());
    }
    let store = match &url {
        None => None,
        Some(url) => Some(join(url, config, root)?),
    };
    *chosen = Some((url, store.clone()));
    Ok(store)
}

/// Joins the PostgreSQL database at `url` (`${VAR}` from the environment),
/// trusting `tls.ca_file` (relative to the workspace root) besides the
/// platform's roots.
fn join(url: &str, config: &Config, root: &std::path::Path) -> Result<Arc<Store>, Failure> {
    let expanded = expand_env(url, |name| std::env::var(name).ok())
        .map_err(|error| Failure::usage(anyhow!("store.url: {error}")))?;
    let shown = airlock_pg::redacted(&expanded);
    let pool_size = usize::try_from(config.store.pool_size).unwrap_or(16);
    let ca_file = config.tls.ca_file.as_deref().map(|file| root.join(file));
    let driver = airlock_pg::Postgres::connect(&expanded, pool_size, ca_file.as_deref())
        .map_err(|error| Failure::usage(anyhow!("store.url: {error}")))?;
    let options = PgOptions {
        lease: Duration::from_secs(config.store.lease_seconds().unwrap_or(10)),
        host: host_name(),
    };
    let store = Store::postgres(driver, &options, crate::now_ms())
        .map_err(|error| Failure::internal(anyhow!("cannot use the store at {shown}: {error}")))?;
    Ok(Arc::new(store))
}

/// This machine's name, as the instances table shows it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}
