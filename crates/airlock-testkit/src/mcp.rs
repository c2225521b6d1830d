//! MCP clients: the official Python SDK behind `tests/mcp/client.py`, and a
//! raw JSON-RPC client of `airlock serve --stdio`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Workspace;
use crate::peers::tools_dir;

/// `tests/mcp/client.py` (the Python `mcp` SDK): one JSON command per line
/// in, one JSON answer out. Closed (then killed) when dropped.
pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Driver {
    /// The client with `args`, in `cwd`, as `user` (`AIRLOCK_USER`, which a
    /// stdio server it starts inherits).
    pub fn start(cwd: &Path, args: &[String], user: &str) -> Driver {
        Driver::start_with_env(cwd, args, user, &[])
    }

    /// [`Driver::start`] with extra environment variables (which a stdio
    /// server it starts inherits).
    pub fn start_with_env(cwd: &Path, args: &[String], user: &str, env: &[(&str, &str)]) -> Driver {
        let tools = tools_dir();
        let mut child = Command::new(tools.join("venv/bin/python"))
            .arg(crate::repo().join("tests/mcp/client.py"))
            .args(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .env("AIRLOCK_USER", user)
            .env("AIRLOCK_TOOLS", &tools)
            .env_remove("AIRLOCK_AUDIT_KEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python MCP client");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Driver {
            child,
            stdin,
            stdout,
        }
    }

    /// The client driving `airlock SERVE_ARGS` over stdio in `ws`.
    pub fn stdio(ws: &Workspace, client_args: &[&str], serve_args: &[&str]) -> Driver {
        let mut args: Vec<String> = client_args.iter().map(|s| s.to_string()).collect();
        args.push("--stdio".to_owned());
        args.push("--".to_owned());
        args.push(crate::bin().display().to_string());
        args.extend(serve_args.iter().map(|s| s.to_string()));
        Driver::start(ws.root(), &args, "tester")
    }

    /// The client's process id (the server it started over stdio is its
    /// child).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `command`; the answer must be `ok`.
    pub fn send(&mut self, command: Value) -> Value {
        let answer = self.send_any(command.clone());
        assert_eq!(answer["ok"], json!(true), "{command} -> {answer}");
        answer
    }

    /// The driver's answer, whether the command succeeded or not.
    pub fn send_any(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("write to the client");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read from the client");
        assert!(!line.is_empty(), "the client exited on {command}");
        serde_json::from_str(&line).expect("the client answers JSON")
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        let answer = self.send(json!({"op": "list_tools"}));
        answer["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.send(json!({"op": "call", "tool": tool, "args": args}))
    }

    /// How the client answers airlock's elicitations from now on.
    pub fn answer_elicitations(&mut self, action: &str, content: Value) {
        self.send(json!({"op": "set_elicit", "answer": {"action": action, "content": content}}));
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"op": "close"}));
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw JSON-RPC client of `airlock serve --stdio`, initialized.
pub struct RawStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    reader: BufReader<ChildStdout>,
}

impl RawStdio {
    /// `airlock serve --stdio ARGS` in `ws`, after `initialize` (protocol
    /// 2025-06-18) and `notifications/initialized`.
    pub fn start(ws: &Workspace, args: &[&str]) -> RawStdio {
        let mut all = vec!["serve", "--stdio"];
        all.extend_from_slice(args);
        let mut child = ws
            .command(&all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start airlock serve --stdio");
        let stdin = child.stdin.take();
        let reader = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut mcp = RawStdio {
            child,
            stdin,
            reader,
        };
        mcp.request(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}));
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one message (a line of its JSON).
    pub fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string());
    }

    /// Sends `line` as it is, with a newline.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").expect("write to the server");
        stdin.flush().expect("flush");
    }

    /// The next message the server writes.
    pub fn receive(&mut self) -> Value {
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).expect("read");
        assert!(read > 0, "the server closed its output");
        serde_json::from_str(&line).expect("the server writes JSON lines")
    }

    /// Sends `message` and returns the answer with its id (skipping
    /// notifications and requests of the server).
    pub fn request(&mut self, message: Value) -> Value {
        self.send(&message);
        loop {
            let answer = self.receive();
            if answer["id"] == message["id"] && answer.get("method").is_none() {
                return answer;
            }
        }
    }

    /// Closes standard input and waits for the server to end.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("wait for the server")
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
