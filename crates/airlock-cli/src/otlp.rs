//! Exporting traces and logs over OTLP/HTTP (`telemetry.otlp.endpoint`,
//! DESIGN §8.1): what the broker's `telemetry` queued is POSTed as JSON to
//! `<endpoint>/v1/traces` and `<endpoint>/v1/logs`, every half second by a
//! server and once at the end by any other command. A collector that does
//! not answer 2xx is tried three times per batch; then the batch is
//! dropped (as OpenTelemetry's own exporters do) and said on stderr.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_broker::{Runtime, telemetry};
use tokio::sync::watch;

const EVERY: Duration = Duration::from_millis(500);
const ATTEMPTS: u32 = 3;

/// The exporter of a server.
pub(crate) struct Exporter {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Sends what is left and stops (within `within`).
    pub(crate) async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(within, self.task).await;
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Starts exporting in the server's runtime when an endpoint is configured.
pub(crate) fn start(runtime: Arc<Runtime>) -> Option<Exporter> {
    let broker = runtime.broker();
    let endpoint = broker.config().telemetry.otlp.endpoint.clone()?;
    let ca_file = broker.ca_file();
    let (stop, mut stopping) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            let stopped = tokio::select! {
                () = tokio::time::sleep(EVERY) => false,
                _ = stopping.changed() => true,
            };
            flush(&endpoint, ca_file.as_deref()).await;
            if stopped || *stopping.borrow() {
                return;
            }
        }
    });
    Some(Exporter { stop, task })
}

/// Sends everything queued now.
pub(crate) async fn flush(endpoint: &str, ca_file: Option<&Path>) {
    let (spans, logs) = telemetry::drain();
    let base = endpoint.trim_end_matches('/');
    let host = host();
    if !spans.is_empty() {
        send(
            &format!("{base}/v1/traces"),
            telemetry::traces_json(&spans, &host),
            ca_file,
            "spans",
            spans.len(),
        )
        .await;
    }
    if !logs.is_empty() {
        send(
            &format!("{base}/v1/logs"),
            telemetry::logs_json(&logs, &host),
            ca_file,
            "log records",
            logs.len(),
        )
        .await;
    }
}

async fn send(url: &str, body: String, ca_file: Option<&Path>, what: &str, count: usize) {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
        }
        match airlock_net::post_json(url, None, body.clone(), Duration::from_secs(5), ca_file).await
        {
            Ok((status, _)) if (200..300).contains(&status) => return,
            Ok((status, _)) => last = format!("it answered {status}"),
            Err(error) => last = error,
        }
    }
    eprintln!(
        "airlock: {count} {what} not exported to {}: {last}",
        crate::ship::shown_url(url)
    );
}

/// Sends what a short-lived command queued, before it exits.
pub(crate) fn flush_at_exit(endpoint: &str, ca_file: Option<PathBuf>) {
    if !telemetry::enabled() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async {
        let _ =
            tokio::time::timeout(Duration::from_secs(5), flush(endpoint, ca_file.as_deref())).await;
    });
}
