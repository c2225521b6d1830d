//! Shipping the audit log to a SIEM (`audit.ship`, spec 000 phase 2): a
//! server sends every record, in order, to syslog (RFC 5424 over UDP, TCP
//! or TLS) and/or an HTTP endpoint (batches as a JSON array), from a cursor
//! the store keeps per target. The cursor moves only after a batch was
//! taken (written and flushed on a stream, 2xx over HTTP), so a restart
//! goes on where the last run stopped: nothing lost, nothing sent twice. A
//! server stopping finishes the batch it is sending. One process ships
//! each target at a time (a lease in the store), whichever instances run.
//!
//! Over UDP a datagram can be lost without anyone knowing: that is the
//! transport, and why TCP or TLS is what a SIEM should be given.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_broker::{AuditSource, Runtime};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::watch;

/// Records per batch.
const BATCH: usize = 500;
/// How often an idle shipper looks for new records.
const IDLE: Duration = Duration::from_millis(200);
/// How long a shipper's lease lasts; it renews it every round, and a send
/// takes at most [`SEND_WITHIN`], well inside it.
const LEASE_MS: u64 = 60_000;
/// The longest one batch's send may take.
const SEND_WITHIN: Duration = Duration::from_secs(20);
/// The wait after a failed send, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The shippers of a server; [`Shippers::stop`] lets them finish.
pub(crate) struct Shippers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Shippers {
    /// Asks every shipper to stop after the batch it is sending, and waits
    /// (at most `within`).
    pub(crate) async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(within, futures_join(self.tasks)).await;
    }
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

/// A target's transport.
#[derive(Clone)]
enum Target {
    Syslog {
        scheme: String,
        host: String,
        port: u16,
    },
    Http(String),
}

impl Target {
    /// The name its cursor and lease are kept under.
    fn key(&self) -> String {
        match self {
            Target::Syslog { scheme, host, port } => format!("syslog {scheme}://{host}:{port}"),
            Target::Http(url) => format!("http {url}"),
        }
    }
}

/// Starts a shipper for each configured target (none: nothing runs).
pub(crate) fn start(runtime: Arc<Runtime>) -> Shippers {
    let (stop, stopping) = watch::channel(false);
    let broker = runtime.broker();
    let ship = &broker.config().audit.ship;
    let mut targets = Vec::new();
    if let Some(url) = &ship.syslog
        && let Some((scheme, host, port)) = airlock_core::config::syslog_target(url)
    {
        targets.push(Target::Syslog {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port,
        });
    }
    if let Some(url) = &ship.http {
        targets.push(Target::Http(url.clone()));
    }
    let tasks = targets
        .into_iter()
        .map(|target| tokio::spawn(run(runtime.clone(), target, stopping.clone())))
        .collect();
    Shippers { stop, tasks }
}

/// This process, as a lease holder: its host, pid and a random part (two
/// containers can share a host name and a pid).
fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{}:{}:{}", host.trim(), std::process::id(), &random[..12])
}

/// `url` as it may be shown: without a user or password in it.
pub(crate) fn shown_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// A connection to a stream target, kept across batches.
enum Connection {
    None,
    Tcp(tokio::net::TcpStream),
    Tls(Box<airlock_net::TlsClientStream<tokio::net::TcpStream>>),
}

