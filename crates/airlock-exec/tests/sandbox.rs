//! The sandbox from the outside: what a command can and cannot do, tried
//! from inside commands (escapes included), and what a preview reports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_exec::{Cancel, Change, Output, Program, Run, Sandbox};

struct Fixture {
    /// How the command is confined, for the messages.
    mode: &'static str,
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    sandbox: Sandbox,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws").canonicalize().unwrap_or_else(|_| {
        std::fs::create_dir(dir.path().join("ws")).unwrap();
        dir.path().join("ws").canonicalize().unwrap()
    });
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(root.join(".airlock")).unwrap();
    std::fs::write(root.join(".airlock/secret"), "state").unwrap();
    std::fs::write(root.join("airlock.yaml"), "exec: {}\n").unwrap();
    std::fs::write(root.join("audit.jsonl"), "{\"seq\":1}\n").unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("b.txt"), "bee\n").unwrap();
    let sandbox = Sandbox::new(
        &root,
        &[root.join(".airlock"), root.join("audit.jsonl")],
        &[root.join("airlock.yaml")],
    )
    .unwrap();
    Fixture {
        mode: "landlock",
        _dir: dir,
        root,
        outside,
        sandbox,
    }
}

/// The same sandbox under Landlock, and with mounts alone (what a kernel
/// without Landlock gets): every escape must fail under both.
fn fixtures() -> [Fixture; 2] {
    let mut mounts = fixture();
    mounts.sandbox = mounts.sandbox.clone().without_landlock();
    mounts.mode = "mounts";
    [fixture(), mounts]
}

fn run_with(fixture: &Fixture, line: &str, edit: impl FnOnce(&mut Run)) -> Output {
    let mut run = Run {
        program: Program::Shell(line.to_owned()),
        cwd: fixture.root.clone(),
        env: vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())],
        stdin: Vec::new(),
        timeout: Duration::from_secs(20),
        max_output_bytes: 64 * 1024,
        network: false,
        max_processes: 256,
        max_memory_bytes: 1 << 30,
        cancel: Cancel::new(),
    };
    edit(&mut run);
    fixture.sandbox.run(&run).unwrap()
}

