//! The store's contract (airlock-store's `tests/contract/`) on PostgreSQL:
//! a real server from Debian's `postgresql` package, one database per test,
//! each open another instance with its own pool, lease and listener.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use airlock_store::{PgOptions, Store};
use airlock_testkit::peers::{Peer, require};
use airlock_testkit::postgres::PgServer;

#[macro_use]
#[path = "../../airlock-store/tests/contract/mod.rs"]
mod contract;

/// A database of its own on the shared server.
struct Postgres {
    url: String,
}

impl contract::Db for Postgres {
    fn open(&self) -> Store {
        let driver = airlock_pg::Postgres::connect(&self.url, 4).unwrap();
        let options = PgOptions {
            lease: Duration::from_secs(2),
            host: "test".into(),
        };
        Store::postgres(driver, &options, 0).unwrap()
    }
}

fn postgres() -> Option<Postgres> {
    if !require("store_postgres", &[Peer::Postgres]) {
        return None;
    }
    Some(Postgres {
        url: PgServer::shared().new_database(),
    })
}

contract_tests!(postgres);
