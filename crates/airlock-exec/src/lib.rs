//! airlock-exec: the shell tool's sandbox (DESIGN §5.1).
//!
//! Every command runs in its own process group, in new user, mount and pid
//! namespaces (and a network namespace of its own, with no interface up,
//! unless the run may use the network), under Landlock (or, on a kernel
//! without it, with every other mount remounted read-only): it reads the
//! file system, writes only the workspace and a temporary directory of its
//! own, sees airlock's state dir as an empty read-only directory, cannot
//! write the config file or `.git` directories, mounts nothing, and holds
//! no capability. Its processes, their number and their memory are limited
//! (cgroups where airlock can make them, rlimits always). It is killed with
//! every process it started when it passes its timeout or is cancelled. Its
//! output is kept up to a limit per stream.
//!
//! [`preview`] runs a command the same way over a copy-on-write overlay of
//! the workspace and returns the file changes it would make, leaving the
//! workspace as it was.
//!
//! Which command may run is not decided here (that is the policy's, in
//! airlock-core); this crate only runs what it is given, contained.

mod child;
mod overlay;

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub use overlay::Change;

/// Why a command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The kernel offers no Landlock or no user namespaces.
    #[error("no sandbox is available here: {0}")]
    SandboxUnavailable(String),
    /// The command did not start (a missing program, a failed setup step).
    #[error("the command did not start: {0}")]
    Failed(String),
    #[error("{0}")]
    Invalid(String),
}

/// What the sandbox protects, for one workspace.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    /// `.git` directories: read-only in a run; in a preview writable in
    /// the overlay (so `git mv` can be previewed), their changes reported
    /// and never applied.
    git: Vec<PathBuf>,
    bash: PathBuf,
    /// `false`: `exec.sandbox: none`, only a process group, the timeout
    /// and the output limit.
    confined: bool,
    /// Whether Landlock confines the command; without it, read-only
    /// remounts of every mount but the workspace do.
    landlock: bool,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A bash command line.
    Shell(String),
    /// A program and its arguments, no shell.
    Argv(Vec<String>),
}

/// One run.
#[derive(Debug, Clone)]
pub struct Run {
    pub program: Program,
    /// The working directory: absolute, inside the workspace.
    pub cwd: PathBuf,
    /// The whole environment the command sees (`TMPDIR` is added).
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    /// Bytes kept per stream; the rest is read and dropped.
    pub max_output_bytes: usize,
    pub network: bool,
    /// Processes the run may have at once.
    pub max_processes: u64,
    /// Memory the run may use: all of its processes together where airlock
    /// can make a memory cgroup, and each process's data (`RLIMIT_DATA`)
    /// in any case.
    pub max_memory_bytes: u64,
    /// Cancelling it kills the command with everything it started.
    pub cancel: Cancel,
}

/// Ends a run from outside (the client that asked for it went away): the
/// command and every process it started are killed, and the run returns
/// with [`Output::cancelled`] set. A clone cancels the same runs; cancelling
/// before the run starts kills it as soon as it has.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    state: Arc<Mutex<CancelState>>,
}

#[derive(Debug, Default)]
struct CancelState {
    cancelled: bool,
    /// The runs in progress, told when it is cancelled.
    runs: Vec<mpsc::Sender<Event>>,
    /// Other cancels this one reaches too ([`Cancel::reach`]).
    reaches: Vec<std::sync::Weak<Mutex<CancelState>>>,
}