fn run(fixture: &Fixture, line: &str) -> Output {
    run_with(fixture, line, |_| {})
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_command_runs_with_its_output_exit_code_and_signal() {
    let fixture = fixture();
    let output = run(&fixture, "echo hi; echo oops >&2; exit 3");
    assert_eq!(text(&output.stdout), "hi\n");
    assert_eq!(text(&output.stderr), "oops\n");
    assert_eq!(output.exit_code, Some(3));
    assert_eq!(output.signal, None);
    assert!(!output.timed_out);

    let output = run(&fixture, "kill -TERM $$");
    assert_eq!(output.exit_code, None);
    assert_eq!(output.signal, Some(15));

    let output = run_with(&fixture, "", |run| {
        run.program = Program::Argv(vec!["cat".to_owned()]);
        run.stdin = b"fed in\n".to_vec();
    });
    assert_eq!(text(&output.stdout), "fed in\n");
}

#[test]
fn the_workspace_is_writable_and_nothing_else_is() {
    for fixture in fixtures() {
        let output = run(&fixture, "echo new > c.txt && mkdir -p d && echo x > d/e");
        assert_eq!(output.exit_code, Some(0), "{}", text(&output.stderr));
        assert_eq!(
            std::fs::read_to_string(fixture.root.join("c.txt")).unwrap(),
            "new\n"
        );
        assert_eq!(
            std::fs::read_to_string(fixture.root.join("d/e")).unwrap(),
            "x\n"
        );

        let outside = fixture.outside.join("escaped");
        for line in [
            format!("echo x > {}", outside.display()),
            format!("cp a.txt {}", outside.display()),
            "echo x > /etc/airlock-escape".to_owned(),
            "echo x > ../escaped".to_owned(),
        ] {
            let output = run(&fixture, &line);
            assert_ne!(
                output.exit_code,
                Some(0),
                "{}: {line} succeeded",
                fixture.mode
            );
        }
        assert!(!outside.exists());
        assert!(!Path::new("/etc/airlock-escape").exists());
        assert!(!fixture.root.parent().unwrap().join("escaped").exists());

        // Through a symlink in the workspace that leads out of it.
        std::os::unix::fs::symlink(&fixture.outside, fixture.root.join("link")).unwrap();
        let output = run(&fixture, "echo x > link/through");
        assert_ne!(output.exit_code, Some(0));
        assert!(!fixture.outside.join("through").exists());

        // Reading outside is allowed: the file system is read-only, not hidden.
        let output = run(&fixture, "cat /etc/hostname >/dev/null && echo read");
        assert_eq!(text(&output.stdout), "read\n");
    }
}

#[test]
fn the_state_dir_is_hidden_and_the_config_and_git_are_read_only() {
    for fixture in fixtures() {
        let output = run(&fixture, "ls -A .airlock; cat .airlock/secret audit.jsonl");
        assert_eq!(
            text(&output.stdout),
            "",
            "the state dir or audit log was readable"
        );
        assert_ne!(output.exit_code, Some(0));
        for line in [
            "echo x > .airlock/new",
            "rm -rf .airlock",
            "umount .airlock",
            "echo x >> airlock.yaml",
            "rm airlock.yaml",
            "echo x > .git/HEAD",
            "echo x > .git/config",
            "mount -t tmpfs none d",
            "echo x > audit.jsonl",
            "rm audit.jsonl",
        ] {
            let output = run(&fixture, line);
            assert_ne!(
                output.exit_code,
                Some(0),
                "{}: {line} succeeded",
                fixture.mode
            );
        }
        assert_eq!(
            std::fs::read_to_string(fixture.root.join(".airlock/secret")).unwrap(),
            "state"
        );
        assert!(!fixture.root.join(".airlock/new").exists());
        assert_eq!(
            std::fs::read_to_string(fixture.root.join("audit.jsonl")).unwrap(),
            "{\"seq\":1}\n"
        );
        assert_eq!(
            std::fs::read_to_string(fixture.root.join("airlock.yaml")).unwrap(),
            "exec: {}\n"
        );
        assert_eq!(
            std::fs::read_to_string(fixture.root.join(".git/HEAD")).unwrap(),
            "ref: refs/heads/main\n"
        );
        // Reading the config and git is fine.
        let output = run(&fixture, "cat airlock.yaml .git/HEAD");
        assert_eq!(text(&output.stdout), "exec: {}\nref: refs/heads/main\n");
    }
}

#[test]
fn no_capability_no_inherited_environment_no_network_unless_allowed() {
    for fixture in fixtures() {
        let output = run(
            &fixture,
            "grep CapEff /proc/self/status; echo ${HOME:-no-home}",
        );
        assert_eq!(text(&output.stdout), "CapEff:\t0000000000000000\nno-home\n");

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let line = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
        let output = run(&fixture, &line);
        assert_eq!(text(&output.stdout), "", "connected without network");
        assert_ne!(output.exit_code, Some(0));

        let accepted = std::thread::spawn(move || listener.accept().is_ok());
        let output = run_with(&fixture, &line, |run| run.network = true);
        assert_eq!(
            text(&output.stdout),
            "connected\n",
            "{}",
            text(&output.stderr)
        );
        assert!(accepted.join().unwrap());
    }
}

#[test]
fn a_command_past_its_timeout_is_killed_with_everything_it_started() {
    for fixture in fixtures() {
        // A job that leaves the process group keeps the output pipe open: the
        // run can only end if it was killed too.
        let output = run_with(&fixture, "setsid sleep 300 & sleep 300", |run| {
            run.timeout = Duration::from_millis(500);
        });
        assert!(output.timed_out);
        assert_eq!(output.signal, Some(9));
        assert!(
            output.duration < Duration::from_secs(30),
            "{:?}",
            output.duration
        );
    }
}

#[test]
fn output_is_kept_up_to_the_limit_and_a_fork_bomb_is_contained() {
    for fixture in fixtures() {
        let output = run_with(
            &fixture,
            "head -c 5000000 /dev/zero; echo done >&2",
            |run| {
                run.max_output_bytes = 1000;
            },
        );
        assert_eq!(output.stdout.len(), 1000);
        assert!(output.truncated_stdout);
        assert!(!output.truncated_stderr);
        assert_eq!(text(&output.stderr), "done\n");
        assert_eq!(output.exit_code, Some(0));

        let output = run_with(
            &fixture,
            "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived",
            |run| {
                run.timeout = Duration::from_secs(5);
                run.max_processes = 64;
            },
        );
        assert!(output.duration < Duration::from_secs(60));
    }
}

#[test]
fn a_preview_reports_the_changes_and_leaves_the_workspace_as_it_was() {
    for fixture in fixtures() {
        let line = "sed -i s/one/two/ a.txt && rm b.txt && echo new > c.txt && mkdir d && echo x > d/e \
                && touch gone && rm gone && mv c.txt moved.txt && cat a.txt";
        let preview = fixture
            .sandbox
            .preview(&Run {
                program: Program::Shell(line.to_owned()),
                cwd: fixture.root.clone(),
                env: vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())],
                stdin: Vec::new(),
                timeout: Duration::from_secs(20),
                max_output_bytes: 4096,
                network: false,
                max_processes: 256,
                max_memory_bytes: 1 << 30,
                cancel: Cancel::new(),
            })
            .unwrap();
        assert_eq!(
            preview.output.exit_code,
            Some(0),
            "{}",
            text(&preview.output.stderr)
        );
        assert_eq!(text(&preview.output.stdout), "two\n");
        assert_eq!(
            preview.changes,
            vec![
                Change::Write {
                    path: "a.txt".into(),
                    content: b"two\n".to_vec(),
                    executable: false
                },
                Change::Delete {
                    path: "b.txt".into()
                },
                Change::Write {
                    path: "d/e".into(),
                    content: b"x\n".to_vec(),
                    executable: false
                },
                Change::Write {
                    path: "moved.txt".into(),
                    content: b"new\n".to_vec(),
                    executable: false
                },
            ]
        );
        // Nothing changed for real.
        assert_eq!(
            std::fs::read_to_string(fixture.root.join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(fixture.root.join("b.txt").exists());
        for absent in ["c.txt", "d", "moved.txt"] {
            assert!(!fixture.root.join(absent).exists(), "{absent}");
        }
    }
}

#[test]
fn host_settings_and_devices_the_command_may_not_change_stay_as_they_were() {
    for fixture in fixtures() {
        // The command's uid may map to the host's root: /proc and /sys must
        // not take its writes.
        let before = std::fs::read_to_string("/proc/sys/kernel/msgmax").unwrap();
        for line in [
            "echo 12345 > /proc/sys/kernel/msgmax",
            "echo 1 > /proc/sys/vm/drop_caches",
            "echo x > /sys/kernel/uevent_helper",
            "echo x > /dev/shm/airlock-escape",
        ] {
            let output = run(&fixture, line);
            assert_ne!(
                output.exit_code,
                Some(0),
                "{}: {line} succeeded",
                fixture.mode
            );
        }
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/msgmax").unwrap(),
            before
        );
        assert!(!Path::new("/dev/shm/airlock-escape").exists());
        // The usual devices still work.
        let output = run(
            &fixture,
            "echo x > /dev/null && head -c 4 /dev/urandom | wc -c",
        );
        assert_eq!(
            (output.exit_code, text(&output.stdout)),
            (Some(0), "4\n".to_owned()),
            "{}: {}",
            fixture.mode,
            text(&output.stderr)
        );
    }
}

