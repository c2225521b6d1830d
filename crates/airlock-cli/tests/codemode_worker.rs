//! The code-mode worker process: it runs scripts like the in-process engine
//! and holds nothing but its channel, under seccomp, with no new privileges.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_codemode::{
    End, EngineLimits, FailCode, Host, HumanClock, Isolation, Reply, Settled, Start,
};

/// Answers `echo`; on `look`, reads the worker's own /proc entries first.
#[derive(Default)]
struct Probe {
    seen: Mutex<Option<(String, Vec<String>)>>,
}

fn worker_pid() -> Option<u32> {
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()? {
        let entry = entry.ok()?;
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_default();
        let ppid: u32 = after
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == me && stat.contains("(airlock)") {
            return Some(pid);
        }
    }
    None
}

impl Host for Probe {
    fn call(&self, _seq: u32, tool: &str, args: &str, _human: &HumanClock) -> Reply {
        if tool == "look" {
            let pid = worker_pid().expect("the worker");
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            *self.seen.lock().unwrap() = Some((status, fds));
        }
        Reply::Settle {
            kind: Settled::Ok,
            payload: args.to_owned(),
        }
    }
}

fn worker() -> Isolation {
    Isolation::Worker {
        program: PathBuf::from(env!("CARGO_BIN_EXE_airlock")),
    }
}

fn start(code: &str) -> Start {
    Start {
        code: code.to_owned(),
        tools: vec!["echo".to_owned(), "look".to_owned()],
        limits: EngineLimits {
            cpu_ms: 1000,
            memory_bytes: 32 << 20,
            stack_bytes: 1 << 20,
            max_result_bytes: 1 << 20,
            max_console_bytes: 1 << 16,
            max_calls: 64,
            max_in_flight: 8,
        },
        seed: 7,
        now_ms: 0,
    }
}

#[test]
fn the_worker_runs_a_script_confined() {
    let probe = Arc::new(Probe::default());
    let outcome = airlock_codemode::driver::run(
        &worker(),
        start(
            "const r = await codemode.look({a: 1}); console.log('hi', r.a); [r, new Date().getHours(), 'é'.normalize('NFD').length]",
        ),
        Duration::from_secs(20),
        &*probe,
    );
    assert_eq!(outcome.end, End::Done(r#"[{"a":1},0,2]"#.to_owned()));
    assert_eq!(outcome.logs, vec![("log".to_owned(), "hi 1".to_owned())]);
    let (status, mut fds) = probe.seen.lock().unwrap().clone().expect("looked");
    fds.sort();
    assert_eq!(fds, ["0", "1", "2"]);
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1");
}

#[test]
fn the_worker_ends_runaway_scripts_with_their_codes() {
    let run = |code: &str| {
        airlock_codemode::driver::run(
            &worker(),
            start(code),
            Duration::from_secs(20),
            &Probe::default(),
        )
        .end
    };
    let code_of = |end: End| match end {
        End::Failed(failure) => failure.code,
        other => panic!("{other:?}"),
    };
    assert_eq!(code_of(run("for (;;) {}")), FailCode::ScriptTimeout);
    assert_eq!(
        code_of(run(
            "let a = []; for (;;) a.push('x'.repeat(4096) + a.length)"
        )),
        FailCode::ScriptMemory
    );
    assert_eq!(
        code_of(run("function f() { return f() + 1 } f()")),
        FailCode::ScriptLimit
    );
    // Wall time, with the CPU idle: a call the host never answers in time.
    let slow = airlock_codemode::driver::run(
        &worker(),
        start("for (;;) {}"),
        Duration::from_millis(300),
        &Probe::default(),
    );
    assert!(
        matches!(slow.end, End::Failed(ref f) if f.code == FailCode::ScriptTimeout),
        "{slow:?}"
    );
}
