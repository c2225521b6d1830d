//! The MCP face, end to end over stdio, with figures (DESIGN §12):
//! - an allowed `read_file` through `airlock serve --stdio` (target p50 <= 300 us);
//! - a proxied upstream call against the same upstream called directly, side by
//!   side in one run, over stdio (`serve --stdio` with the server as an
//!   upstream) and over streamable HTTP (`wrap --http` in front of the server
//!   served over HTTP, one keep-alive connection each), the same client code
//!   for both (target: added p50 <= 100 us);
//! - beside them, the floor any relay pays on this machine: the same upstream
//!   behind a relay that does nothing but copy bytes (`cat | server | cat`
//!   over stdio; two threads copying each way of a TCP connection over HTTP),
//!   so airlock's own cost is the part over that relay's;
//! - `serve --stdio` ready to answer `initialize` (<= 50 ms) and its idle RSS
//!   (<= 30 MB).
//!
//! `cargo bench -p airlock-cli --bench mcp` prints the figures (release build;
//! the upstream is server-everything from `scripts/mcp-test-env.sh`). Under
//! `cargo test --benches` it runs a few iterations only, to prove it works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Peer {
    fn spawn(command: &mut Command) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Peer {
            child,
            stdin,
            stdout,
            next: 1,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "peer exited");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == json!(id) {
                return value;
            }
        }
    }

    fn initialize(&mut self) -> Value {
        let answer = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        answer
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
        assert!(answer["result"].is_object(), "{answer}");
        answer
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A streamable-HTTP MCP client on one keep-alive HTTP/1.1 connection: a
/// POST per message, the answer read from a JSON body or an SSE stream
/// (chunked or not).
struct HttpPeer {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    authority: String,
    path: String,
    session: Option<String>,
    next: u64,
    /// The standalone GET stream, open as SDK clients keep it.
    _listening: Option<TcpStream>,
}

impl HttpPeer {
    fn connect(url: &str) -> HttpPeer {
        let rest = url.strip_prefix("http://").unwrap();
        let (authority, path) = rest.split_at(rest.find('/').unwrap());
        let stream = TcpStream::connect(authority).unwrap();
        stream.set_nodelay(true).unwrap();
        HttpPeer {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            authority: authority.to_owned(),
            path: path.to_owned(),
            session: None,
            next: 1,
            _listening: None,
        }
    }

    /// POSTs `message`; the JSON-RPC messages of the answer.
    fn post(&mut self, message: &Value) -> Vec<Value> {
        let body = message.to_string();
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
             Content-Length: {}\r\n",
            self.path,
            self.authority,
            body.len()
        );
        if let Some(session) = &self.session {
            head.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
        }
        head.push_str("\r\n");
        self.writer.write_all(head.as_bytes()).unwrap();
        self.writer.write_all(body.as_bytes()).unwrap();
        self.writer.flush().unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 2"), "{line}");
        let (mut length, mut chunked, mut sse) = (None, false, false);
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap();
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = Some(value.parse::<usize>().unwrap()),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "content-type" => sse = value.starts_with("text/event-stream"),
                "mcp-session-id" => self.session = Some(value.to_owned()),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).unwrap();
                let size = usize::from_str_radix(line.trim(), 16).unwrap();
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).unwrap();
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(length) = length {
            body.resize(length, 0);
            self.reader.read_exact(&mut body).unwrap();
        }
        let text = String::from_utf8(body).unwrap();
        if sse {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str(data.trim()).ok())
                .collect()
        } else if text.trim().is_empty() {
            Vec::new()
        } else {
            vec![serde_json::from_str(&text).unwrap()]
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let answers =
            self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        answers
            .into_iter()
            .find(|answer| answer["id"] == json!(id))
            .expect("an answer")
    }

    fn initialize(&mut self) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        self.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        // The SDK clients open the session's GET stream once initialized;
        // whatever comes on it is read and dropped.
        let mut listening = TcpStream::connect(&self.authority).unwrap();
        write!(
            listening,
            "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
             MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: {}\r\n\r\n",
            self.path,
            self.authority,
            self.session.as_deref().unwrap_or_default()
        )
        .unwrap();
        let mut reader = BufReader::new(listening.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "GET stream: {line}");
        std::thread::spawn(move || {
            let mut sink = [0; 4096];
            while matches!(reader.read(&mut sink), Ok(read) if read > 0) {}
        });
        self._listening = Some(listening);
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
        assert!(answer["result"].is_object(), "{answer}");
        answer
    }
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything over streamable HTTP on a free port; its URL.
fn everything_http(everything: &Path) -> (Killed, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("node")
        .arg(everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "server-everything did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), format!("http://127.0.0.1:{port}/mcp"))
}

/// `airlock wrap --http` in front of `url`; its MCP URL.
fn wrap_http(workspace: &Path, url: &str) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "wrap",
            "--http",
            "127.0.0.1:0",
            "--name",
            "every",
            "--url",
            url,
        ])
        .current_dir(workspace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let served = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "wrap exited");
        if let Some(rest) = line.trim().strip_prefix("airlock: serving MCP at ") {
            break rest.to_owned();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = stderr.read_to_string(&mut sink);
    });
    (Killed(child), served)
}

