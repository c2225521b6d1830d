//! The parent's side of a run: it starts the engine (a worker process, or a
//! thread in tests), carries out the calls the script makes, each on a
//! thread of its own so that calls in flight overlap, and ends the run at
//! its wall-clock deadline, time spent waiting for a human not counted.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::engine::{self, Link};
use crate::protocol::{FailCode, Failure, Settled, Start, ToEngine, ToParent};
use crate::worker::WorkerArgs;

/// Where the engine runs.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// A confined worker process: `program` started with the worker
    /// subcommand (the `airlock` binary itself).
    Worker { program: PathBuf },
    /// A thread of this process, unconfined: for tests only.
    InProcess,
}

/// How the parent answered one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Settle the call in the script (a result, or a catchable error).
    Settle { kind: Settled, payload: String },
    /// End the run now (a human denied the call, or its approval timed
    /// out): `status` and `message` say why.
    End { status: String, message: String },
}

/// The human-wait clock: a call that waits for a human holds a [`Waiting`]
/// while it does, and the run's wall clock stops.
#[derive(Debug, Default, Clone)]
pub struct HumanClock(Arc<AtomicUsize>);

impl HumanClock {
    pub fn waiting(&self) -> Waiting {
        self.0.fetch_add(1, Ordering::SeqCst);
        Waiting(self.0.clone())
    }

    fn anyone(&self) -> bool {
        self.0.load(Ordering::SeqCst) > 0
    }
}

/// Held while a human decides (see [`HumanClock`]).
#[derive(Debug)]
pub struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What carries out the script's calls, and hears its console.
pub trait Host: Sync {
    /// One call, `args` the guest's JSON text as it sent it. Blocks until
    /// the call is settled; `human` stops the wall clock while a human
    /// decides. Runs on a thread of its own.
    fn call(&self, seq: u32, tool: &str, args: &str, human: &HumanClock) -> Reply;
    /// Whether a call of `tool` never waits (for a human or another
    /// process): such a call, made while no other is in flight, runs on the
    /// thread that runs the script, with no hand-over to a call thread.
    fn quick(&self, _tool: &str) -> bool {
        false
    }
    /// A console line, as the script wrote it. Called on the thread that
    /// runs the script (the one that called [`run`]).
    fn console(&self, _level: &str, _text: &str) {}
    /// Call `seq` of `tool` started, or (with its outcome) ended. Called on
    /// the thread that runs the script.
    fn progress(&self, _seq: u32, _tool: &str, _ended: Option<&Reply>) {}
    /// The run is over: calls still under way give up (their approvals
    /// are cancelled, their commands killed). The run waits for them.
    fn ended(&self) {}
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// The script's value, as JSON.
    Done(String),
    Failed(Failure),
    /// The host ended it ([`Reply::End`]).
    Stopped {
        status: String,
        message: String,
    },
}

/// A run's end, with what it wrote to the console.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub end: End,
    pub logs: Vec<(String, String)>,
    pub logs_truncated: bool,
    /// The calls the script made, in order.
    pub calls: u32,
}

enum Event {
    Engine(io::Result<Option<ToParent>>),
    /// A call's reply, with its tool's name.
    Settled(u32, String, Reply),
}

/// Runs `start` in `isolation`, with the wall-clock limit `wall`; each call
/// the script makes runs on a thread of its own, and the run returns once
/// every one has finished.
pub fn run(isolation: &Isolation, start: Start, wall: Duration, host: &dyn Host) -> Outcome {
    run_with(isolation, start, wall, host, None)
}

/// [`run`] in `spare`, a worker started ahead, when it was started for
/// these limits.
pub fn run_with(
    isolation: &Isolation,
    start: Start,
    wall: Duration,
    host: &dyn Host,
    spare: Option<Spare>,
) -> Outcome {
    std::thread::scope(|scope| run_in(scope, isolation, start, wall, host, spare))
}

