//! `airlock serve` (MCP over stdio and streamable HTTP) and `airlock wrap`
//! (one stdio MCP server, gated, under its own tool names).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

use airlock_broker::{ConfigRefused, RuntimeOptions};
use airlock_core::config::UpstreamConfig;
use airlock_mcp::{McpFace, SessionOptions};
use anyhow::anyhow;
use clap::Args;

use crate::workspace::Workspace;
use crate::{Failure, GlobalArgs};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Serve MCP on stdin/stdout (logs go to stderr).
    #[arg(long)]
    stdio: bool,
    /// Serve MCP over streamable HTTP at /mcp and /mcp/{profile} on this
    /// address: HOST:PORT, or a PORT alone for 127.0.0.1:PORT (`7420`,
    /// `localhost:7420`, `0.0.0.0:7420`).
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    http: Option<SocketAddr>,
    /// The address people reach this server at (behind a proxy, or another
    /// host name), which webhook links and the UI address start with
    /// [default: http://ADDR].
    #[arg(long, value_name = "URL", requires = "http")]
    public_url: Option<String>,
    /// The profile bound to the stdio endpoint (default: `default_profile`).
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// Bind the stdio endpoint to this session (`airlock session open`
    /// makes one): every call runs in it, and a call naming another is
    /// refused with session_mismatch.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Serve GET /metrics (Prometheus text) without a token on this loopback
    /// address (PORT or 127.0.0.1:PORT), for a local scraper.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    metrics_addr: Option<SocketAddr>,
}

#[derive(Debug, Args)]
pub(crate) struct WrapArgs {
    /// The upstream's name in policy rules (`<name>__<tool>`) [default: the
    /// command's file name].
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// The profile bound to the endpoint (default: `default_profile`).
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// Decide the server's tools by their own annotations: a tool marked
    /// read-only is a read (low risk, no approval), as with an upstream's
    /// `trusted_annotations: true`. Without it every tool is high risk.
    #[arg(long)]
    trust_annotations: bool,
    /// Serve the wrapped server over streamable HTTP at /mcp on this
    /// address (PORT or HOST:PORT) instead of stdio.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    http: Option<SocketAddr>,
    /// The address people reach this server at (see `serve --public-url`).
    #[arg(long, value_name = "URL", requires = "http")]
    public_url: Option<String>,
    /// Serve GET /metrics without a token on this loopback address (see
    /// `serve --metrics-addr`).
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    metrics_addr: Option<SocketAddr>,
    /// Wrap a streamable-HTTP MCP server at this URL (http:// or https://,
    /// trusting `tls.ca_file` too) instead of starting a command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// The MCP server to start, and its arguments.
    #[arg(last = true, required_unless_present = "url", value_name = "CMD")]
    command: Vec<String>,
}

/// `--session`: a durable session's id (`airlock session open` prints it).
fn bound_session(id: Option<&str>) -> Result<Option<String>, Failure> {
    match id {
        None => Ok(None),
        Some(id) if airlock_core::session::is_session_id(id) => Ok(Some(id.to_owned())),
        Some(id) => Err(Failure::usage(anyhow!(
            "--session {id}: not a session id (ses- and 32 hex digits; `airlock session open` makes one)"
        ))),
    }
}

pub(crate) fn serve(workspace: Workspace, args: &ServeArgs) -> Result<u8, Failure> {
    if !args.stdio && args.http.is_none() {
        return Err(Failure::usage(anyhow!(
            "serve needs --stdio, --http ADDR, or both"
        )));
    }
    check_profile(&workspace, args.profile.as_deref())?;
    check_public_url(args.public_url.as_deref())?;
    let session = SessionOptions {
        profile: args.profile.clone(),
        user: Some(crate::approvals::terminal_user()),
        http: false,
        session: bound_session(args.session.as_deref())?,
    };
    check_metrics_addr(args.metrics_addr)?;
    run(
        workspace,
        None,
        RuntimeOptions::default(),
        session,
        Faces {
            stdio: args.stdio,
            http: args.http.map(|addr| (addr, args.public_url.clone())),
            metrics: args.metrics_addr,
        },
    )
}

/// Where a server answers: stdio, HTTP (with its public URL), metrics.
struct Faces {
    stdio: bool,
    http: Option<(SocketAddr, Option<String>)>,
    metrics: Option<SocketAddr>,
}