#[test]
fn a_cancelled_run_is_killed_with_everything_it_started() {
    for fixture in fixtures() {
        let cancel = Cancel::new();
        let started = fixture.root.join("started");
        let waiter = {
            let cancel = cancel.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                // Cancelled once the command is under way (it says so with
                // a file in the workspace).
                while !started.exists() {
                    std::thread::yield_now();
                }
                cancel.cancel();
            })
        };
        let output = run_with(
            &fixture,
            "setsid sleep 300 & touch started; sleep 300",
            |run| {
                run.timeout = Duration::from_secs(600);
                run.cancel = cancel.clone();
            },
        );
        waiter.join().unwrap();
        assert!(output.cancelled, "{}", fixture.mode);
        assert!(!output.timed_out);
        assert_eq!(output.signal, Some(9));
        assert!(output.duration < Duration::from_secs(60));

        // Cancelled before it starts: it does not run on.
        let cancel = Cancel::new();
        cancel.cancel();
        let output = run_with(&fixture, "sleep 300", |run| run.cancel = cancel);
        assert!(output.cancelled);
        assert!(output.duration < Duration::from_secs(60));
    }
}

#[test]
fn a_run_past_its_memory_limit_fails_or_is_killed() {
    let Ok(python) = which_python() else {
        panic!("python3 is needed for this test (CI installs it)");
    };
    for fixture in fixtures() {
        let line = format!(
            "{python} -c 'x = bytearray(768 << 20); x[::4096] = b\"a\" * len(x[::4096]); print(\"allocated\")'"
        );
        let output = run_with(&fixture, &line, |run| run.max_memory_bytes = 256 << 20);
        assert_ne!(output.exit_code, Some(0), "{}", fixture.mode);
        assert_eq!(text(&output.stdout), "");
        // Under the limit the same program runs.
        let output = run_with(&fixture, &line, |run| run.max_memory_bytes = 2 << 30);
        assert_eq!(
            text(&output.stdout),
            "allocated\n",
            "{}: {}",
            fixture.mode,
            text(&output.stderr)
        );
    }
}

