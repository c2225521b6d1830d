//! A throwaway PostgreSQL server from Debian's `postgresql` package: its
//! own cluster in a temp dir (`initdb`), on a free loopback port
//! (`pg_ctl`), stopped and removed when dropped, and by a watchdog if the
//! test process dies first. As root (CI), the server runs as the `postgres`
//! user (`runuser`), since PostgreSQL refuses to run as root.
//!
//! ```no_run
//! use airlock_testkit::postgres::PgServer;
//! let server = PgServer::shared();
//! let url = server.new_database();
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The newest installed server's programs: `$AIRLOCK_PG_BIN`, or
/// `/usr/lib/postgresql/<newest>/bin`.
pub fn pg_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("AIRLOCK_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Whether a server can be made here: the programs, and `runuser` when
/// this process is root.
pub fn available() -> bool {
    pg_bin().is_some_and(|bin| bin.join("psql").exists())
        && (!is_root()
            || Path::new("/usr/sbin/runuser").exists()
            || Path::new("/sbin/runuser").exists())
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The uid and gid of the `postgres` user.
fn postgres_user() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres"))
                .then(|| (fields[2].parse().ok(), fields[3].parse().ok()))
                .and_then(|(uid, gid)| Some((uid?, gid?)))
        })
        .expect("a postgres user (apt-get install postgresql)")
}

/// Runs a server program, as `postgres` when this process is root.
fn server_command(bin: &Path, program: &str) -> Command {
    let path = bin.join(program);
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(path);
        command
    } else {
        Command::new(path)
    }
}

fn run(mut command: Command, what: &str) {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A directory the server's user owns, under a temp dir every user can
/// enter.
fn owned_dir(base: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dir = base.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    if is_root() {
        let (uid, gid) = postgres_user();
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown");
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    dir
}

/// A cluster made once per test process; each server copies it.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, data) = TEMPLATE.get_or_init(|| {
        let bin = pg_bin().expect("PostgreSQL (apt-get install postgresql)");
        let base = tempfile::tempdir().expect("tempdir");
        let run_dir = owned_dir(base.path(), "run");
        let data = run_dir.join("data");
        let mut initdb = server_command(&bin, "initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "airlock", "-A", "trust", "--no-sync", "-E", "UTF8"])
            .args(["--no-locale", "--no-instructions"]);
        run(initdb, "initdb");
        after_exit(None, base.path());
        (base, data)
    });
    data
}

/// A running PostgreSQL server.
pub struct PgServer {
    _base: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    /// Whether commits reach the disk (`fsync`); tests run without.
    durable: bool,
    /// Whether it speaks TLS (`ssl=on`, with the files `server.crt` and
    /// `server.key` in its data dir).
    tls: bool,
}