/// Metrics without a token are for this machine only.
fn check_metrics_addr(addr: Option<SocketAddr>) -> Result<(), Failure> {
    match addr {
        Some(addr) if !addr.ip().is_loopback() => Err(Failure::usage(anyhow!(
            "--metrics-addr {addr}: metrics without a token are served on loopback only; from another host, scrape /metrics on the --http listener with an admin token"
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn wrap(workspace: Workspace, args: &WrapArgs) -> Result<u8, Failure> {
    check_profile(&workspace, args.profile.as_deref())?;
    check_public_url(args.public_url.as_deref())?;
    let name = match (&args.name, &args.url) {
        (Some(name), _) => name.clone(),
        (None, Some(url)) => default_url_name(url),
        (None, None) => default_name(&args.command),
    };
    let (command, rest, url) = match &args.url {
        Some(url) => {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.contains(char::is_whitespace) {
                return Err(Failure::usage(anyhow!(
                    "--url must be an http:// or https:// URL, not {url:?}"
                )));
            }
            (None, Vec::new(), Some(url.clone()))
        }
        None => {
            let (command, rest) = args
                .command
                .split_first()
                .ok_or_else(|| Failure::usage(anyhow!("wrap needs a command or --url")))?;
            (Some(command.clone()), rest.to_vec(), None)
        }
    };
    let upstream = UpstreamConfig {
        name: name.clone(),
        command,
        args: rest,
        env: Default::default(),
        cwd: None,
        url,
        headers: Default::default(),
        timeout: None,
        trusted_annotations: args.trust_annotations,
        prefix: true,
    };
    let workspace = workspace.with_upstream(upstream.clone())?;
    let session = SessionOptions {
        profile: args.profile.clone(),
        user: Some(crate::approvals::terminal_user()),
        http: false,
        session: None,
    };
    let options = RuntimeOptions {
        wrap: Some(name),
        ..RuntimeOptions::default()
    };
    check_metrics_addr(args.metrics_addr)?;
    run(
        workspace,
        Some(upstream),
        options,
        session,
        Faces {
            stdio: args.http.is_none(),
            http: args.http.map(|addr| (addr, args.public_url.clone())),
            metrics: args.metrics_addr,
        },
    )
}

/// A name for a wrapped URL: its host's first label.
fn default_url_name(url: &str) -> String {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split(['/', ':', '?']).next())
        .unwrap_or("");
    let label = host.split('.').next().unwrap_or("");
    default_name(&[label.to_owned()])
}

/// `--public-url`, when given, is an http(s) URL.
fn check_public_url(url: Option<&str>) -> Result<(), Failure> {
    if let Some(url) = url {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|rest| rest.is_empty() || rest.contains(char::is_whitespace)) {
            return Err(Failure::usage(anyhow!(
                "--public-url must be an http:// or https:// URL, not {url:?}"
            )));
        }
    }
    Ok(())
}

/// A name for a wrapped command: its file name (or the package it runs, for
/// `npx`/`uvx`-style launchers), reduced to the characters a name may have.
fn default_name(command: &[String]) -> String {
    let launcher = |word: &str| {
        matches!(
            word,
            "npx" | "uvx" | "node" | "python" | "python3" | "bunx" | "deno"
        )
    };
    let file = |word: &str| {
        std::path::Path::new(word)
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let first = command.first().map(|word| file(word)).unwrap_or_default();
    let chosen = if launcher(&first) {
        command
            .iter()
            .skip(1)
            .find(|word| !word.starts_with('-'))
            .map(|word| {
                let word = word.rsplit('/').next().unwrap_or(word);
                file(word)
            })
            .unwrap_or(first)
    } else {
        first
    };
    let mut name: String = chosen
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while name.contains("__") {
        name = name.replace("__", "_");
    }
    let name: String = name.trim_matches('_').chars().take(32).collect();
    if name.is_empty() {
        "upstream".to_owned()
    } else {
        name
    }
}

fn absolute_path(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// `--http`: `PORT`, `HOST:PORT` (a name is resolved; `localhost` is
/// loopback) or `[IPv6]:PORT`.
fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs as _;
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = text.strip_prefix("localhost:") {
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("{text:?}: the port must be a number from 0 to 65535"))?;
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let Some((_, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "{text:?} is not an address: give PORT, HOST:PORT or [IPv6]:PORT (e.g. 7420, localhost:7420, 0.0.0.0:7420)"
        ));
    };
    port.parse::<u16>()
        .map_err(|_| format!("{text:?}: the port must be a number from 0 to 65535"))?;
    text.to_socket_addrs()
        .map_err(|error| format!("cannot resolve {text:?}: {error}"))?
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// `text` as a QR code drawn with half blocks, two rows per line, dark on
/// light with the quiet zone around it.
fn qr_code(text: &str) -> String {
    match qrcode::QrCode::new(text.as_bytes()) {
        Ok(code) => {
            code.render::<qrcode::render::unicode::Dense1x2>()
                .dark_color(qrcode::render::unicode::Dense1x2::Light)
                .light_color(qrcode::render::unicode::Dense1x2::Dark)
                .build()
                + "\n"
        }
        Err(_) => String::new(),
    }
}

fn check_profile(workspace: &Workspace, profile: Option<&str>) -> Result<(), Failure> {
    if let Some(profile) = profile
        && !workspace.loaded.policy.has_profile(profile)
    {
        let known: Vec<&str> = workspace.loaded.policy.profile_names().collect();
        return Err(Failure::usage(anyhow!(
            "no profile named {profile} in {}; {}",
            workspace.config_path.display(),
            if known.is_empty() {
                "it defines none (add one under `profiles:`, or leave out --profile)".to_owned()
            } else {
                format!("it defines: {}", known.join(", "))
            }
        )));
    }
    Ok(())
}

fn run(
    workspace: Workspace,
    wrapped: Option<UpstreamConfig>,
    options: RuntimeOptions,
    session: SessionOptions,
    faces: Faces,
) -> Result<u8, Failure> {
    let Faces {
        stdio,
        http,
        metrics,
    } = faces;
    // One client over stdio is served best by one worker: a second one
    // only adds a wake-up of an idle thread (a futex call and a context
    // switch) to each message; the HTTP face serves agents in parallel.
    // Calls that wait for a human or a command move off the worker
    // (`block_in_place`) either way.
    let workers = if http.is_some() { 2 } else { 1 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(Failure::internal)?;
    let tokens = workspace.loaded.config.auth.tokens.clone();
    // A reload reads the same workspace and file as the start did: never
    // whatever a search from the current directory would find later.
    let pinned = GlobalArgs {
        workspace: Some(workspace.base.clone()),
        config: Some(absolute_path(&workspace.config_path)),
    };
    let mut reloader = Reload::new(pinned, workspace.config_path.clone(), wrapped);
    let broker_workspace = workspace.into_broker_workspace()?;
    // Code mode is offered where airlock serves its own tools, not under
    // `wrap` (which stands for one server, under its own names).
    let code_mode = options.wrap.is_none().then(crate::codemode::server_engine);
    let options = RuntimeOptions {
        clock: Some(airlock_broker::clock_from_env()),
        code_mode,
        ..options
    };
    runtime.block_on(async move {
        let face = McpFace::start(broker_workspace, options)
            .await
            .map_err(|error| Failure::internal(anyhow!("{error}")))?;
        let runtime = face.runtime().clone();
        crate::publish::start(runtime.clone());
        let shippers = crate::ship::start(runtime.clone());
        let exporter = crate::otlp::start(runtime.clone());
        if let Some(addr) = metrics {
            let (ready, bound) = tokio::sync::oneshot::channel();
            let serving = tokio::spawn(airlock_http::serve_metrics(runtime.clone(), addr, move |at| {
                let _ = ready.send(at);
            }));
            match bound.await {
                Ok(at) => eprintln!("airlock: metrics at http://{at}/metrics"),
                Err(_) => {
                    let why = match serving.await {
                        Ok(Err(error)) => error.to_string(),
                        _ => "the metrics listener stopped".to_owned(),
                    };
                    return Err(Failure::usage(anyhow!("--metrics-addr: {why}")));
                }
            }
        }
        reloader.prime();
        runtime
            .watch_config(Box::new(move || reloader.check()))
            .map_err(|error| Failure::internal(anyhow!("{error}")))?;
        // The chat channels, while this process holds them (one per state
        // dir); the broker in force is read at each use.
        let brokers_of = runtime.clone();
        airlock_chat::spawn(
            std::sync::Arc::new(move || brokers_of.broker()),
            airlock_chat::Options {
                public_url: http.as_ref().and_then(|(_, url)| url.clone()),
            },
        );
        let result = match (stdio, http) {
            // Stopped by its client closing stdin, or by SIGTERM (a client
            // or service manager stopping it): either way cleanly.
            (true, None) => tokio::select! {
                result = airlock_mcp::serve_stdio(face.clone(), session) =>
                    result.map_err(|error| Failure::internal(anyhow!("{error}"))),
                () = terminated() => Ok(()),
            },
            (stdio, Some((addr, public_url))) => {
                let served = airlock_http::serve(runtime.clone(), airlock_mcp::streamable_http_service(face.clone()), tokens, addr, public_url, |bound, login| {
                    eprintln!("airlock: serving MCP at http://{bound}/mcp");
                    match login {
                        airlock_http::Login::New(url) => {
                            eprintln!("airlock: approvals at {url} (admin token, shown once)");
                            // For a phone's camera (on a terminal only).
                            if std::io::stderr().is_terminal() {
                                eprint!("{}", qr_code(&url));
                            }
                        }
                        airlock_http::Login::Kept => eprintln!(
                            "airlock: approvals at http://{bound}/ (the admin token shown when it was made still works; `airlock token rotate` makes a new one, `airlock token create` one for a phone)"
                        ),
                        airlock_http::Login::Configured => eprintln!(
                            "airlock: approvals at http://{bound}/#token=<an approver token> (`airlock token create --role approver` makes one)"
                        ),
                    }
                });
                if stdio {
                    tokio::select! {
                        result = served => result.map_err(|error| Failure::usage(anyhow!("{error}"))),
                        result = airlock_mcp::serve_stdio(face.clone(), session) =>
                            result.map_err(|error| Failure::internal(anyhow!("{error}"))),
                        () = terminated() => Ok(()),
                    }
                } else {
                    tokio::select! {
                        result = served => result.map_err(|error| Failure::usage(anyhow!("{error}"))),
                        _ = tokio::signal::ctrl_c() => Ok(()),
                        () = terminated() => Ok(()),
                    }
                }
            }
            (false, None) => Ok(()),
        };
        // Approvals this process held (waiting calls, upstream calls only it
        // can forward) cannot be carried out by anyone else.
        let stopped = tokio::task::spawn_blocking(move || {
            runtime.shutdown();
            let broker = runtime.broker();
            broker.cancel_own_waits();
            broker.flush_audit();
            // A tree head over everything this server saw (DESIGN §8.1).
            if let Err(error) = broker.checkpoint_now() {
                eprintln!("airlock: no audit checkpoint at shutdown: {error}");
            }
        })
        .await;
        if let Err(error) = stopped {
            eprintln!("airlock: stopping: {error}");
        }
        // A shipper finishes the batch it is sending (its cursor then says
        // where the next server goes on).
        shippers.stop(std::time::Duration::from_secs(25)).await;
        if let Some(exporter) = exporter {
            exporter.stop(std::time::Duration::from_secs(10)).await;
        }
        // The shutdown checkpoint goes out now rather than with the next
        // server, if the hook answers in time.
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            crate::publish::publish_pending(&face.runtime().clone()),
        )
        .await;
        result.map(|()| 0)
    })
}

/// Resolves when the process is asked to stop (SIGTERM), so a server run
/// by a service manager stops as cleanly as one stopped with Ctrl-C.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

/// Re-reads the configuration file when it changes.
struct Reload {
    global: GlobalArgs,
    path: PathBuf,
    wrapped: Option<UpstreamConfig>,
    last: Option<Vec<u8>>,
}

impl Reload {
    fn new(global: GlobalArgs, path: PathBuf, wrapped: Option<UpstreamConfig>) -> Reload {
        Reload {
            global,
            path,
            wrapped,
            last: None,
        }
    }

    fn read(&self) -> Option<Vec<u8>> {
        std::fs::read(&self.path).ok()
    }

    fn prime(&mut self) {
        self.last = self.read();
    }

    fn check(&mut self) -> Result<Option<airlock_broker::Workspace>, ConfigRefused> {
        let now = self.read();
        if now == self.last {
            return Ok(None);
        }
        self.last = now;
        let workspace = Workspace::load(&self.global, crate::workspace::Need::Existing)
            .map_err(|failure| ConfigRefused(format!("{:#}", failure.error)))?;
        let workspace = match &self.wrapped {
            Some(upstream) => workspace
                .with_upstream(upstream.clone())
                .map_err(|failure| ConfigRefused(format!("{:#}", failure.error)))?,
            None => workspace,
        };
        workspace
            .into_broker_workspace()
            .map(Some)
            .map_err(|failure| ConfigRefused(format!("{:#}", failure.error)))
    }
}
