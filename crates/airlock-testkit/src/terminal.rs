//! A program on a real pseudo-terminal, read and typed at as a person would.

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

/// The terminal side of a program started with [`Terminal::spawn`].
pub struct Terminal {
    writer: File,
    output: Receiver<Vec<u8>>,
    seen: String,
}

impl Terminal {
    /// Starts `command` with its standard input, output and error on a new
    /// pseudo-terminal.
    pub fn spawn(mut command: Command) -> (Child, Terminal) {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .expect("open a pseudo-terminal");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let slave_name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(slave_name.to_str().expect("a UTF-8 terminal name"))
            .expect("open the terminal");
        let child = command
            .stdin(slave.try_clone().expect("clone the terminal"))
            .stdout(slave.try_clone().expect("clone the terminal"))
            .stderr(slave)
            .spawn()
            .expect("start the program");
        let master = File::from(master);
        let mut reader = master.try_clone().expect("clone the terminal");
        let (sender, output) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 || sender.send(buffer[..read].to_vec()).is_err() {
                    break;
                }
            }
        });
        (
            child,
            Terminal {
                writer: master,
                output,
                seen: String::new(),
            },
        )
    }

    /// Waits until the terminal shows `needle` after what was consumed
    /// already; returns what it showed up to and with it.
    pub fn expect(&mut self, needle: &str) -> String {
        self.expect_any(&[needle]).1
    }

    /// Waits until the terminal shows one of `needles` after what was
    /// consumed already: which one came first, and what the terminal
    /// showed up to and with it.
    pub fn expect_any(&mut self, needles: &[&str]) -> (usize, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let first = needles
                .iter()
                .enumerate()
                .filter_map(|(which, needle)| {
                    self.seen.find(needle).map(|at| (at, which, needle.len()))
                })
                .min();
            if let Some((at, which, length)) = first {
                let upto = at + length;
                let consumed: String = self.seen[..upto].to_owned();
                self.seen.drain(..upto);
                return (which, consumed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for one of {needles:?}; terminal shows:\n{}",
                self.seen
            );
            if let Ok(chunk) = self.output.recv_timeout(left) {
                self.seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        }
    }

    /// Everything the terminal shows after what was consumed already, up
    /// to the program's end (when no one holds the terminal any more), with
    /// the terminal's `\r\n` line ends read as `\n`.
    pub fn expect_end(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the terminal stayed open; it shows:\n{}",
                self.seen
            );
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        std::mem::take(&mut self.seen).replace("\r\n", "\n")
    }

    /// Types `text`.
    pub fn send(&mut self, text: &str) {
        self.writer
            .write_all(text.as_bytes())
            .expect("write to the terminal");
        self.writer.flush().expect("flush the terminal");
    }
}