impl PgServer {
    /// One server for every test of this process (each test makes its own
    /// database with [`PgServer::new_database`]). It stops with the process.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start)
    }

    /// A server of its own (a test that restarts it). It does not sync to
    /// disk: a crash of the server process loses nothing, one of the
    /// machine would.
    pub fn start() -> PgServer {
        PgServer::start_with(false, None)
    }

    /// A server that syncs every commit to disk, as a deployment does: for
    /// benchmarks.
    pub fn start_durable() -> PgServer {
        PgServer::start_with(true, None)
    }

    /// A server that offers TLS with the certificate `ca` signed for
    /// `localhost` and `127.0.0.1`.
    pub fn start_tls(ca: &crate::tls::TestCa) -> PgServer {
        PgServer::start_with(false, Some(ca))
    }

    fn start_with(durable: bool, tls: Option<&crate::tls::TestCa>) -> PgServer {
        let bin = pg_bin().expect("PostgreSQL (apt-get install postgresql)");
        let base = tempfile::tempdir().expect("tempdir");
        let run_dir = owned_dir(base.path(), "run");
        let data = run_dir.join("data");
        let mut copy = Command::new("cp");
        copy.arg("-a").arg(template()).arg(&data);
        run(copy, "copying the template cluster");
        if let Some(ca) = tls {
            use std::os::unix::fs::PermissionsExt as _;
            let (cert, key) = ca.server_pem();
            for (name, pem) in [("server.crt", cert), ("server.key", key)] {
                let path = data.join(name);
                std::fs::write(&path, pem).expect("write a TLS file");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod");
                if is_root() {
                    let (uid, gid) = postgres_user();
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
                }
            }
        }
        let server = PgServer {
            log: run_dir.join("log"),
            _base: base,
            bin,
            data,
            port: 0,
            durable,
            tls: tls.is_some(),
        };
        server.boot()
    }

    /// `pg_ctl start` on this server's port.
    fn start_command(&self) -> Command {
        let mut start = server_command(&self.bin, "pg_ctl");
        start
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' \
                 -c fsync={} -c max_connections=300{}",
                self.port,
                if self.durable { "on" } else { "off" },
                if self.tls { " -c ssl=on" } else { "" }
            ))
            .arg("start")
            .stdin(Stdio::null());
        start
    }

    fn boot(mut self) -> PgServer {
        let mut last = String::new();
        for _ in 0..5 {
            self.port = free_port();
            let output = self.start_command().output().expect("pg_ctl start");
            if output.status.success() {
                self.watch();
                return self;
            }
            last = format!(
                "{}{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        panic!("PostgreSQL did not start:\n{last}");
    }

    /// Stops the server and removes its files if this test process ends
    /// without dropping it (a panic, a kill, or [`PgServer::shared`], which
    /// lives in a static).
    fn watch(&self) {
        after_exit(Some((&self.bin, &self.data)), self._base.path());
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://airlock@127.0.0.1:{}/{name}", self.port)
    }

    /// Runs `sql` with `psql` on database `database`; its output (unaligned,
    /// no headers).
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.url(database))
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        assert!(
            output.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A new, empty database; its URL.
    pub fn new_database(&self) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Stops the server at once, as a crash would (no shutdown checkpoint);
    /// committed transactions survive.
    pub fn kill(&self) {
        let mut stop = server_command(&self.bin, "pg_ctl");
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        run(stop, "pg_ctl stop");
    }

    /// Starts it again on the same port after [`PgServer::kill`].
    pub fn restart(&self) {
        run(self.start_command(), "pg_ctl start");
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = server_command(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A store on the PostgreSQL database at `url`, as an instance joins it
/// (its own pool, a 2 s lease).
pub fn open_store(url: &str) -> airlock_store::Store {
    let driver = airlock_pg::Postgres::connect(url, 4, None).expect("a PostgreSQL driver");
    let options = airlock_store::PgOptions {
        lease: std::time::Duration::from_secs(2),
        host: "test".into(),
    };
    airlock_store::Store::postgres(driver, &options, 0).expect("join the PostgreSQL store")
}

/// Once this test process has ended: stops the server on `server` (its
/// programs and data dir) if one is given, then removes `dir`. Statics are
/// never dropped, so this is what removes the template cluster and the
/// shared server's files (about 190 MB a process otherwise).
fn after_exit(server: Option<(&Path, &Path)>, dir: &Path) {
    // The paths go in as arguments, never into the script's text.
    let stop = match (server, is_root()) {
        (None, _) => "",
        (Some(_), true) => {
            "runuser -u postgres -- \"$2\" -D \"$3\" -m immediate -w stop >/dev/null 2>&1; "
        }
        (Some(_), false) => "\"$2\" -D \"$3\" -m immediate -w stop >/dev/null 2>&1; ",
    };
    let script =
        format!("while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; {stop}rm -rf -- \"$4\"");
    let (pg_ctl, data) = server.map_or((PathBuf::new(), PathBuf::new()), |(bin, data)| {
        (bin.join("pg_ctl"), data.to_owned())
    });
    use std::os::unix::process::CommandExt as _;
    let _ = Command::new("sh")
        // A group of its own: a kill of the test's process group (Ctrl-C,
        // a runner's timeout) leaves it to clean up.
        .process_group(0)
        .args(["-c", &script, "sh", &std::process::id().to_string()])
        .arg(pg_ctl)
        .arg(data)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}