/// What a run in progress waits for.
enum Event {
    Exited,
    Cancelled,
    /// A signal for the command's process group (`Cancel::signal`).
    Signal(i32),
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        let reaches = match self.state.lock() {
            Ok(mut state) => {
                state.cancelled = true;
                for run in state.runs.drain(..) {
                    let _ = run.send(Event::Cancelled);
                }
                std::mem::take(&mut state.reaches)
            }
            Err(_) => return,
        };
        for other in reaches.iter().filter_map(std::sync::Weak::upgrade) {
            Cancel { state: other }.cancel();
        }
    }

    /// Makes cancelling or signalling this one cancel or signal `other`
    /// too, while `other` lives (a session's commands: each call's own
    /// cancel, reached by the session's). Not the other way round.
    pub fn reach(&self, other: &Cancel) {
        if let Ok(mut state) = self.state.lock() {
            state.reaches.retain(|weak| weak.strong_count() > 0);
            if state.cancelled {
                drop(state);
                other.cancel();
                return;
            }
            state.reaches.push(Arc::downgrade(&other.state));
        }
    }

    /// Sends `signal` (`SIGTERM`, `SIGINT`) to the process groups of the
    /// runs in progress, which go on until they end or are cancelled.
    /// `SIGKILL` is [`Cancel::cancel`].
    pub fn signal(&self, signal: i32) {
        if signal == libc::SIGKILL {
            return self.cancel();
        }
        let reaches = match self.state.lock() {
            Ok(mut state) => {
                // A run that ended no longer listens.
                state
                    .runs
                    .retain(|run| run.send(Event::Signal(signal)).is_ok());
                state.reaches.clone()
            }
            Err(_) => return,
        };
        for other in reaches.iter().filter_map(std::sync::Weak::upgrade) {
            Cancel { state: other }.signal(signal);
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.state.lock().map_or(true, |state| state.cancelled)
    }

    /// A guard that cancels when dropped (a request's future dropped when
    /// its client goes away), unless [`CancelOnDrop::disarm`]ed.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop {
            cancel: Some(self.clone()),
        }
    }

    /// Tells `run` when this is cancelled (at once if it is already).
    fn listen(&self, run: mpsc::Sender<Event>) {
        match self.state.lock() {
            Ok(mut state) if !state.cancelled => state.runs.push(run),
            _ => {
                let _ = run.send(Event::Cancelled);
            }
        }
    }
}

/// Cancels its [`Cancel`] when dropped.
#[derive(Debug)]
pub struct CancelOnDrop {
    cancel: Option<Cancel>,
}

impl CancelOnDrop {
    pub fn disarm(mut self) {
        self.cancel = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
    }
}

/// What came of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated_stdout: bool,
    pub truncated_stderr: bool,
    pub duration: Duration,
    /// It ran past its timeout and was killed.
    pub timed_out: bool,
    /// It was cancelled and killed.
    pub cancelled: bool,
}

/// A previewed run: its output and the changes it would make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    pub output: Output,
    pub changes: Vec<Change>,
}

/// Whether this machine can sandbox: the Landlock ABI (0: none, and then
/// read-only mounts confine the command), or why not.
///
/// User namespaces are required either way: without them airlock's state
/// dir cannot be hidden from the command, nor its processes held in a pid
/// namespace, and nothing then runs.
pub fn support() -> Result<i64, ExecError> {
    let abi = child::landlock_abi();
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    if max == Some(0) {
        return Err(ExecError::SandboxUnavailable(format!(
            "user namespaces are disabled (user.max_user_namespaces is 0){}; \
             set exec.sandbox: none to run commands unconfined (every one then asks)",
            if abi < 1 {
                ", and the kernel offers no Landlock"
            } else {
                ", and Landlock alone cannot hide airlock's state dir"
            }
        )));
    }
    Ok(abi)
}

impl Sandbox {
    /// The sandbox of the workspace at `root` (canonical): `hidden` paths
    /// (airlock's state dir, an audit log outside it) are neither readable
    /// nor writable, `read_only`
    /// ones (the config file) not writable, nor is any `.git` directory
    /// directly under the root.
    pub fn new(
        root: &Path,
        hidden: &[PathBuf],
        read_only: &[PathBuf],
    ) -> Result<Sandbox, ExecError> {
        let abi = support()?;
        let root = root
            .canonicalize()
            .map_err(|error| ExecError::Invalid(format!("{}: {error}", root.display())))?;
        let git = root.join(".git");
        let read_only: Vec<PathBuf> = read_only
            .iter()
            .filter(|path| **path != git)
            .cloned()
            .collect();
        let bash = find_bash()?;
        Ok(Sandbox {
            root,
            hidden: hidden.to_vec(),
            read_only,
            git: vec![git],
            bash,
            confined: true,
            landlock: abi >= 1,
        })
    }

    /// Confines with mounts alone, as on a kernel without Landlock: every
    /// mount but the workspace's and the run's temporary directory is
    /// remounted read-only in the command's mount namespace.
    pub fn without_landlock(mut self) -> Sandbox {
        self.landlock = false;
        self
    }