fn run_in<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    isolation: &Isolation,
    start: Start,
    wall: Duration,
    host: &'scope dyn Host,
    spare: Option<Spare>,
) -> Outcome {
    let (events, inbox) = mpsc::channel::<Event>();
    let human = HumanClock::default();
    let (jobs, queue) = mpsc::channel::<Job>();
    // Dropped when the run returns: the call threads then end.
    let pool = Pool {
        jobs,
        queue: Arc::new(Mutex::new(queue)),
        idle: Arc::new(AtomicUsize::new(0)),
    };
    let mut engine = match Engine::start(isolation, &start, events.clone(), spare) {
        Ok(engine) => engine,
        Err(failure) => {
            return Outcome {
                end: End::Failed(failure),
                logs: Vec::new(),
                logs_truncated: false,
                calls: 0,
            };
        }
    };
    let mut outcome = Outcome {
        end: End::Failed(Failure::new(FailCode::ScriptError, "the run did not end")),
        logs: Vec::new(),
        logs_truncated: false,
        calls: 0,
    };
    let mut console_bytes = 0u64;
    let mut in_flight: Vec<u32> = Vec::new();
    let mut used = Duration::ZERO;
    let mut last = Instant::now();
    let mut counting = true;
    let end = loop {
        let now = Instant::now();
        if counting {
            used += now - last;
        }
        last = now;
        counting = !human.anyone();
        if used >= wall {
            break End::Failed(Failure::new(
                FailCode::ScriptTimeout,
                format!(
                    "the script ran longer than {} ms (time waiting for a human not counted)",
                    wall.as_millis()
                ),
            ));
        }
        let tick = if counting {
            wall - used
        } else {
            Duration::from_millis(100)
        };
        let event = match inbox.recv_timeout(tick) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break End::Failed(Failure::new(FailCode::ScriptError, "the engine went away"));
            }
        };
        match event {
            Event::Engine(Ok(Some(ToParent::Call { seq, tool, args }))) => {
                outcome.calls += 1;
                if outcome.calls > start.limits.max_calls
                    || in_flight.len() >= start.limits.max_in_flight as usize
                    || in_flight.contains(&seq)
                    || !start.tools.contains(&tool)
                {
                    break End::Failed(Failure::new(
                        FailCode::ScriptError,
                        "the engine broke the protocol (a call over the limits or to no tool); the run was ended",
                    ));
                }
                host.progress(seq, &tool, None);
                // A call that cannot wait, alone: carried out here and
                // answered at once.
                if in_flight.is_empty() && host.quick(&tool) {
                    let reply = host.call(seq, &tool, &args, &human);
                    host.progress(seq, &tool, Some(&reply));
                    match reply {
                        Reply::Settle { kind, payload } => {
                            if engine
                                .send(&ToEngine::Settle { seq, kind, payload })
                                .is_err()
                            {
                                break End::Failed(engine.died());
                            }
                            continue;
                        }
                        Reply::End { status, message } => break End::Stopped { status, message },
                    }
                }
                in_flight.push(seq);
                // A call thread that is idle takes it; else one more starts.
                if pool.idle.load(Ordering::SeqCst) == 0 {
                    let queue = pool.queue.clone();
                    let idle = pool.idle.clone();
                    let events = events.clone();
                    let human = human.clone();
                    let spawned = std::thread::Builder::new()
                        .name("codemode-call".to_owned())
                        .spawn_scoped(scope, move || {
                            call_thread(host, &queue, &idle, &events, &human)
                        });
                    if spawned.is_err() {
                        break End::Failed(Failure::new(
                            FailCode::ScriptError,
                            "could not start a thread for the call",
                        ));
                    }
                }
                if pool.jobs.send(Job { seq, tool, args }).is_err() {
                    break End::Failed(Failure::new(
                        FailCode::ScriptError,
                        "the call threads ended",
                    ));
                }
            }
            Event::Engine(Ok(Some(ToParent::Console { level, text }))) => {
                console_bytes += text.len() as u64;
                if console_bytes > start.limits.max_console_bytes {
                    outcome.logs_truncated = true;
                    continue;
                }
                host.console(&level, &text);
                outcome.logs.push((level, text));
            }
            Event::Engine(Ok(Some(ToParent::Done {
                result,
                logs_truncated,
            }))) => {
                outcome.logs_truncated |= logs_truncated;
                if result.len() as u64 > start.limits.max_result_bytes {
                    break End::Failed(Failure::new(
                        FailCode::ScriptLimit,
                        "the script's value is over the result limit",
                    ));
                }
                break End::Done(result);
            }
            Event::Engine(Ok(Some(ToParent::Failed {
                failure,
                logs_truncated,
            }))) => {
                outcome.logs_truncated |= logs_truncated;
                break End::Failed(failure);
            }
            Event::Engine(Ok(None)) => {
                break End::Failed(engine.died());
            }
            Event::Engine(Err(error)) => {
                break End::Failed(Failure::new(
                    FailCode::ScriptError,
                    format!("the engine sent something unreadable ({error}); the run was ended"),
                ));
            }
            Event::Settled(seq, tool, reply @ Reply::Settle { .. }) => {
                in_flight.retain(|s| *s != seq);
                host.progress(seq, &tool, Some(&reply));
                let Reply::Settle { kind, payload } = reply else {
                    continue;
                };
                if engine
                    .send(&ToEngine::Settle { seq, kind, payload })
                    .is_err()
                {
                    break End::Failed(engine.died());
                }
            }
            Event::Settled(seq, tool, reply @ Reply::End { .. }) => {
                host.progress(seq, &tool, Some(&reply));
                let Reply::End { status, message } = reply else {
                    continue;
                };
                break End::Stopped { status, message };
            }
        }
    };
    engine.stop();
    host.ended();
    outcome.end = end;
    outcome
}

