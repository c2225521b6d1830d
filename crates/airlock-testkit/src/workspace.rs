//! A temporary workspace, the `airlock` binary run in it, and its event feed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_store::{EventKind, FeedEvent, Store};
use serde_json::{Value, json};

/// How long a test waits for something that should happen at once before it
/// fails (never how long it waits when all is well).
const PATIENCE: Duration = Duration::from_secs(30);

/// What one run of `airlock` did.
#[derive(Debug, Clone)]
pub struct Run {
    pub code: i32,
    /// Standard output as JSON (`Null` when it is not JSON).
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn of(output: &Output) -> Run {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        Run {
            code: output.status.code().unwrap_or(-1),
            json: serde_json::from_str(&stdout).unwrap_or(Value::Null),
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// A temporary workspace. Every process started in it runs as user
/// `tester` (`AIRLOCK_USER`) with no audit key, no standard input, and the
/// workspace's own clock.
pub struct Workspace {
    dir: tempfile::TempDir,
    /// Holds the clock file (outside the workspace, where no tool reaches).
    clock: tempfile::TempDir,
    user: String,
    /// Set in every process run in the workspace (a bot's token).
    env: Vec<(String, String)>,
}

impl Workspace {
    /// A workspace whose `airlock.yaml` is `config` (an empty file is the
    /// defaults), with an empty `src/`.
    pub fn new(config: &str) -> Workspace {
        let ws = Workspace::bare();
        ws.write("airlock.yaml", config);
        std::fs::create_dir_all(ws.path("src")).expect("create src/");
        ws
    }

    /// A workspace holding only its `airlock.yaml`, `config`.
    pub fn with_config(config: &str) -> Workspace {
        let ws = Workspace::bare();
        ws.write("airlock.yaml", config);
        ws
    }

    /// A workspace on the built-in defaults: no `airlock.yaml`, an empty
    /// state dir `.airlock/` (what makes the directory a workspace).
    pub fn empty() -> Workspace {
        let ws = Workspace::bare();
        std::fs::create_dir(ws.path(".airlock")).expect("create .airlock/");
        ws
    }

    /// A directory with nothing in it: not a workspace until `airlock init`.
    pub fn bare() -> Workspace {
        Workspace {
            dir: tempfile::tempdir().expect("a temporary directory"),
            clock: tempfile::tempdir().expect("a temporary directory"),
            user: "tester".to_owned(),
            env: Vec::new(),
        }
    }

    /// A workspace holding a copy of the tree at `from` (files and
    /// directories; nothing else).
    pub fn copy_of(from: &Path) -> Workspace {
        let ws = Workspace::bare();
        copy_tree(from, ws.root());
        ws
    }

    /// The same workspace with `name=value` in every process's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Workspace {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same workspace with processes run as `user`.
    pub fn as_user(mut self, user: &str) -> Workspace {
        self.user = user.to_owned();
        self
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes `rel`, creating its parent directories.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create the parent directory");
        }
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// `rel` as text, `None` when it cannot be read.
    pub fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    pub fn read_bytes(&self, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(rel)).ok()
    }

    /// The clock file every process of this workspace reads.
    pub fn clock_file(&self) -> PathBuf {
        self.clock.path().join("offset")
    }

    /// Moves the clock of every process of this workspace `ms` forward.
    pub fn advance(&self, ms: u64) {
        advance_clock(&self.clock_file(), ms);
    }

    /// `airlock ARGS` in this workspace, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(&crate::bin(), args)
    }

    /// `program ARGS` in this workspace with airlock's environment, not
    /// started (a client that starts airlock itself).
    pub fn command_of(&self, program: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("AIRLOCK_USER", &self.user)
            .env("AIRLOCK_TEST_CLOCK", self.clock_file())
            .env_remove("AIRLOCK_AUDIT_KEY")
            .env_remove("AIRLOCK_WORKSPACE")
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null());
        command
    }

