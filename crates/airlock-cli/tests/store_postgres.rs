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
        let driver = airlock_pg::Postgres::connect(&self.url, 4, None).unwrap();
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

/// TLS to the database goes through airlock's one outbound client: the
/// server's certificate is checked (against `tls.ca_file` here), and a
/// server airlock cannot check is refused, never used in the clear.
#[test]
fn tls_to_the_database_checks_the_server_certificate() {
    if !require("store_postgres", &[Peer::Postgres]) {
        return;
    }
    let ca = airlock_testkit::tls::TestCa::new();
    let server = PgServer::start_tls(&ca);
    let url = server.new_database();
    let name = url.rsplit('/').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    ca.write_pem(&ca_file);
    let options = PgOptions {
        lease: Duration::from_secs(2),
        host: "test".into(),
    };
    for mode in ["require", "verify-full", "prefer"] {
        let driver =
            airlock_pg::Postgres::connect(&format!("{url}?sslmode={mode}"), 2, Some(&ca_file))
                .unwrap();
        let store = Store::postgres(driver, &options, 0).unwrap();
        store.set_kv("tls", mode).unwrap();
        let encrypted: u32 = server
            .psql(
                &name,
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = 'airlock' AND s.ssl",
            )
            .parse()
            .unwrap();
        assert!(encrypted >= 1, "{mode}: no encrypted connection");
        let plain: u32 = server
            .psql(
                &name,
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = 'airlock' AND NOT s.ssl",
            )
            .parse()
            .unwrap();
        assert_eq!(plain, 0, "{mode}: a connection in the clear");
    }
    // A certificate airlock cannot check: no trusted CA, or another one.
    let other = airlock_testkit::tls::TestCa::new();
    let other_file = dir.path().join("other.pem");
    other.write_pem(&other_file);
    for (mode, trusted) in [
        ("require", None),
        ("prefer", None),
        ("require", Some(other_file.as_path())),
    ] {
        let driver =
            airlock_pg::Postgres::connect(&format!("{url}?sslmode={mode}"), 2, trusted).unwrap();
        let error = Store::postgres(driver, &options, 0).expect_err("joined an unchecked server");
        assert!(
            error.to_string().contains("certificate") || error.to_string().contains("Issuer"),
            "{mode}: {error}"
        );
    }
}

/// Instances starting together on a new database migrate it once: the
/// others wait for the migration lock and find the schema made.
#[test]
fn instances_starting_together_migrate_a_new_database_once() {
    let Some(db) = postgres() else {
        return;
    };
    let barrier = std::sync::Barrier::new(6);
    let stores: Vec<Store> = std::thread::scope(|scope| {
        let opening: Vec<_> = (0..6)
            .map(|_| {
                let (db, barrier) = (&db, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    contract::Db::open(db)
                })
            })
            .collect();
        opening
            .into_iter()
            .map(|open| open.join().unwrap())
            .collect()
    });
    let versions: Vec<usize> = stores.iter().map(|s| s.schema_version().unwrap()).collect();
    assert!(
        versions.iter().all(|v| *v == versions[0] && *v >= 3),
        "{versions:?}"
    );
    let holders: std::collections::BTreeSet<u32> = stores.iter().map(Store::me).collect();
    assert_eq!(holders.len(), 6, "one instance each");
    let name = db.url.rsplit('/').next().unwrap();
    assert_eq!(
        PgServer::shared().psql(name, "SELECT count(*) FROM airlock.meta"),
        "1"
    );
}