    /// No sandbox (`exec.sandbox: none`): a command runs in its own process
    /// group with its timeout and output limit, and nothing else holds it.
    pub fn unconfined(root: &Path) -> Result<Sandbox, ExecError> {
        let root = root
            .canonicalize()
            .map_err(|error| ExecError::Invalid(format!("{}: {error}", root.display())))?;
        let bash = find_bash()?;
        Ok(Sandbox {
            root,
            hidden: Vec::new(),
            read_only: Vec::new(),
            git: Vec::new(),
            bash,
            confined: false,
            landlock: false,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs `run` for real: its changes to the workspace stay.
    pub fn run(&self, run: &Run) -> Result<Output, ExecError> {
        let scratch = Scratch::new()?;
        self.spawn(run, &scratch, None)
    }

    /// Runs `run` over a copy-on-write overlay of the workspace: the
    /// workspace does not change; the changes it would make are returned.
    pub fn preview(&self, run: &Run) -> Result<Preview, ExecError> {
        if !self.confined {
            return Err(ExecError::SandboxUnavailable(
                "exec.sandbox is none: there is no overlay to preview a command in".to_owned(),
            ));
        }
        let scratch = Scratch::new()?;
        let upper = scratch.path.join("upper");
        let work = scratch.path.join("work");
        for dir in [&upper, &work] {
            std::fs::create_dir(dir).map_err(|error| ExecError::Failed(error.to_string()))?;
        }
        let listed = [&self.root, &upper, &work];
        if listed.iter().any(|path| {
            path.as_os_str()
                .as_bytes()
                .iter()
                .any(|byte| matches!(byte, b',' | b':' | b'\\'))
        }) {
            return Err(ExecError::SandboxUnavailable(
                "the workspace path holds a `,`, `:` or `\\`, which an overlay cannot name"
                    .to_owned(),
            ));
        }
        let mut options = OsString::from("lowerdir=");
        options.push(&self.root);
        options.push(",upperdir=");
        options.push(&upper);
        options.push(",workdir=");
        options.push(&work);
        options.push(",userxattr");
        let output = self.spawn(run, &scratch, Some(c_string(options.as_bytes())?))?;
        let mut changes = overlay::changes(&self.root, &upper, &self.hidden)
            .map_err(|error| ExecError::Failed(format!("reading the overlay: {error}")))?;
        // Git's own files (its index, objects, refs) are reported, once per
        // `.git`, and never applied.
        for git in &self.git {
            let Ok(relative) = git.strip_prefix(&self.root) else {
                continue;
            };
            let before = changes.len();
            changes.retain(|change| !change.path().starts_with(relative));
            if changes.len() < before {
                changes.push(Change::Unsupported {
                    path: relative.to_path_buf(),
                    what: "changes to git's own files (its index, objects and refs), which are never applied",
                });
            }
        }
        changes.sort_by(|a, b| a.path().cmp(b.path()));
        Ok(Preview { output, changes })
    }

    fn spawn(
        &self,
        run: &Run,
        scratch: &Scratch,
        overlay: Option<CString>,
    ) -> Result<Output, ExecError> {
        let cwd = if run.cwd.is_absolute() {
            run.cwd.clone()
        } else {
            self.root.join(&run.cwd)
        };
        if !cwd.starts_with(&self.root) {
            return Err(ExecError::Invalid(format!(
                "the working directory {} is outside the workspace",
                cwd.display()
            )));
        }
        let tmp = scratch.path.join("tmp");
        std::fs::create_dir(&tmp).map_err(|error| ExecError::Failed(error.to_string()))?;
        let mut command = match &run.program {
            Program::Shell(line) => {
                let mut command = Command::new(&self.bash);
                command.args(["--noprofile", "--norc", "-c", line]);
                command
            }
            Program::Argv(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Err(ExecError::Invalid("argv is empty".to_owned()));
                };
                let mut command = Command::new(program);
                command.args(args);
                command
            }
        };
        command.env_clear();
        for (name, value) in &run.env {
            // Variables that make a shell run code before the command.
            if !matches!(name.as_str(), "BASH_ENV" | "ENV" | "TMPDIR") {
                command.env(name, value);
            }
        }
        command.env("TMPDIR", &tmp);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());

        if !self.confined {
            command.current_dir(&cwd);
            child::install_unconfined(&mut command);
            return self.wait(run, command);
        }
        let (uid, gid) = child::ids();
        // What exists, and is not under a hidden directory already (whose
        // tmpfs leaves nothing to mount on).
        let hidden_dirs_all: Vec<&PathBuf> =
            self.hidden.iter().filter(|path| path.is_dir()).collect();
        let existing = |paths: &[PathBuf]| -> Result<Vec<PathBuf>, ExecError> {
            Ok(paths
                .iter()
                .filter(|path| path.symlink_metadata().is_ok())
                .filter(|path| {
                    !hidden_dirs_all
                        .iter()
                        .any(|dir| path.starts_with(dir) && path != dir)
                })
                .cloned()
                .collect())
        };
        // `.git` is read-only in a run; in a preview the overlay takes its
        // changes, which are reported and never applied.
        let previewing = overlay.is_some();
        let mut read_only_paths = self.read_only.clone();
        if !previewing {
            read_only_paths.extend(self.git.iter().cloned());
        }
        let read_only = existing(&read_only_paths)?
            .into_iter()
            .map(|path| {
                let path = c_string(path.as_os_str().as_bytes())?;
                let keep = child::locked_flags(&path)
                    .map_err(|error| ExecError::Failed(format!("statvfs: {error}")))?;
                Ok((path, keep))
            })
            .collect::<Result<Vec<_>, ExecError>>()?;
        let (hidden_dirs, hidden_files): (Vec<PathBuf>, Vec<PathBuf>) = existing(&self.hidden)?
            .into_iter()
            .partition(|path| path.is_dir());
        let as_c = |paths: Vec<PathBuf>| {
            paths
                .into_iter()
                .map(|path| c_string(path.as_os_str().as_bytes()))
                .collect::<Result<Vec<_>, _>>()
        };
        let empty = scratch.path.join("empty");
        std::fs::write(&empty, b"").map_err(|error| ExecError::Failed(error.to_string()))?;
        let null = c_string(empty.as_os_str().as_bytes())?;
        let null_flags = child::locked_flags(&null)
            .map_err(|error| ExecError::Failed(format!("statvfs: {error}")))?;
        let devices = [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/tty",
        ]
        .iter()
        .map(|path| c_string(path.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
        let cgroups = RunCgroups::new(run.max_processes, run.max_memory_bytes);
        let procs = cgroups.procs();
        let writable = [self.root.clone(), tmp.clone()];
        // Without Landlock, every other mount is remounted read-only.
        let remount = if self.landlock {
            Vec::new()
        } else {
            let skip: Vec<&PathBuf> = writable
                .iter()
                .chain(hidden_dirs_all.iter().copied())
                .collect();
            mount_points()?
                .into_iter()
                .filter(|point| !skip.iter().any(|under| point.starts_with(under)))
                .map(|point| {
                    let path = c_string(point.as_os_str().as_bytes())?;
                    let keep = child::locked_flags(&path).map_err(|error| {
                        ExecError::Failed(format!("statvfs {}: {error}", point.display()))
                    })?;
                    Ok((path, keep))
                })
                .collect::<Result<Vec<_>, ExecError>>()?
        };
        let prepared = child::Prepared {
            setgroups_path: c_string(b"/proc/self/setgroups")?,
            uid_map_path: c_string(b"/proc/self/uid_map")?,
            gid_map_path: c_string(b"/proc/self/gid_map")?,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            network: run.network,
            overlay: match overlay {
                Some(options) => Some((c_string(self.root.as_os_str().as_bytes())?, options)),
                None => None,
            },
            hidden: as_c(hidden_dirs)?,
            hidden_files: as_c(hidden_files)?,
            null,
            null_flags,
            read_only,
            cwd: c_string(cwd.as_os_str().as_bytes())?,
            writable: writable
                .iter()
                .map(|path| c_string(path.as_os_str().as_bytes()))
                .collect::<Result<Vec<_>, _>>()?,
            devices,
            abi: if self.landlock { support()? } else { 0 },
            remount,
            cgroup_procs: procs.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect(),
            max_processes: run.max_processes,
            max_memory_bytes: run.max_memory_bytes,
            cpu_seconds: run.timeout.as_secs().saturating_add(1),
            parent: child::pid(),
        };
        child::install(&mut command, prepared);
        let output = self.wait(run, command).map_err(|error| match error {
            // The kernel refused a namespace or a mount (a user namespace
            // without the rights it should have, as under some security
            // modules).
            ExecError::Failed(message) if message.contains("Operation not permitted") => {
                ExecError::SandboxUnavailable(format!(
                    "the kernel refused to set up the sandbox ({message}); \
                     set exec.sandbox: none to run commands unconfined (every one then asks)"
                ))
            }
            other => other,
        });
        drop(procs);
        drop(cgroups);
        output
    }

    /// Starts `command` and collects what comes of it.
    fn wait(&self, run: &Run, mut command: Command) -> Result<Output, ExecError> {
        let started = Instant::now();
        let mut process = command.spawn().map_err(|error| {
            ExecError::Failed(match &run.program {
                Program::Argv(argv) if error.kind() == std::io::ErrorKind::NotFound => {
                    format!(
                        "{}: no such program",
                        argv.first().map_or("", String::as_str)
                    )
                }
                _ => error.to_string(),
            })
        })?;
        let pid = process.id();
        let mut stdin = process.stdin.take();
        let input = run.stdin.clone();
        let writer = std::thread::spawn(move || {
            if let Some(stdin) = stdin.as_mut() {
                // A command that does not read its input: a broken pipe.
                let _ = stdin.write_all(&input);
            }
        });
        let limit = run.max_output_bytes;
        let stdout = process.stdout.take().map(|stream| capture(stream, limit));
        let stderr = process.stderr.take().map(|stream| capture(stream, limit));

        let (done, events) = mpsc::channel();
        run.cancel.listen(done.clone());
        let waiter = std::thread::spawn(move || {
            let status = process.wait();
            let _ = done.send(Event::Exited);
            status
        });
        let deadline = started + run.timeout;
        let (timed_out, cancelled) = loop {
            match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited) => break (false, false),
                Ok(Event::Cancelled) => break (false, true),
                Ok(Event::Signal(signal)) => child::signal_group(pid, signal),
                Err(_) => break (true, false),
            }
        };

        if timed_out || cancelled {
            child::kill_group(pid);
        }
        let status = waiter
            .join()
            .map_err(|_| ExecError::Failed("the waiting thread panicked".to_owned()))?
            .map_err(|error| ExecError::Failed(error.to_string()))?;
        // Whatever the command left behind in its group goes too.
        child::kill_group(pid);
        let duration = started.elapsed();
        let _ = writer.join();
        let (stdout, truncated_stdout) = stdout
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let (stderr, truncated_stderr) = stderr
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        Ok(Output {
            exit_code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            truncated_stdout,
            truncated_stderr,
            duration,
            timed_out,
            cancelled,
        })
    }
}

/// Reads a stream to its end, keeping the first `limit` bytes.
fn capture(
    mut stream: impl Read + Send + 'static,
    limit: usize,
) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut truncated = false;
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => {
                    let room = limit.saturating_sub(kept.len());
                    if read > room {
                        truncated = true;
                    }
                    kept.extend_from_slice(&buffer[..read.min(room)]);
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        (kept, truncated)
    })
}

