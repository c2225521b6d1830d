//! Publishing signed checkpoints (`audit.checkpoints.webhook`, DESIGN
//! §8.1): a server POSTs each checkpoint, oldest first, as JSON carrying the
//! signed note, retried with backoff; the store keeps how far it got, so a
//! checkpoint made while no server ran (or one the hook refused) is sent by
//! the next. Anyone who keeps what they receive can later prove that the
//! log was rewritten or cut short, even by someone with root on the host.

use std::sync::Arc;
use std::time::Duration;

use airlock_broker::Runtime;
use airlock_store::CheckpointRow;
use serde_json::json;

/// Attempts per checkpoint in one round, and the first wait between them.
const ATTEMPTS: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(250);
/// How long a round waits for a change before looking again (a refused
/// delivery is retried then).
const IDLE: Duration = Duration::from_secs(30);

/// Starts publishing in the background of the server's runtime.
pub(crate) fn start(runtime: Arc<Runtime>) {
    tokio::spawn(async move {
        loop {
            let broker = runtime.broker();
            let Ok(Ok(cursor)) = tokio::task::spawn_blocking({
                let broker = broker.clone();
                move || broker.cursor()
            })
            .await
            else {
                return;
            };
            publish_pending(&runtime).await;
            let deadline = broker.now_ms() + IDLE.as_millis() as u64;
            if tokio::task::spawn_blocking(move || broker.park(cursor, Some(deadline)))
                .await
                .is_err()
            {
                return;
            }
        }
    });
}

/// Sends every checkpoint not yet published to the configured webhook;
/// stops at the first that cannot be sent (the next round retries it).
pub(crate) async fn publish_pending(runtime: &Arc<Runtime>) {
    let broker = runtime.broker();
    let Some(url) = broker.config().audit.checkpoints.webhook.clone() else {
        return;
    };
    let ca_file = broker.ca_file();
    let pending = {
        let (broker, url) = (broker.clone(), url.clone());
        tokio::task::spawn_blocking(move || broker.unpublished_checkpoints(&url)).await
    };
    let Ok(Ok(pending)) = pending else {
        return;
    };
    for row in pending {
        if !send(&url, &row, ca_file.as_deref()).await {
            eprintln!(
                "airlock: the checkpoint of {} records could not be published to the webhook; it is retried",
                row.size
            );
            return;
        }
        let (broker, url, size) = (broker.clone(), url.clone(), row.size);
        let marked = tokio::task::spawn_blocking(move || broker.mark_published(&url, size)).await;
        if !matches!(marked, Ok(Ok(()))) {
            return;
        }
    }
}

/// POSTs one checkpoint; whether the hook took it (2xx).
async fn send(url: &str, row: &CheckpointRow, ca_file: Option<&std::path::Path>) -> bool {
    let body = json!({
        "event": "audit_checkpoint",
        "size": row.size,
        "root": row.root,
        "key": row.key_id,
        "created": airlock_audit::rfc3339_millis(row.created_ms),
        "note": row.note,
    })
    .to_string();
    let mut wait = FIRST_RETRY;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        let sent =
            airlock_net::post_json(url, None, body.clone(), Duration::from_secs(10), ca_file).await;
        if matches!(sent, Ok((status, _)) if (200..300).contains(&status)) {
            return true;
        }
    }
    false
}