/// The median, over the iterations, of what one call took through the
/// gateway minus what the call next to it took directly (in microseconds):
/// each pair ran back to back, so a slow spell of the upstream counts on
/// both sides.
fn paired_p50(through: &[Duration], direct: &[Duration]) -> f64 {
    let mut deltas: Vec<f64> = through
        .iter()
        .zip(direct)
        .map(|(through, direct)| micros(*through) - micros(*direct))
        .collect();
    deltas.sort_by(f64::total_cmp);
    deltas[deltas.len() / 2]
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn airlock(workspace: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
    command.args(["serve", "--stdio"]).current_dir(workspace);
    command
}

fn tools_dir() -> PathBuf {
    match std::env::var_os("AIRLOCK_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/airlock/tools"),
    }
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let iterations = if full { 3000 } else { 20 };
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    let text: String = (0..100)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::write(root.join("a.txt"), &text).unwrap();
    let everything =
        tools_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    std::fs::write(
        root.join("airlock.yaml"),
        format!(
            "upstreams:\n  - name: every\n    command: node\n    args: [{:?}, stdio]\n\
             security:\n  hitl:\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n\
             default_profile: bench\nprofiles:\n  bench: {{}}\n",
            everything.display().to_string()
        ),
    )
    .unwrap();

    // Ready: spawn to the initialize answer (no upstream: that is the upstream's
    // own start-up).
    // A workspace on the defaults: only its state dir.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir(bare.path().join(".airlock")).unwrap();
    let mut ready = Vec::new();
    for _ in 0..if full { 20 } else { 3 } {
        let started = Instant::now();
        let mut peer = Peer::spawn(&mut airlock(bare.path()));
        peer.initialize();
        ready.push(started.elapsed());
    }
    let mut idle = Peer::spawn(&mut airlock(bare.path()));
    idle.initialize();
    std::thread::sleep(Duration::from_millis(500));
    let rss = idle.rss_kib();
    drop(idle);

    let mut served = Peer::spawn(&mut airlock(root));
    served.initialize();
    let mut reads = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        served.call("read_file", json!({"path": "a.txt", "end_line": 20}));
        reads.push(started.elapsed());
    }

    // Side by side: the upstream directly, behind a do-nothing relay, and
    // through airlock, in turn.
    let mut direct = Peer::spawn(Command::new("node").arg(&everything).arg("stdio"));
    direct.initialize();
    let mut relayed = Peer::spawn(
        Command::new("sh")
            .arg("-c")
            .arg("cat | node \"$0\" stdio | cat")
            .arg(&everything),
    );
    relayed.initialize();
    let mut direct_times = Vec::with_capacity(iterations);
    let mut relay_times = Vec::with_capacity(iterations);
    let mut proxied_times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let args = json!({"message": format!("ping {i}")});
        let started = Instant::now();
        direct.call("echo", args.clone());
        direct_times.push(started.elapsed());
        let started = Instant::now();
        relayed.call("echo", args.clone());
        relay_times.push(started.elapsed());
        let started = Instant::now();
        served.call("every__echo", args);
        proxied_times.push(started.elapsed());
    }

    // Over streamable HTTP: the server served over HTTP, directly and
    // behind `wrap --http`, the same client code, alternating.
    let (_http_server, http_url) = everything_http(&everything);
    let wrap_workspace = tempfile::tempdir().unwrap();
    std::fs::write(
        wrap_workspace.path().join("airlock.yaml"),
        "security:\n  hitl:\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n",
    )
    .unwrap();
    let (_wrap, wrap_url) = wrap_http(wrap_workspace.path(), &http_url);
    let mut direct_http = HttpPeer::connect(&http_url);
    direct_http.initialize();
    let relay_url = tcp_relay(&http_url);
    let mut relayed_http = HttpPeer::connect(&relay_url);
    relayed_http.initialize();
    let mut wrapped_http = HttpPeer::connect(&wrap_url);
    wrapped_http.initialize();
    let mut direct_http_times = Vec::with_capacity(iterations);
    let mut relay_http_times = Vec::with_capacity(iterations);
    let mut wrapped_http_times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let args = json!({"message": format!("ping {i}")});
        let started = Instant::now();
        direct_http.call("echo", args.clone());
        direct_http_times.push(started.elapsed());
        let started = Instant::now();
        relayed_http.call("echo", args.clone());
        relay_http_times.push(started.elapsed());
        let started = Instant::now();
        wrapped_http.call("echo", args);
        wrapped_http_times.push(started.elapsed());
    }

    let ready_p50 = percentile(&mut ready, 0.5);
    let read_p50 = percentile(&mut reads, 0.5);
    let read_p99 = percentile(&mut reads, 0.99);
    let paired = paired_p50(&proxied_times, &direct_times);
    let paired_over_relay = paired_p50(&proxied_times, &relay_times);
    let direct_p50 = percentile(&mut direct_times, 0.5);
    let proxied_p50 = percentile(&mut proxied_times, 0.5);
    let proxied_p99 = percentile(&mut proxied_times, 0.99);
    let direct_p99 = percentile(&mut direct_times, 0.99);
    let relay_p50 = percentile(&mut relay_times, 0.5);
    println!(
        "mcp stdio ({iterations} calls each{})",
        if full { "" } else { ", test mode" }
    );
    println!(
        "  serve --stdio ready (initialize answered): p50 {:.1} ms",
        micros(ready_p50) / 1000.0
    );
    println!("  idle RSS: {:.1} MB", rss as f64 / 1024.0);
    println!(
        "  read_file allowed, end to end: p50 {:.0} us, p99 {:.0} us",
        micros(read_p50),
        micros(read_p99)
    );
    println!(
        "  upstream echo direct: p50 {:.0} us, p99 {:.0} us; through airlock: p50 {:.0} us, p99 {:.0} us",
        micros(direct_p50),
        micros(direct_p99),
        micros(proxied_p50),
        micros(proxied_p99)
    );
    println!(
        "  added by airlock: p50 {:.0} us, p99 {:.0} us (ratio {:.2}x)",
        micros(proxied_p50) - micros(direct_p50),
        micros(proxied_p99) - micros(direct_p99),
        proxied_p50.as_secs_f64() / direct_p50.as_secs_f64()
    );
    println!(
        "  a do-nothing relay (cat | server | cat): p50 {:.0} us, adds p50 {:.0} us; airlock over that relay: p50 {:.0} us",
        micros(relay_p50),
        micros(relay_p50) - micros(direct_p50),
        micros(proxied_p50) - micros(relay_p50)
    );
    println!(
        "  paired, call by call (through airlock minus the call beside it): p50 {paired:.0} us over direct, {paired_over_relay:.0} us over the relay"
    );
    let http_paired = paired_p50(&wrapped_http_times, &direct_http_times);
    let http_paired_over_relay = paired_p50(&wrapped_http_times, &relay_http_times);
    let http_direct_p50 = percentile(&mut direct_http_times, 0.5);
    let http_direct_p99 = percentile(&mut direct_http_times, 0.99);
    let http_wrapped_p50 = percentile(&mut wrapped_http_times, 0.5);
    let http_wrapped_p99 = percentile(&mut wrapped_http_times, 0.99);
    let http_relay_p50 = percentile(&mut relay_http_times, 0.5);
    println!(
        "mcp streamable HTTP ({iterations} calls each{})",
        if full { "" } else { ", test mode" }
    );
    println!(
        "  upstream echo direct: p50 {:.0} us, p99 {:.0} us; through wrap --http: p50 {:.0} us, p99 {:.0} us",
        micros(http_direct_p50),
        micros(http_direct_p99),
        micros(http_wrapped_p50),
        micros(http_wrapped_p99)
    );
    println!(
        "  added by airlock: p50 {:.0} us, p99 {:.0} us (ratio {:.2}x)",
        micros(http_wrapped_p50) - micros(http_direct_p50),
        micros(http_wrapped_p99) - micros(http_direct_p99),
        http_wrapped_p50.as_secs_f64() / http_direct_p50.as_secs_f64()
    );
    println!(
        "  a do-nothing TCP relay: p50 {:.0} us, adds p50 {:.0} us; airlock over that relay: p50 {:.0} us",
        micros(http_relay_p50),
        micros(http_relay_p50) - micros(http_direct_p50),
        micros(http_wrapped_p50) - micros(http_relay_p50)
    );
    println!(
        "  paired, call by call (through airlock minus the call beside it): p50 {http_paired:.0} us over direct, {http_paired_over_relay:.0} us over the relay"
    );
}

/// A relay in front of the server at `url` that only copies bytes, two
/// threads a connection (one each way); the URL to reach the server
/// through it.
fn tcp_relay(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let target = authority.to_owned();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(&target) else {
                continue;
            };
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                std::thread::spawn(move || {
                    let mut buffer = [0; 64 * 1024];
                    while let Ok(read) = from.read(&mut buffer) {
                        if read == 0 || to.write_all(&buffer[..read]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    format!("http://127.0.0.1:{port}{path}")
}