fn c_string(bytes: &[u8]) -> Result<CString, ExecError> {
    CString::new(bytes).map_err(|_| ExecError::Invalid("a path holds a NUL byte".to_owned()))
}

/// A directory of one run outside the workspace (its `TMPDIR`, and the
/// overlay's upper and work dirs), removed when the run ends.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> Result<Scratch, ExecError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "airlock-exec-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path)
            .map_err(|error| ExecError::Failed(format!("{}: {error}", path.display())))?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The overlay's work dir holds a directory only its owner may
        // enter: make everything removable first.
        make_removable(&self.path);
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn make_removable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700));
            make_removable(&entry.path());
        }
    }
}

/// The cgroups of one run, where the machine lets airlock make them: a
/// pids cgroup (the process count limit then holds even for root, which
/// `RLIMIT_NPROC` does not bind) and a memory cgroup (a limit on all of the
/// run's processes together). Removed when the run ends.
struct RunCgroups {
    dirs: Vec<PathBuf>,
}

impl RunCgroups {
    fn new(max_processes: u64, max_memory_bytes: u64) -> RunCgroups {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "airlock-exec-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut cgroups = RunCgroups { dirs: Vec::new() };
        let limits = [
            ("pids", "pids.max", "pids.max", max_processes),
            (
                "memory",
                "memory.limit_in_bytes",
                "memory.max",
                max_memory_bytes,
            ),
        ];
        let mut v1 = false;
        for (controller, v1_file, _, value) in limits {
            // cgroup v1: `N:controller[,other]:/path`.
            let Some(base) = own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|name| name == controller)
                    .then(|| {
                        Path::new("/sys/fs/cgroup")
                            .join(controllers)
                            .join(path.trim_start_matches('/'))
                    })
            }) else {
                continue;
            };
            v1 = true;
            cgroups.make(&base.join(&name), v1_file, value);
        }
        // cgroup v2 (`0::/path` on a unified hierarchy), where both
        // controllers are delegated.
        let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").is_file();
        if !v1
            && unified
            && let Some(path) = own.lines().find_map(|line| line.strip_prefix("0::"))
        {
            let dir = Path::new("/sys/fs/cgroup")
                .join(path.trim_start_matches('/'))
                .join(&name);
            if std::fs::create_dir(&dir).is_ok() {
                cgroups.dirs.push(dir.clone());
                if limits
                    .iter()
                    .any(|(_, _, v2_file, value)| !set(&dir.join(v2_file), *value))
                {
                    let _ = std::fs::remove_dir(&dir);
                    cgroups.dirs.clear();
                }
            }
        }
        cgroups
    }

    /// Makes the cgroup `dir` with `file` set to `value`; nothing where it
    /// cannot.
    fn make(&mut self, dir: &Path, file: &str, value: u64) {
        if std::fs::create_dir(dir).is_err() {
            return;
        }
        if set(&dir.join(file), value) && dir.join("cgroup.procs").is_file() {
            self.dirs.push(dir.to_path_buf());
        } else {
            let _ = std::fs::remove_file(dir.join(file));
            let _ = std::fs::remove_dir(dir);
        }
    }

    /// Their `cgroup.procs`, open for the child to write itself into.
    fn procs(&self) -> Vec<std::os::fd::OwnedFd> {
        self.dirs
            .iter()
            .filter_map(|dir| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .ok()
            })
            .map(std::os::fd::OwnedFd::from)
            .collect()
    }
}

