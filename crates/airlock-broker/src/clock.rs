//! Time, as the broker reads it: TTLs, timeouts, expiry and grant lifetimes
//! all come from the [`Clock`] the broker was opened with, so a test moves
//! time forward instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_store::Notifier;

/// Milliseconds since the Unix epoch, as some clock says.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> u64;
}

/// The system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        system_now_ms()
    }
}

/// Milliseconds since the Unix epoch by the system's clock.
fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A clock that moves only when told (tests). Moving it wakes every reader
/// of the feed in the process, so a waiting call sees its deadline pass.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: u64) -> ManualClock {
        ManualClock {
            now: AtomicU64::new(now_ms),
        }
    }

    /// Moves the clock `ms` forward.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
        Notifier::get().bump();
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// The clock a process uses: the system's; in a build with the `test-clock`
/// feature (the test suite's), moved forward by the whole number of
/// milliseconds in the file `AIRLOCK_TEST_CLOCK` names, when it is set.
pub fn clock_from_env() -> Arc<dyn Clock> {
    #[cfg(feature = "test-clock")]
    if let Some(path) = std::env::var_os("AIRLOCK_TEST_CLOCK") {
        return Arc::new(OffsetClock {
            path: std::path::PathBuf::from(path),
        });
    }
    Arc::new(SystemClock)
}

/// The system's clock plus the offset written in a file (0 while the file
/// is missing or unreadable). Read on every look, so a test that moves it
/// moves every process that shares the file.
#[cfg(feature = "test-clock")]
#[derive(Debug)]
struct OffsetClock {
    path: std::path::PathBuf,
}

#[cfg(feature = "test-clock")]
impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        let offset = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(0);
        system_now_ms().saturating_add(offset)
    }
}