/// One call for a call thread.
struct Job {
    seq: u32,
    tool: String,
    args: String,
}

/// The run's call threads: started as calls overlap, each taking calls
/// until the run is over (a script's sequential calls share one thread).
struct Pool {
    jobs: mpsc::Sender<Job>,
    queue: Arc<Mutex<mpsc::Receiver<Job>>>,
    /// Call threads waiting for a call.
    idle: Arc<AtomicUsize>,
}

fn call_thread(
    host: &dyn Host,
    queue: &Mutex<mpsc::Receiver<Job>>,
    idle: &AtomicUsize,
    events: &mpsc::Sender<Event>,
    human: &HumanClock,
) {
    loop {
        idle.fetch_add(1, Ordering::SeqCst);
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        idle.fetch_sub(1, Ordering::SeqCst);
        let Ok(Job { seq, tool, args }) = job else {
            return;
        };
        let reply = host.call(seq, &tool, &args, human);
        if events.send(Event::Settled(seq, tool, reply)).is_err() {
            return;
        }
    }
}

/// The engine under way.
enum Engine {
    Worker {
        child: Child,
        socket: UnixStream,
    },
    Thread {
        to_engine: mpsc::Sender<ToEngine>,
        abort: Arc<AtomicBool>,
    },
}

/// The longest line the parent reads from a worker.
const MAX_LINE: u64 = 64 << 20;

/// A worker started ahead of its run: confined already, waiting for its
/// script (a run with no call then costs no process start).
#[derive(Debug)]
pub struct Spare {
    /// Both taken when a run uses it.
    worker: Option<(Child, UnixStream)>,
    args: WorkerArgs,
}

impl Spare {
    /// The limits it was started for.
    pub fn args(&self) -> WorkerArgs {
        self.args
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        // Unused: its channel closed, it is killed and reaped.
        if let Some((mut child, socket)) = self.worker.take() {
            let _ = socket.shutdown(std::net::Shutdown::Both);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts a worker of `program` for runs held to `args`.
pub fn spawn_worker(program: &std::path::Path, args: WorkerArgs) -> Result<Spare, Failure> {
    let unavailable = |what: &str, error: io::Error| {
        Failure::new(
            FailCode::SandboxUnavailable,
            format!("could not start the code-mode worker ({what}: {error})"),
        )
    };
    let (socket, theirs) = UnixStream::pair().map_err(|e| unavailable("socketpair", e))?;
    let their_out = theirs.try_clone().map_err(|e| unavailable("dup", e))?;
    let child = Command::new(program)
        .args(args.to_args())
        .env_clear()
        .env("TZ", "UTC")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(their_out)))
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| unavailable(&program.display().to_string(), e))?;
    Ok(Spare {
        worker: Some((child, socket)),
        args,
    })
}

