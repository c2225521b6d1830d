//! The HTTP approval API under load, end to end over real sockets against
//! `airlock serve --http` (DESIGN §10, §12): 100 concurrent agents submitting
//! calls while approvers decide.
//! - allowed reads: 100 agents each call `read_file` back to back; requests/s
//!   over all of them and the per-call p50/p99;
//! - approvals: 100 agents each submit writes (defer mode: 202 at once) and
//!   poll `/hitl/result/{id}` every 5 ms until it is final, while two
//!   approvers race over `/hitl/pending`, deciding each (every fifth denied);
//!   p50/p99 from the approver's 200 on `/hitl/decide` to the agent's first 200
//!   with the final envelope on `/hitl/result` (so it includes up to one 5 ms
//!   polling interval).
//!
//! It fails unless every submitted approval got exactly one successful
//! decision (the other approver's attempts are 409), every result follows its
//! decision (approved: the file has the content; denied: no file), the audit
//! holds one decision per approval, `/hitl/result` answers 200 only with a
//! final result, and nothing answered 429 or 5xx.
//!
//! Every agent and approver keeps one HTTP/1.1 keep-alive connection.
//! `cargo bench -p airlock-cli --bench http` prints the figures (release
//! build). Under `cargo test --benches` it runs a couple of calls per agent
//! only, to prove it works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const AGENTS: usize = 100;
const AGENT: &str = "bench-agent-token";
/// Two approvers (different users), racing over the same pending list.
const APPROVERS: [&str; 2] = ["bench-approver-token-1", "bench-approver-token-2"];
const ADMIN: &str = "bench-admin-token";
/// How often an agent asks for its result.
const POLL: Duration = Duration::from_millis(5);
/// Approval states a final result never has.
const NOT_FINAL: [&str; 3] = ["pending", "approved", "applying"];
/// How long an agent waits for one result before calling it lost.
const PATIENCE: Duration = Duration::from_secs(60);

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn config() -> String {
    format!(
        "auth:\n  tokens:\n    \
         - {{name: agents, sha256: \"{}\", roles: [agent], user: bench}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: a1}}\n    \
         - {{name: laptop, sha256: \"{}\", roles: [approver], user: a2}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin], user: boss}}\n\
         security:\n  hitl:\n    approval_mode: defer\n    \
         max_pending: 100000\n    max_pending_per_session: 100000\n",
        sha(AGENT),
        sha(APPROVERS[0]),
        sha(APPROVERS[1]),
        sha(ADMIN)
    )
}

struct Server {
    child: Child,
    addr: String,
    /// What the server wrote to stderr after its banner.
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(workspace: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["serve", "--http", "127.0.0.1:0"])
            .current_dir(workspace)
            .env("AIRLOCK_USER", "bench")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut banner = String::new();
        let addr = loop {
            let mut line = String::new();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "serve exited: {banner}"
            );
            banner.push_str(&line);
            if let Some(rest) = line.trim().strip_prefix("airlock: serving MCP at http://") {
                break rest.trim_end_matches("/mcp").to_owned();
            }
        };
        let collected = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&collected);
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Server {
            child,
            addr,
            stderr: collected,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 keep-alive connection (reopened when the server closes it).
struct Conn {
    addr: String,
    token: &'static str,
    stream: Option<BufReader<TcpStream>>,
    opened: u64,
}

impl Conn {
    fn new(addr: &str, token: &'static str) -> Conn {
        Conn {
            addr: addr.to_owned(),
            token,
            stream: None,
            opened: 0,
        }
    }

    fn get(&mut self, path: &str) -> (u16, Value) {
        self.request("GET", path, "")
    }

    fn post(&mut self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, &body.to_string())
    }

    /// The status and the JSON body (`Value::String` when it is not JSON).
    /// A GET on a reused connection the server has closed is sent again on a
    /// new one; a POST never is (it might have been acted on).
    fn request(&mut self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        );
        let reused = self.stream.is_some();
        match self.exchange(request.as_bytes()) {
            Ok(answer) => answer,
            Err(error) if reused && method == "GET" => {
                self.stream = None;
                self.exchange(request.as_bytes())
                    .unwrap_or_else(|again| panic!("{method} {path}: {error}, then {again}"))
            }
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    fn exchange(&mut self, request: &[u8]) -> std::io::Result<(u16, Value)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(60)))?;
            self.stream = Some(BufReader::new(stream));
            self.opened += 1;
        }
        let answer = read_response(self.stream.as_mut().unwrap(), request);
        match &answer {
            Ok((_, _, close)) if !close => {}
            _ => self.stream = None,
        }
        answer.map(|(status, body, _)| (status, body))
    }
}

