//! `airlock serve --http` on a port the kernel picks, and an HTTP/1.1 client
//! of it on real sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::Value;

use crate::Workspace;

/// A running `airlock serve --http 127.0.0.1:0 …` in a workspace it does
/// not own (killed when dropped). The address comes from its banner: the
/// port is bound once, by the server.
pub struct Serving {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Everything the server wrote to stderr up to its approvals line.
    pub banner: String,
}

impl Serving {
    /// `airlock serve --http 127.0.0.1:0 EXTRA…` in `ws`, once it listens.
    pub fn start(ws: &Workspace, extra: &[&str]) -> Serving {
        Serving::start_on(ws, "127.0.0.1:0", extra)
    }

    /// `airlock serve --http ADDR EXTRA…` in `ws`, once it listens.
    pub fn start_on(ws: &Workspace, addr: &str, extra: &[&str]) -> Serving {
        let mut args = vec!["serve", "--http", addr];
        args.extend_from_slice(extra);
        Serving::start_command(ws, &args)
    }

    /// `airlock ARGS` (a `serve` or `wrap` with `--http`) in `ws`, once it
    /// listens.
    pub fn start_command(ws: &Workspace, args: &[&str]) -> Serving {
        Serving::start_command_with_env(ws, args, &[])
    }

    /// [`Serving::start_command`] with `env` set for this process only.
    pub fn start_command_with_env(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Serving {
        let mut child = ws
            .command(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start airlock serve");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
        let mut banner = String::new();
        let addr = loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).unwrap_or(0);
            assert!(read > 0, "serve exited: {banner}");
            banner.push_str(&line);
            if let Some(rest) = line.trim().strip_prefix("airlock: serving MCP at http://") {
                break rest.trim_end_matches("/mcp").to_owned();
            }
        };
        // The approvals line (with the login URL when no tokens are
        // configured) follows at once.
        let mut line = String::new();
        if stderr.read_line(&mut line).is_ok() {
            banner.push_str(&line);
        }
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = stderr.read_to_string(&mut sink);
        });
        Serving {
            child,
            addr,
            banner,
        }
    }

    /// Kills the server at once (SIGKILL): no clean shutdown, as a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the server to stop (SIGTERM, as a service manager does) and
    /// waits for it to exit; its exit code.
    pub fn stop(&mut self) -> Option<i32> {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        self.child.wait().ok().and_then(|status| status.code())
    }

    /// The MCP endpoint: `http://<addr>/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`Serving`] in a workspace of its own, with an HTTP client of it.
pub struct Server {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// Everything the server wrote to stderr up to its approvals line.
    pub banner: String,
    serving: Serving,
    pub ws: Workspace,
}

impl Server {
    /// In a new workspace whose configuration is `config`, holding `a.txt`.
    pub fn start(config: &str) -> Server {
        Server::start_with(config, &[])
    }

    /// [`Server::start`] with `extra` arguments to `serve`.
    pub fn start_with(config: &str, extra: &[&str]) -> Server {
        let ws = Workspace::new(config);
        ws.write("a.txt", "hello\n");
        Server::start_in(ws, extra)
    }

    /// `airlock serve --http 127.0.0.1:0 EXTRA…` in `ws`.
    pub fn start_in(ws: Workspace, extra: &[&str]) -> Server {
        let serving = Serving::start(&ws, extra);
        Server {
            addr: serving.addr.clone(),
            banner: serving.banner.clone(),
            serving,
            ws,
        }
    }

    /// Moves the server's clock `ms` forward.
    pub fn advance(&self, ms: u64) {
        self.ws.advance(ms);
    }

    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.ws.path(rel)
    }

    /// One JSON request: the status and the body (`Value::String` when it is
    /// not JSON).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> (u16, Value) {
        request(&self.addr, method, path, token, body)
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        self.request("GET", path, token, b"")
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
        self.request("POST", path, token, body.to_string().as_bytes())
    }

    /// `GET /hitl/events` as `token`: each event's name and data, as they come.
    pub fn subscribe(&self, token: &str) -> Receiver<(String, Value)> {
        self.subscribe_after(token, None)
    }

    /// [`Server::subscribe`] with `Last-Event-ID: last`: the events after it.
    /// Returns once the server has answered, so what happens after it is seen.
    pub fn subscribe_after(&self, token: &str, last: Option<&str>) -> Receiver<(String, Value)> {
        subscribe(&self.addr, token, last)
    }
}