impl Engine {
    fn start(
        isolation: &Isolation,
        start: &Start,
        events: mpsc::Sender<Event>,
        spare: Option<Spare>,
    ) -> Result<Engine, Failure> {
        match isolation {
            Isolation::Worker { program } => {
                let args = WorkerArgs {
                    cpu_ms: start.limits.cpu_ms,
                    memory_bytes: start.limits.memory_bytes,
                };
                let mut spare = match spare {
                    Some(spare) if spare.args == args => spare,
                    _ => spawn_worker(program, args)?,
                };
                let unavailable = |what: &str, error: io::Error| {
                    Failure::new(
                        FailCode::SandboxUnavailable,
                        format!("could not start the code-mode worker ({what}: {error})"),
                    )
                };
                let Some((child, socket)) = spare.worker.take() else {
                    return Err(Failure::new(
                        FailCode::SandboxUnavailable,
                        "the code-mode worker was used already",
                    ));
                };
                let reader = socket.try_clone().map_err(|e| unavailable("dup", e))?;
                std::thread::Builder::new()
                    .name("codemode-reader".to_owned())
                    .spawn(move || read_lines(reader, events))
                    .map_err(|e| unavailable("thread", e))?;
                let mut engine = Engine::Worker { child, socket };
                engine
                    .send(&ToEngine::Start(start.clone()))
                    .map_err(|e| unavailable("start", e))?;
                Ok(engine)
            }
            Isolation::InProcess => {
                let (to_engine, from_parent) = mpsc::channel();
                let abort = Arc::new(AtomicBool::new(false));
                let mut link = ThreadLink {
                    from_parent,
                    events,
                    abort: abort.clone(),
                };
                let start = start.clone();
                std::thread::Builder::new()
                    .name("codemode-engine".to_owned())
                    .stack_size(16 << 20)
                    .spawn(move || {
                        let _ = engine::run(&start, &mut link);
                    })
                    .map_err(|e| {
                        Failure::new(
                            FailCode::ScriptError,
                            format!("could not start the engine: {e}"),
                        )
                    })?;
                Ok(Engine::Thread { to_engine, abort })
            }
        }
    }

    fn send(&mut self, message: &ToEngine) -> io::Result<()> {
        match self {
            Engine::Worker { socket, .. } => {
                let mut line = serde_json::to_vec(message).map_err(io::Error::other)?;
                line.push(b'\n');
                socket.write_all(&line)
            }
            Engine::Thread { to_engine, .. } => to_engine
                .send(message.clone())
                .map_err(|_| io::Error::other("the engine thread ended")),
        }
    }

    /// Why the engine stopped talking: a worker killed by a signal (the
    /// seccomp filter, RLIMIT_CPU or the address-space limit) or that exited.
    fn died(&mut self) -> Failure {
        match self {
            Engine::Worker { child, .. } => {
                use std::os::unix::process::ExitStatusExt;
                let status = child.wait();
                let signal = status.as_ref().ok().and_then(|s| s.signal());
                match signal {
                    Some(libc::SIGXCPU) => {
                        Failure::new(FailCode::ScriptTimeout, "the worker ran out of CPU time")
                    }
                    Some(libc::SIGSYS) => Failure::new(
                        FailCode::ScriptError,
                        "the worker made a system call its sandbox forbids and was killed",
                    ),
                    Some(libc::SIGSEGV | libc::SIGABRT | libc::SIGBUS) => Failure::new(
                        FailCode::ScriptMemory,
                        "the worker crashed (out of memory or stack)",
                    ),
                    _ => Failure::new(
                        FailCode::ScriptError,
                        format!("the worker ended without an answer ({status:?})"),
                    ),
                }
            }
            Engine::Thread { .. } => Failure::new(
                FailCode::ScriptError,
                "the engine thread ended without an answer",
            ),
        }
    }

    fn stop(self) {
        match self {
            Engine::Worker { mut child, socket } => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
                let _ = child.kill();
                // Reaped off the caller's path.
                let _ = std::thread::Builder::new()
                    .name("codemode-reap".to_owned())
                    .spawn(move || {
                        let _ = child.wait();
                    });
            }
            Engine::Thread { abort, .. } => {
                abort.store(true, Ordering::Relaxed);
            }
        }
    }
}

fn read_lines(socket: UnixStream, events: mpsc::Sender<Event>) {
    let mut reader = BufReader::new(socket);
    loop {
        let mut line = Vec::new();
        let event = match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => Ok(None),
            Ok(_) if line.last() != Some(&b'\n') => Err(io::Error::other("a line over the bound")),
            Ok(_) => serde_json::from_slice(&line)
                .map(Some)
                .map_err(io::Error::other),
            Err(error) => Err(error),
        };
        let last = !matches!(event, Ok(Some(_)));
        if events.send(Event::Engine(event)).is_err() || last {
            return;
        }
    }
}

struct ThreadLink {
    from_parent: mpsc::Receiver<ToEngine>,
    events: mpsc::Sender<Event>,
    abort: Arc<AtomicBool>,
}

impl Link for ThreadLink {
    fn send(&mut self, message: &ToParent) -> io::Result<()> {
        self.events
            .send(Event::Engine(Ok(Some(message.clone()))))
            .map_err(|_| io::Error::other("the parent has gone"))
    }

    fn recv(&mut self) -> io::Result<Option<ToEngine>> {
        Ok(self.from_parent.recv().ok())
    }

    fn abort(&self) -> Option<Arc<AtomicBool>> {
        Some(self.abort.clone())
    }
}