    /// Runs `airlock ARGS` to the end.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::of(&self.command(args).output().expect("run airlock"))
    }

    /// [`Workspace::run`] with the workspace's path in both outputs
    /// replaced by `$WS`, for comparing whole outputs.
    pub fn run_shown(&self, args: &[&str]) -> Run {
        let mut run = self.run(args);
        let root = std::fs::canonicalize(self.root()).unwrap_or_else(|_| self.root().to_owned());
        let root = root.to_string_lossy();
        run.stdout = run.stdout.replace(root.as_ref(), "$WS");
        run.stderr = run.stderr.replace(root.as_ref(), "$WS");
        run
    }

    /// `airlock ARGS` run from `dir` (any directory, inside the workspace or
    /// not), with the workspace's path in the output replaced by `$WS`.
    pub fn run_from(&self, dir: &Path, args: &[&str]) -> Run {
        let output = self
            .command(args)
            .current_dir(dir)
            .output()
            .expect("run airlock");
        let mut run = Run::of(&output);
        let root = std::fs::canonicalize(self.root()).unwrap_or_else(|_| self.root().to_owned());
        let root = root.to_string_lossy();
        run.stdout = run.stdout.replace(root.as_ref(), "$WS");
        run.stderr = run.stderr.replace(root.as_ref(), "$WS");
        run
    }

    /// Starts `airlock ARGS` with its standard output and error piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start airlock")
    }

    /// `airlock call TOOL --args ARGS EXTRA…`.
    pub fn call(&self, tool: &str, args: &Value, extra: &[&str]) -> Run {
        let args = args.to_string();
        let mut all = vec!["call", tool, "--args", args.as_str()];
        all.extend_from_slice(extra);
        self.run(&all)
    }

    /// `call write_file` with `--defer` in session `s1`: the new approval's id.
    pub fn propose(&self, path: &str, content: &str) -> String {
        let run = self.call(
            "write_file",
            &json!({"path": path, "content": content}),
            &["--defer", "--session", "s1"],
        );
        assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
        assert_eq!(run.json["status"], "hitl_required", "{}", run.stdout);
        run.json["hitl"]["hitl_id"]
            .as_str()
            .expect("a hitl id")
            .to_owned()
    }

    /// Every record of the audit log, oldest first.
    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path(".airlock/audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The `event` of every audit record, oldest first.
    pub fn audit_events(&self) -> Vec<String> {
        self.audit()
            .iter()
            .map(|record| record["event"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    /// A reader of this workspace's event feed, from its first event.
    pub fn feed(&self) -> Feed {
        Feed::open(&self.path(".airlock/airlock.db"))
    }

    /// Waits, on the event feed, for an approval of this workspace to be
    /// pending (created by any process and not decided yet): the oldest
    /// such one's id.
    pub fn wait_for_pending(&self) -> String {
        self.feed().wait_for_pending(None)
    }

    /// [`Workspace::wait_for_pending`], failing with what `child` printed
    /// if it ends first (the call that should have made the approval).
    pub fn wait_for_pending_of(&self, child: &mut Child) -> String {
        self.feed().wait_for_pending(Some(child))
    }

    /// Runs `airlock ARGS`, which must finish within `seconds`: a hang is
    /// a failure, not a stuck test run.
    pub fn run_within(&self, args: &[&str], seconds: u64) -> Run {
        let mut child = self.spawn(args);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        while child.try_wait().expect("wait for airlock").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("airlock {args:?} hung for {seconds}s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Run::of(&child.wait_with_output().expect("airlock's output"))
    }
}

/// Copies the files and directories under `from` to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy's directory");
    for entry in std::fs::read_dir(from).expect("read the tree") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        let kind = entry.file_type().expect("its type");
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// Moves the clock of every airlock process that reads `file` (their
/// `AIRLOCK_TEST_CLOCK`) `ms` forward: the file holds the offset from the
/// system's clock, in milliseconds.
pub fn advance_clock(file: &Path, ms: u64) {
    let now: u64 = std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).expect("create the clock's directory");
    }
    // Written beside and renamed, so a reader never sees half a number.
    let temp = file.with_extension("tmp");
    std::fs::write(&temp, (now + ms).to_string()).expect("write the clock");
    std::fs::rename(&temp, file).expect("move the clock");
}

/// A cursor on a workspace's event feed (the store's `events` table, which
/// every airlock process writes in the transaction of each change). Across
/// processes there is no notifier: the newest event is looked at with one
/// indexed query every few milliseconds until the awaited one is there.
pub struct Feed {
    store: Store,
    seq: u64,
}

impl Feed {
    pub fn open(database: &Path) -> Feed {
        Feed::on(Store::open(database).expect("open the workspace's store"))
    }

    /// The feed of `store` (a shared PostgreSQL store, say), from its start.
    pub fn on(store: Store) -> Feed {
        Feed { store, seq: 0 }
    }

    /// Moves the cursor past every event written so far.
    pub fn skip_to_now(&mut self) {
        self.seq = self.store.last_event().expect("read the feed");
    }

    /// The next event after the cursor, waiting for it.
    pub fn next_event(&mut self) -> FeedEvent {
        self.next_unless_exited(None)
    }

    /// [`Feed::next`], failing with what `child` printed if it ends first.
    pub fn next_unless_exited(&mut self, mut child: Option<&mut Child>) -> FeedEvent {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(child) = child.as_deref_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let mut stderr = String::new();
                if let Some(pipe) = child.stderr.as_mut() {
                    use std::io::Read as _;
                    let _ = pipe.read_to_string(&mut stderr);
                }
                panic!("the process ended ({status}) before the awaited event: {stderr}");
            }
            let events = self.store.events_after(self.seq, 1).expect("read the feed");
            if let Some(event) = events.into_iter().next() {
                self.seq = event.seq;
                return event;
            }
            assert!(
                Instant::now() < deadline,
                "no event after seq {} within {PATIENCE:?}",
                self.seq
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Skips events until an approval is created that is still pending
    /// when it is seen: its id.
    pub fn wait_for_pending(&mut self, mut child: Option<&mut Child>) -> String {
        loop {
            let event = self.next_unless_exited(child.as_deref_mut());
            if event.kind != EventKind::ApprovalCreated {
                continue;
            }
            let id = event.subject.expect("an approval event names its approval");
            let approval = self.store.get(&id).expect("read the approval");
            if approval.status == airlock_store::ApprovalStatus::Pending {
                return id;
            }
        }
    }

    /// Skips events until one of `kind` comes.
    pub fn wait_for(&mut self, kind: EventKind) -> FeedEvent {
        loop {
            let event = self.next_event();
            if event.kind == kind {
                return event;
            }
        }
    }

    /// Every event after the cursor that is there now, without waiting.
    pub fn drain(&mut self) -> Vec<FeedEvent> {
        let events = self
            .store
            .events_after(self.seq, 100_000)
            .expect("read the feed");
        if let Some(last) = events.last() {
            self.seq = last.seq;
        }
        events
    }
}