/// Writes `value` to the existing control file `path` (never creates one:
/// a directory that is not a cgroup has none).
fn set(path: &Path, value: u64) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut file| file.write_all(value.to_string().as_bytes()))
        .is_ok()
}

impl Drop for RunCgroups {
    /// Kills whatever is still in them (nothing should be: the pid
    /// namespace ended with the run) and removes them once the kernel has
    /// let go of the processes that just died, which can take a moment.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for dir in &self.dirs {
            loop {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs
                    .lines()
                    .filter_map(|line| line.trim().parse::<u32>().ok())
                {
                    child::kill_group(pid);
                }
                if std::fs::remove_dir(dir).is_ok() || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Every mount point of this process's mount namespace, from
/// `/proc/self/mountinfo` (its fifth field, with `\NNN` octal escapes).
fn mount_points() -> Result<Vec<PathBuf>, ExecError> {
    let text = std::fs::read("/proc/self/mountinfo")
        .map_err(|error| ExecError::Failed(format!("/proc/self/mountinfo: {error}")))?;
    let mut points = Vec::new();
    for line in text.split(|byte| *byte == b'\n') {
        let Some(field) = line.split(|byte| *byte == b' ').nth(4) else {
            continue;
        };
        let mut path = Vec::with_capacity(field.len());
        let mut i = 0;
        while i < field.len() {
            let octal = field.get(i + 1..i + 4).filter(|digits| {
                field[i] == b'\\' && digits.iter().all(|digit| (b'0'..=b'7').contains(digit))
            });
            match octal {
                Some(digits) => {
                    path.push(
                        digits
                            .iter()
                            .fold(0u8, |value, digit| value.wrapping_mul(8) + (digit - b'0')),
                    );
                    i += 4;
                }
                None => {
                    path.push(field[i]);
                    i += 1;
                }
            }
        }
        points.push(PathBuf::from(std::ffi::OsString::from_vec(path)));
    }
    points.sort();
    points.dedup();
    Ok(points)
}

fn find_bash() -> Result<PathBuf, ExecError> {
    ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .ok_or_else(|| ExecError::SandboxUnavailable("bash is not installed".to_owned()))
}