fn which_python() -> Result<String, ()> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .map(str::to_owned)
        .ok_or(())
}

#[test]
fn git_is_read_only_in_a_run_and_a_preview_reports_its_changes_apart() {
    for fixture in fixtures() {
        let git = |args: &str| {
            let status = std::process::Command::new("bash")
                .args(["-c", &format!("git {args}")])
                .current_dir(&fixture.root)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .output()
                .unwrap();
            assert!(status.status.success(), "git {args}: {status:?}");
        };
        std::fs::remove_dir_all(fixture.root.join(".git")).unwrap();
        git("init -q");
        git("add a.txt b.txt");
        git("commit -qm init");
        let index = std::fs::read(fixture.root.join(".git/index")).unwrap();

        // For real, git cannot write its index.
        let output = run(&fixture, "git mv a.txt moved.txt");
        assert_ne!(output.exit_code, Some(0), "{}", fixture.mode);
        assert!(fixture.root.join("a.txt").exists());

        // Previewed, it can (in the overlay): the files it moves are
        // changes, git's own files one change apart, never applied.
        let mut run = Run {
            program: Program::Shell("git mv a.txt moved.txt".to_owned()),
            cwd: fixture.root.clone(),
            env: vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())],
            stdin: Vec::new(),
            timeout: Duration::from_secs(20),
            max_output_bytes: 4096,
            network: false,
            max_processes: 256,
            max_memory_bytes: 1 << 30,
            cancel: Cancel::new(),
        };
        let preview = fixture.sandbox.preview(&run).unwrap();
        assert_eq!(
            preview.output.exit_code,
            Some(0),
            "{}: {}",
            fixture.mode,
            text(&preview.output.stderr)
        );
        assert_eq!(
            preview.changes,
            vec![
                Change::Unsupported {
                    path: ".git".into(),
                    what: "changes to git's own files (its index, objects and refs), which are never applied"
                },
                Change::Delete {
                    path: "a.txt".into()
                },
                Change::Write {
                    path: "moved.txt".into(),
                    content: b"one\n".to_vec(),
                    executable: false
                },
            ]
        );
        assert_eq!(
            std::fs::read(fixture.root.join(".git/index")).unwrap(),
            index
        );
        run.program = Program::Shell("echo x > .git/config".to_owned());
        let preview = fixture.sandbox.preview(&run).unwrap();
        assert_eq!(preview.changes.len(), 1);
        assert_eq!(preview.changes[0].path(), Path::new(".git"));
    }
}