/// `GET /hitl/events` at `addr` as `token` (after `last`, when given): each
/// event's name and data, as they come. Returns once the server has
/// answered, so what happens after it is seen.
pub fn subscribe(addr: &str, token: &str, last: Option<&str>) -> Receiver<(String, Value)> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let resume = last
        .map(|last| format!("Last-Event-ID: {last}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET /hitl/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n{resume}\r\n",
        addr
    )
    .expect("send the request");
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    while reader.read_line(&mut head).unwrap_or(0) > 0 && !head.ends_with("\r\n\r\n") {}
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        let mut event = String::new();
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            let text = line.trim_end().to_owned();
            line.clear();
            if let Some(name) = text.strip_prefix("event: ") {
                event = name.to_owned();
            } else if let Some(data) = text.strip_prefix("data: ") {
                let value = serde_json::from_str(data).unwrap_or(Value::Null);
                if sender.send((event.clone(), value)).is_err() {
                    return;
                }
            }
        }
    });
    receiver
}

impl Server {
    /// The server process, to stop it early.
    pub fn serving(&self) -> &Serving {
        &self.serving
    }
}

/// The next server-sent event, failing after 10 s.
pub fn next_event(events: &Receiver<(String, Value)>) -> (String, Value) {
    events
        .recv_timeout(Duration::from_secs(10))
        .expect("no event within 10 s")
}

/// One JSON request to `addr`: the status and the body (`Value::String`
/// when it is not JSON).
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let mut headers = "Content-Type: application/json\r\n".to_owned();
    if let Some(token) = token {
        headers.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let (status, _, body) = exchange(addr, method, path, &headers, body);
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, value)
}

/// One HTTP/1.1 exchange (`headers` are whole lines): the status, the
/// response head and the body (de-chunked).
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set a read timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("send the head");
    // A body over the limit may be refused before it is all sent.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head.to_owned(), body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || size > rest.len() {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A listener on a port of its own that accepts every connection and closes
/// it at once: a webhook that always fails, without freeing a port another
/// process could take. Its URL is `http://<addr>/hook`; it stops with the
/// test process.
pub fn refusing_hook() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    format!("http://{addr}/hook")
}

/// A webhook receiver on loopback: each POST's JSON body goes to the
/// channel; the first `fail_first` requests are answered 503.
pub fn hook_receiver(fail_first: usize) -> (String, std::sync::mpsc::Receiver<Value>) {
    let (url, receiver, release) = held_hook_receiver(fail_first);
    release.send(()).unwrap();
    (url, receiver)
}

/// [`hook_receiver`] that answers nothing until the sender it returns is
/// sent `()`.
pub fn held_hook_receiver(
    fail_first: usize,
) -> (
    String,
    std::sync::mpsc::Receiver<Value>,
    std::sync::mpsc::Sender<()>,
) {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream);
            let (_, body) = read_request(&mut reader);
            if n == 0 && held.recv().is_err() {
                return;
            }
            let status = if n < fail_first {
                "503 Service Unavailable"
            } else {
                "200 OK"
            };
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            if n >= fail_first {
                let _ = sender.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
            }
        }
    });
    (url, receiver, release)
}

/// An OTLP/HTTP collector stand-in on loopback: each POST's path and JSON
/// body go to the channel, answered 200 `{}` (what a collector answers
/// when it took everything).
pub fn otlp_collector() -> (String, std::sync::mpsc::Receiver<(String, Value)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let sender = sender.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let (path, body) = read_request(&mut reader);
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                );
                let _ = sender.send((path, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            });
        }
    });
    (url, receiver)
}

/// One HTTP/1.1 request's path and body (by its `Content-Length`).
fn read_request(reader: &mut BufReader<std::net::TcpStream>) -> (String, Vec<u8>) {
    let mut request_line = String::new();
    let _ = reader.read_line(&mut request_line);
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_owned();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    (path, body)
}
