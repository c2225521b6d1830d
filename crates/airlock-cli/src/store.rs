//! Which store a process keeps its state in (DESIGN §3 `store:`, §7.2):
//! with `store.url` unset, the SQLite file in the state dir (the broker
//! opens it); with `store.url: postgres://…`, one PostgreSQL database that
//! every instance with that URL shares. A process joins it once, as one
//! instance, and keeps it: a reload that names another store is refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_core::config::{Config, expand_env};
use airlock_store::{PgOptions, Store};
use anyhow::anyhow;

use crate::Failure;

/// The store this process chose at its first use: the URL (`None`:
/// SQLite) and, for PostgreSQL, the store.
type Chosen = (Option<String>, Option<Arc<Store>>);

static CHOSEN: Mutex<Option<Chosen>> = Mutex::new(None);

/// The shared store `config.store` names, joined once per process; `None`
/// when the state is in the state dir's SQLite file.
pub(crate) fn shared_store(config: &Config) -> Result<Option<Arc<Store>>, Failure> {
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
        Some(url) => Some(join(url, config)?),
    };
    *chosen = Some((url, store.clone()));
    Ok(store)
}

/// Joins the PostgreSQL database at `url` (`${VAR}` from the environment).
fn join(url: &str, config: &Config) -> Result<Arc<Store>, Failure> {
    let expanded = expand_env(url, |name| std::env::var(name).ok())
        .map_err(|error| Failure::usage(anyhow!("store.url: {error}")))?;
    let shown = airlock_pg::redacted(&expanded);
    let pool_size = usize::try_from(config.store.pool_size).unwrap_or(16);
    let driver = airlock_pg::Postgres::connect(&expanded, pool_size)
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