fn eof() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed")
}

/// Sends `request` and reads one response: status, JSON body, and whether
/// the server closes the connection after it.
fn read_response(
    reader: &mut BufReader<TcpStream>,
    request: &[u8],
) -> std::io::Result<(u16, Value, bool)> {
    reader.get_mut().write_all(request)?;
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(eof());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {line:?}")))?;
    let mut length = 0usize;
    let mut chunked = false;
    let mut close = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(eof());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        let value = value.trim().to_ascii_lowercase();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.contains("chunked"),
            "connection" => close = value.contains("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Err(eof());
            }
            let size = line.trim().split(';').next().unwrap_or("0");
            let size = usize::from_str_radix(size, 16).map_err(std::io::Error::other)?;
            if size == 0 {
                // Trailers, then the blank line.
                loop {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            line.clear();
            reader.read_line(&mut line)?;
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    let text = String::from_utf8_lossy(&body);
    let value = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned()));
    Ok((status, value, close))
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Whatever went wrong, from any thread; the run fails at the end if any.
#[derive(Default)]
struct Problems(Mutex<Vec<String>>);

impl Problems {
    fn add(&self, problem: String) {
        self.0.lock().unwrap().push(problem);
    }
}

/// Write `j` of agent `i`: its path (under `src/`, where new files may be
/// created), content, and whether it is to be denied.
fn write_path(i: usize, j: usize) -> String {
    format!("src/agent{i}/f{j}.txt")
}

fn write_content(i: usize, j: usize) -> String {
    format!("agent {i} write {j}\n")
}

fn denied_by_design(i: usize, j: usize) -> bool {
    (i + j).is_multiple_of(5)
}

/// `(i, j)` back from a path `src/agent{i}/f{j}.txt`.
fn parse_path(path: &str) -> Option<(usize, usize)> {
    let rest = path.strip_prefix("src/agent")?;
    let (i, file) = rest.split_once("/f")?;
    Some((i.parse().ok()?, file.strip_suffix(".txt")?.parse().ok()?))
}

/// One agent's write, as the agent saw it.
struct Submitted {
    id: String,
    i: usize,
    j: usize,
    /// When the agent first saw 200 on `/hitl/result`, and the final status.
    seen: Option<(Instant, String)>,
}

/// One successful (200) decision, as the approver saw it.
struct Decided {
    at: Instant,
    approve: bool,
    approver: usize,
}

/// What the agents and approvers of phase 2 share.
#[derive(Default)]
struct Shared {
    problems: Arc<Problems>,
    /// Every 200 from `/hitl/decide`, by approval id.
    decisions: Mutex<HashMap<String, Vec<Decided>>>,
    /// 409s from `/hitl/decide`.
    conflicts: AtomicU64,
    /// 200s from `/hitl/result` that were not final.
    premature: Mutex<Vec<String>>,
    /// Connections the agents opened.
    connections: AtomicU64,
    /// Set once every agent has its results.
    done: AtomicBool,
}

/// An approver: lists what is pending and decides each (approver 0 newest
/// first, approver 1 oldest first, so they meet and race), until `done`.
/// The listings made and the connections opened.
fn approve_until_done(addr: &str, which: usize, shared: &Shared) -> (u64, u64) {
    let mut conn = Conn::new(addr, APPROVERS[which]);
    let mut listings = 0u64;
    while !shared.done.load(Ordering::Relaxed) {
        let (status, list) = conn.get("/hitl/pending");
        listings += 1;
        if status != 200 {
            shared
                .problems
                .add(format!("approver {which}: pending {status} {list}"));
            std::thread::sleep(POLL);
            continue;
        }
        let mut ids: Vec<(String, bool)> = Vec::new();
        for approval in list["approvals"].as_array().into_iter().flatten() {
            let id = approval["id"].as_str().unwrap_or_default().to_owned();
            let path = approval["path"]
                .as_str()
                .or_else(|| approval["params"]["path"].as_str())
                .unwrap_or_default();
            match parse_path(path) {
                Some((i, j)) => ids.push((id, !denied_by_design(i, j))),
                None => shared
                    .problems
                    .add(format!("approval with no known path: {approval}")),
            }
        }
        if ids.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // The list is newest first.
        if which == 1 {
            ids.reverse();
        }
        for (id, approve) in ids {
            let decision = if approve { "approve" } else { "deny" };
            let (status, answer) = conn.post(
                &format!("/hitl/decide/{id}"),
                &json!({"decision": decision}),
            );
            let at = Instant::now();
            match status {
                200 => {
                    let expected = if approve { "allowed" } else { "denied" };
                    if answer["status"] != expected {
                        shared
                            .problems
                            .add(format!("decide {id} {decision}: {answer}"));
                    }
                    let decided = Decided {
                        at,
                        approve,
                        approver: which,
                    };
                    let mut decisions = shared.decisions.lock().unwrap();
                    decisions.entry(id).or_default().push(decided);
                }
                409 => {
                    shared.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                _ => shared
                    .problems
                    .add(format!("decide {id} {decision}: {status} {answer}")),
            }
        }
    }
    (listings, conn.opened)
}

/// Agent `i`: submits its writes one at a time, each followed by polling its
/// result until it is final. The submit times, the polls made, and what it saw.
fn write_and_wait(
    addr: &str,
    i: usize,
    writes: usize,
    barrier: &Barrier,
    shared: &Shared,
) -> (Vec<Duration>, u64, Vec<Submitted>) {
    let mut conn = Conn::new(addr, AGENT);
    // Connected before the clock starts.
    conn.get("/openapi.json");
    barrier.wait();
    let mut submits = Vec::with_capacity(writes);
    let mut polls = 0u64;
    let mut outcomes = Vec::with_capacity(writes);
    for j in 0..writes {
        let call = json!({"tool": "write_file", "session": format!("agent-{i}"),
            "arguments": {"path": write_path(i, j), "content": write_content(i, j)}});
        let started = Instant::now();
        let (status, pending) = conn.post("/v1/tools/call", &call);
        submits.push(started.elapsed());
        let id = match (status, pending["approval_id"].as_str()) {
            (202, Some(id)) => id.to_owned(),
            _ => {
                shared.problems.add(format!(
                    "write_file {}: {status} {pending}",
                    write_path(i, j)
                ));
                continue;
            }
        };
        let deadline = Instant::now() + PATIENCE;
        let seen = loop {
            let (status, result) = conn.get(&format!("/hitl/result/{id}"));
            polls += 1;
            let now = Instant::now();
            match status {
                200 => {
                    let final_status = result["status"].as_str().unwrap_or("?");
                    if !NOT_FINAL.contains(&final_status) {
                        break Some((now, final_status.to_owned()));
                    }
                    // 200 is to carry the final envelope: note it and wait
                    // for the real one.
                    shared.premature.lock().unwrap().push(result.to_string());
                }
                202 => {}
                _ => {
                    shared
                        .problems
                        .add(format!("result {id}: {status} {result}"));
                    break None;
                }
            }
            if now > deadline {
                shared.problems.add(format!(
                    "result {id}: lost, still pending after {PATIENCE:?}"
                ));
                break None;
            }
            std::thread::sleep(POLL);
        };
        outcomes.push(Submitted { id, i, j, seen });
    }
    shared.connections.fetch_add(conn.opened, Ordering::Relaxed);
    (submits, polls, outcomes)
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let reads_per_agent = if full { 200 } else { 2 };
    let writes_per_agent = if full { 10 } else { 1 };

    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    std::fs::write(root.join("airlock.yaml"), config()).unwrap();
    let text: String = (0..100)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::write(root.join("a.txt"), &text).unwrap();
    for i in 0..AGENTS {
        std::fs::create_dir_all(root.join(format!("src/agent{i}"))).unwrap();
    }
    let server = Server::start(root);
    let addr = server.addr.clone();
    let problems = Arc::new(Problems::default());
    let connections = Arc::new(AtomicU64::new(0));

    // Phase 1: allowed reads, all agents at once.
    let barrier = Arc::new(Barrier::new(AGENTS + 1));
    let readers: Vec<_> = (0..AGENTS)
        .map(|_| {
            let addr = addr.clone();
            let barrier = Arc::clone(&barrier);
            let problems = Arc::clone(&problems);
            let connections = Arc::clone(&connections);
            std::thread::spawn(move || {
                let mut conn = Conn::new(&addr, AGENT);
                let call =
                    json!({"tool": "read_file", "arguments": {"path": "a.txt", "end_line": 20}});
                // Connected before the clock starts.
                conn.post("/v1/tools/call", &call);
                barrier.wait();
                let mut times = Vec::with_capacity(reads_per_agent);
                for _ in 0..reads_per_agent {
                    let started = Instant::now();
                    let (status, answer) = conn.post("/v1/tools/call", &call);
                    times.push(started.elapsed());
                    if status != 200 || answer["status"] != "allowed" {
                        problems.add(format!("read_file: {status} {answer}"));
                    }
                }
                connections.fetch_add(conn.opened, Ordering::Relaxed);
                times
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut reads: Vec<Duration> = readers
        .into_iter()
        .flat_map(|reader| reader.join().unwrap())
        .collect();
    let read_elapsed = started.elapsed();
    let read_connections = connections.swap(0, Ordering::Relaxed);

    // Phase 2: writes submitted, decided by two racing approvers, results polled.
    let shared = Arc::new(Shared {
        problems: Arc::clone(&problems),
        ..Shared::default()
    });
    let approvers: Vec<_> = (0..APPROVERS.len())
        .map(|which| {
            let (addr, shared) = (addr.clone(), Arc::clone(&shared));
            std::thread::spawn(move || approve_until_done(&addr, which, &shared))
        })
        .collect();
    let barrier = Arc::new(Barrier::new(AGENTS + 1));
    let agents: Vec<_> = (0..AGENTS)
        .map(|i| {
            let (addr, shared, barrier) = (addr.clone(), Arc::clone(&shared), Arc::clone(&barrier));
            std::thread::spawn(move || {
                write_and_wait(&addr, i, writes_per_agent, &barrier, &shared)
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut submits = Vec::new();
    let mut polls = 0u64;
    let mut outcomes = Vec::new();
    for agent in agents {
        let (times, count, seen) = agent.join().unwrap();
        submits.extend(times);
        polls += count;
        outcomes.extend(seen);
    }
    let write_elapsed = started.elapsed();
    shared.done.store(true, Ordering::Relaxed);
    let mut listings = 0u64;
    let mut approver_connections = 0u64;
    for approver in approvers {
        let (count, opened) = approver.join().unwrap();
        listings += count;
        approver_connections += opened;
    }
    let write_connections = shared.connections.load(Ordering::Relaxed);

    // Every submitted approval: exactly one decision, a result that follows it.
    let decisions = std::mem::take(&mut *shared.decisions.lock().unwrap());
    let submitted: HashSet<&str> = outcomes.iter().map(|outcome| outcome.id.as_str()).collect();
    let mut latencies = Vec::with_capacity(outcomes.len());
    let mut seen_before_answer = 0u64;
    let (mut approved, mut denied, mut lost, mut double) = (0u64, 0u64, 0u64, 0u64);
    let mut by_approver = [0u64; APPROVERS.len()];
    for outcome in &outcomes {
        let (i, j) = (outcome.i, outcome.j);
        let decided = decisions.get(&outcome.id).map_or(&[][..], Vec::as_slice);
        match decided {
            [] => {
                lost += 1;
                problems.add(format!("{}: never decided", outcome.id));
                continue;
            }
            [_] => {}
            _ => {
                double += 1;
                problems.add(format!("{}: decided {} times", outcome.id, decided.len()));
            }
        }
        let decision = &decided[0];
        by_approver[decision.approver] += 1;
        if decision.approve == denied_by_design(i, j) {
            problems.add(format!("{}: the wrong decision was made", outcome.id));
        }
        let on_disk = std::fs::read_to_string(root.join(write_path(i, j))).ok();
        let expected = if decision.approve {
            approved += 1;
            ("allowed", Some(write_content(i, j)))
        } else {
            denied += 1;
            ("denied", None)
        };
        match &outcome.seen {
            Some((at, status)) => {
                if (status.as_str(), &on_disk) != (expected.0, &expected.1) {
                    problems.add(format!(
                        "{}: result {status}, file {on_disk:?}; expected {expected:?}",
                        outcome.id
                    ));
                }
                match at.checked_duration_since(decision.at) {
                    Some(latency) => latencies.push(latency),
                    None => {
                        // The agent saw it before the decide answer arrived.
                        seen_before_answer += 1;
                        latencies.push(Duration::ZERO);
                    }
                }
            }
            None => lost += 1,
        }
    }
    for id in decisions.keys() {
        if !submitted.contains(id.as_str()) {
            problems.add(format!("{id}: decided, but no agent submitted it"));
        }
    }
    if submitted.len() != AGENTS * writes_per_agent {
        problems.add(format!(
            "{} approvals for {} writes",
            submitted.len(),
            AGENTS * writes_per_agent
        ));
    }

    let premature = std::mem::take(&mut *shared.premature.lock().unwrap());
    if let Some(example) = premature.first() {
        problems.add(format!(
            "GET /hitl/result answered 200 before the result was final {} times, e.g. {example}",
            premature.len()
        ));
    }

    // The store and the audit agree: nothing pending, one decision each.
    let mut admin = Conn::new(&addr, ADMIN);
    let (status, left) = admin.get("/hitl/pending");
    if status != 200
        || left["approvals"]
            .as_array()
            .is_none_or(|list| !list.is_empty())
    {
        problems.add(format!("still pending at the end: {status} {left}"));
    }
    let (status, audit) = admin.get("/audit?event_type=hitl_decision&limit=5000");
    let mut audited: HashMap<String, u64> = HashMap::new();
    for record in audit["records"].as_array().into_iter().flatten() {
        let id = record["hitl_id"].as_str().unwrap_or("?").to_owned();
        *audited.entry(id).or_default() += 1;
    }
    if status != 200
        || audited.len() != submitted.len()
        || audited
            .iter()
            .any(|(id, count)| *count != 1 || !submitted.contains(id.as_str()))
    {
        problems.add(format!(
            "audit: {status}, {} hitl_decision records for {} approvals",
            audited.values().sum::<u64>(),
            submitted.len()
        ));
    }
    let (status, verify) = admin.get("/audit/verify");
    if status != 200 || verify["ok"] != true {
        problems.add(format!("audit verify: {status} {verify}"));
    }

    let total_reads = reads.len();
    let read_p50 = percentile(&mut reads, 0.5);
    let read_p99 = percentile(&mut reads, 0.99);
    let submit_p50 = percentile(&mut submits, 0.5);
    let submit_p99 = percentile(&mut submits, 0.99);
    let latency_p50 = percentile(&mut latencies, 0.5);
    let latency_p99 = percentile(&mut latencies, 0.99);
    let latency_max = latencies.last().copied().unwrap_or_default();
    println!(
        "http api ({AGENTS} agents, one keep-alive connection each{})",
        if full { "" } else { ", test mode" }
    );
    println!(
        "  read_file allowed: {total_reads} calls in {:.2} s = {:.0} requests/s; per call p50 {:.0} us, p99 {:.0} us ({read_connections} connections)",
        read_elapsed.as_secs_f64(),
        total_reads as f64 / read_elapsed.as_secs_f64(),
        micros(read_p50),
        micros(read_p99)
    );
    println!(
        "  write_file submitted (202): {} in {:.2} s; per call p50 {:.0} us, p99 {:.0} us; {polls} result polls ({write_connections} agent connections)",
        submits.len(),
        write_elapsed.as_secs_f64(),
        micros(submit_p50),
        micros(submit_p99)
    );
    println!(
        "  decided: {} ({approved} approved, {denied} denied) = {:.0} decisions/s by {} racing approvers ({} and {} won; {listings} listings, {approver_connections} connections)",
        approved + denied,
        (approved + denied) as f64 / write_elapsed.as_secs_f64(),
        APPROVERS.len(),
        by_approver[0],
        by_approver[1]
    );
    println!(
        "  409 already_decided: {}; lost: {lost}; decided twice: {double}; results answered 200 before final: {}",
        shared.conflicts.load(Ordering::Relaxed),
        premature.len()
    );
    println!(
        "  decision -> result seen by the agent (polling every {} ms): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({seen_before_answer} seen before the decide answer)",
        POLL.as_millis(),
        millis(latency_p50),
        millis(latency_p99),
        millis(latency_max)
    );
    // Anything the server said beyond its banner.
    let stderr: Vec<String> = server
        .stderr
        .lock()
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("airlock: approvals at "))
        .map(str::to_owned)
        .collect();
    if !stderr.is_empty() {
        println!("  server stderr:");
        for line in &stderr {
            println!("    {line}");
        }
    }
    let problems = problems.0.lock().unwrap();
    let first: Vec<String> = problems
        .iter()
        .take(10)
        .map(|problem| problem.chars().take(400).collect())
        .collect();
    assert!(
        problems.is_empty(),
        "{} problems, the first: {first:#?}",
        problems.len()
    );
}
