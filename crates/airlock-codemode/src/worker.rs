//! The worker process: the same binary, started by the parent with a
//! socket as its standard input and output and nothing else. Before it reads
//! a byte of the script it confines itself:
//!
//! 1. no descriptor but 0, 1 and 2: it closes any it inherited, and
//!    refuses to run if one is left;
//! 2. rlimits: CPU, address space, no new files, no processes, no file
//!    size, no core;
//! 3. killed when the parent dies;
//! 4. Landlock: every file-system and network right handled, none granted,
//!    abstract sockets and signals scoped;
//! 5. seccomp: an allow-list of the system calls the engine needs (memory,
//!    the thread's CPU clock, reading fd 0, writing fds 1 and 2, exit);
//!    anything else kills the process.
//!
//! A bug in the C engine then reaches nothing but its channel.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};

use crate::engine::{self, Link};
use crate::protocol::{FailCode, Failure, ToEngine, ToParent};

/// The hidden subcommand that starts a worker.
pub const SUBCOMMAND: &str = "__codemode-worker";

/// What the parent passes on the command line, so the worker can set its
/// rlimits before it reads anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerArgs {
    pub cpu_ms: u64,
    pub memory_bytes: u64,
}

impl WorkerArgs {
    pub fn to_args(self) -> Vec<String> {
        vec![
            SUBCOMMAND.to_owned(),
            self.cpu_ms.to_string(),
            self.memory_bytes.to_string(),
        ]
    }

    fn parse(args: &[String]) -> Option<WorkerArgs> {
        match args {
            [cpu, memory] => Some(WorkerArgs {
                cpu_ms: cpu.parse().ok()?,
                memory_bytes: memory.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// The worker's `main`: `args` are those after the subcommand. Returns the
/// process's exit code.
pub fn main(args: &[String]) -> i32 {
    let mut link = StdioLink {
        input: BufReader::new(io::stdin().lock()),
        output: io::stdout().lock(),
    };
    let Some(parsed) = WorkerArgs::parse(args) else {
        return 2;
    };
    if let Err(why) = confine(parsed) {
        let _ = link.send(&ToParent::Failed {
            failure: Failure::new(
                FailCode::SandboxUnavailable,
                format!("the code-mode worker could not confine itself: {why}"),
            ),
            logs_truncated: false,
        });
        return 3;
    }
    let start = match link.recv() {
        Ok(Some(ToEngine::Start(start))) => start,
        _ => return 4,
    };
    match engine::run(&start, &mut link) {
        Ok(()) => 0,
        Err(_) => 5,
    }
}

struct StdioLink<R, W> {
    input: BufReader<R>,
    output: W,
}

/// The longest line the worker reads: a settled call's result.
const MAX_LINE: u64 = 64 << 20;

impl<R: Read, W: Write> Link for StdioLink<R, W> {
    fn send(&mut self, message: &ToParent) -> io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
        line.push(b'\n');
        self.output.write_all(&line)?;
        self.output.flush()
    }

    fn recv(&mut self) -> io::Result<Option<ToEngine>> {
        let mut line = Vec::new();
        let read = (&mut self.input)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(None);
        }
        serde_json::from_slice(&line)
            .map(Some)
            .map_err(io::Error::other)
    }
}

fn confine(args: WorkerArgs) -> Result<(), String> {
    crate::raw::close_inherited_descriptors().map_err(|e| format!("close_range: {e}"))?;
    only_standard_descriptors()?;
    limits(args)?;
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if rustix::process::getppid().is_none_or(|parent| parent.as_raw_nonzero().get() == 1) {
        return Err("the parent is gone".to_owned());
    }
    landlock()?;
    // What the C library and the engine set up lazily on first use (the
    // vDSO's clocks, the time zone) is set up now, before seccomp forbids
    // the calls that do it; the time zone file is out of reach already, so
    // `TZ=UTC` applies.
    engine::warm_up();
    // After Landlock, whose ruleset is a descriptor while it is made.
    set_limit(rustix::process::Resource::Nofile, 3, 3)?;
    seccomp()
}

/// Refuses to run holding any descriptor but 0, 1 and 2: the parent opens
/// everything close-on-exec, and a descriptor that slipped through would
/// be a way out.
fn only_standard_descriptors() -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let dir = rustix::fs::open(
        "/proc/self/fd",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("/proc/self/fd: {e}"))?;
    let own = dir.as_raw_fd();
    let mut extra = Vec::new();
    // `Dir::new` reads through this descriptor (no second one).
    let entries = rustix::fs::Dir::new(dir).map_err(|e| format!("/proc/self/fd: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("/proc/self/fd: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(fd) = name.parse::<i32>() else {
            continue;
        };
        if fd > 2 && fd != own {
            extra.push(fd);
        }
    }
    if extra.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "it holds descriptors {extra:?} besides its channel"
        ))
    }
}

fn set_limit(resource: rustix::process::Resource, soft: u64, hard: u64) -> Result<(), String> {
    rustix::process::setrlimit(
        resource,
        rustix::process::Rlimit {
            current: Some(soft),
            maximum: Some(hard),
        },
    )
    .map_err(|e| format!("setrlimit {resource:?}: {e}"))
}

fn limits(args: WorkerArgs) -> Result<(), String> {
    use rustix::process::Resource;
    let set = set_limit;
    // The engine's own deadline comes first; these end a native loop that
    // never polls it (the parent's wall-clock kill is the other).
    let cpu_s = args.cpu_ms.div_ceil(1000) + 2;
    set(Resource::Cpu, cpu_s, cpu_s + 1)?;
    // The engine's heap is counted exactly; this bounds everything else.
    let address_space = args.memory_bytes.saturating_mul(2).saturating_add(1 << 30);
    set(Resource::As, address_space, address_space)?;
    set(Resource::Nproc, 0, 0)?;
    set(Resource::Fsize, 0, 0)?;
    set(Resource::Core, 0, 0)?;
    set(Resource::Memlock, 0, 0)
}

fn landlock() -> Result<(), String> {
    use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetStatus, Scope};
    let abi = ABI::V6;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|ruleset| ruleset.handle_access(AccessNet::from_all(abi)))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(abi)))
        .and_then(|ruleset| ruleset.create())
        .and_then(|ruleset| ruleset.restrict_self())
        .map_err(|e| format!("Landlock: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not available in this kernel".to_owned());
    }
    Ok(())
}

fn seccomp() -> Result<(), String> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let on_fd = |fds: &[u64]| -> Result<Vec<SeccompRule>, String> {
        fds.iter()
            .map(|fd| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *fd)
                    .and_then(|condition| SeccompRule::new(vec![condition]))
                    .map_err(|e| e.to_string())
            })
            .collect()
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_read, on_fd(&[0])?);
    rules.insert(libc::SYS_write, on_fd(&[1, 2])?);
    for call in [
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_brk,
        libc::SYS_madvise,
        libc::SYS_futex,
        libc::SYS_clock_gettime,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_sigaltstack,
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_getrandom,
    ] {
        rules.insert(call, Vec::new());
    }
    // mprotect, but never to make memory executable.
    rules.insert(
        libc::SYS_mprotect,
        vec![
            SeccompCondition::new(
                2,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64),
                0,
            )
            .and_then(|condition| SeccompRule::new(vec![condition]))
            .map_err(|e| e.to_string())?,
        ],
    );
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::KillProcess,
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("seccomp: {e}"))?;
    seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))
}