async fn run(runtime: Arc<Runtime>, target: Target, mut stopping: watch::Receiver<bool>) {
    let key = target.key();
    let shown = shown_url(&key.replace("syslog ", "").replace("http ", ""));
    let lease = format!("ship {key}");
    let me = holder();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let pid = std::process::id();
    let mut connection = Connection::None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if *stopping.borrow() {
            break;
        }
        let broker = runtime.broker();
        let round = {
            let (broker, key, lease, me) = (broker.clone(), key.clone(), lease.clone(), me.clone());
            tokio::task::spawn_blocking(move || {
                if !broker.try_lease(&lease, &me, LEASE_MS)? {
                    return Ok(None);
                }
                let (mut after, mut position) = broker.ship_cursor(&key)?;
                // Only records on disk: one a crash could still lose would
                // be in the SIEM and not in the log.
                let durable = broker.durable_head()?;
                if after > durable {
                    // The log lost records the cursor had passed (a crash
                    // before they were synced): go on from what it has.
                    eprintln!(
                        "airlock: shipping: the log ends at record {durable}, before the {after} already sent; going on from {durable}"
                    );
                    broker.reset_ship_cursor(&key, durable)?;
                    (after, position) = (durable, 0);
                }
                let want = usize::try_from(durable - after).unwrap_or(usize::MAX).min(BATCH);
                if want == 0 {
                    return Ok(Some((Vec::new(), position)));
                }
                let store = broker.store_handle();
                let source = AuditSource::of(broker.root(), broker.config(), Some(&store));
                let (lines, next) = source.lines_after(after, position, want)?;
                Ok::<_, airlock_broker::BrokerError>(Some((lines, next)))
            })
            .await
        };
        let wait = match round {
            Ok(Ok(Some((lines, next)))) if !lines.is_empty() => {
                let full = lines.len() == BATCH;
                let last = lines.last().map_or(0, |(seq, _)| *seq);
                let ca_file = broker.ca_file();
                let sent = tokio::time::timeout(
                    SEND_WITHIN,
                    send(&target, &mut connection, &lines, &host, pid, ca_file),
                )
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {}s", SEND_WITHIN.as_secs())));
                match sent {
                    Ok(()) => {
                        backoff = FIRST_BACKOFF;
                        let (broker, cursor, lease, me) =
                            (broker.clone(), key.clone(), lease.clone(), me.clone());
                        let saved = tokio::task::spawn_blocking(move || {
                            broker.save_ship_cursor(&cursor, last, next, &lease, &me)
                        })
                        .await;
                        match saved {
                            Ok(Ok(true)) => {}
                            // The lease ran out during the send: the holder
                            // now goes on from the cursor it finds.
                            Ok(Ok(false)) => eprintln!(
                                "airlock: shipping to {shown}: the lease ran out during a send; records {}..={last} may arrive twice",
                                lines.first().map_or(0, |(seq, _)| *seq)
                            ),
                            _ => eprintln!(
                                "airlock: shipping to {shown}: the cursor could not be saved"
                            ),
                        }
                        if full { Duration::ZERO } else { IDLE }
                    }
                    Err(error) => {
                        eprintln!("airlock: shipping to {shown}: {error}; retrying");
                        connection = Connection::None;
                        let wait = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        wait
                    }
                }
            }
            // Nothing new, another process holds the lease, or the log
            // could not be read this time.
            Ok(Ok(_)) => IDLE,
            Ok(Err(error)) => {
                eprintln!("airlock: shipping to {shown}: {error}");
                MAX_BACKOFF
            }
            Err(_) => break,
        };
        if wait > Duration::ZERO {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stopping.changed() => {}
            }
        }
    }
    // Let another process take over at once.
    let broker = runtime.broker();
    let _ = tokio::task::spawn_blocking(move || broker.release_lease(&lease, &me)).await;
}

/// Sends one batch; `Ok` once the target took all of it.
async fn send(
    target: &Target,
    connection: &mut Connection,
    lines: &[(u64, String)],
    host: &str,
    pid: u32,
    ca_file: Option<PathBuf>,
) -> Result<(), String> {
    match target {
        Target::Http(url) => {
            let mut body = String::with_capacity(lines.iter().map(|(_, l)| l.len() + 1).sum());
            body.push('[');
            for (at, (_, line)) in lines.iter().enumerate() {
                if at > 0 {
                    body.push(',');
                }
                body.push_str(line);
            }
            body.push(']');
            match airlock_net::post_json(
                url,
                None,
                body,
                Duration::from_secs(30),
                ca_file.as_deref(),
            )
            .await
            {
                Ok((status, _)) if (200..300).contains(&status) => Ok(()),
                Ok((status, _)) => Err(format!("the endpoint answered {status}")),
                Err(error) => Err(error),
            }
        }
        Target::Syslog {
            scheme,
            host: to,
            port,
        } if scheme == "udp" => {
            let socket = tokio::net::UdpSocket::bind(if to.contains(':') {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            })
            .await
            .map_err(|error| error.to_string())?;
            socket
                .connect((to.as_str(), *port))
                .await
                .map_err(|error| format!("{to}:{port}: {error}"))?;
            for (_, line) in lines {
                // A datagram holds 65,507 bytes at most: a larger record is
                // cut (and says so) rather than never sent.
                let message = airlock_audit::siem::syslog_message_within(line, host, pid, 65_000);
                socket
                    .send(&message)
                    .await
                    .map_err(|error| format!("{to}:{port}: {error}"))?;
            }
            Ok(())
        }
        Target::Syslog {
            scheme,
            host: to,
            port,
        } => {
            if matches!(connection, Connection::None) {
                let tcp = tokio::net::TcpStream::connect((to.as_str(), *port))
                    .await
                    .map_err(|error| format!("{to}:{port}: {error}"))?;
                let _ = tcp.set_nodelay(true);
                *connection = if scheme == "tls" {
                    Connection::Tls(Box::new(
                        airlock_net::tls_over(tcp, to, ca_file.as_deref())
                            .await
                            .map_err(|error| format!("TLS to {to}:{port}: {error}"))?,
                    ))
                } else {
                    Connection::Tcp(tcp)
                };
            }
            let mut frames = Vec::new();
            for (_, line) in lines {
                frames.extend(airlock_audit::siem::octet_counted(
                    &airlock_audit::siem::syslog_message(line, host, pid),
                ));
            }
            let written = match connection {
                Connection::Tcp(stream) => write_all(stream, &frames).await,
                Connection::Tls(stream) => write_all(stream.as_mut(), &frames).await,
                Connection::None => Err("not connected".to_owned()),
            };
            written.map_err(|error| format!("{to}:{port}: {error}"))
        }
    }
}

async fn write_all<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
) -> Result<(), String> {
    stream
        .write_all(bytes)
        .await
        .map_err(|error| error.to_string())?;
    stream.flush().await.map_err(|error| error.to_string())
}
