//! What the chat platforms' stand-ins share: waiting, on their state's
//! condition variable, until a test's check finds what it looks for.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a stand-in waits for what a test expects.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Waits (at most [`WAIT`]) until `check` finds something in the state
/// behind `state`, woken by `changed`; past that, fails the test with
/// `what` and the state as `describe` tells it.
pub(crate) fn wait_on<I, T>(
    state: &Mutex<I>,
    changed: &Condvar,
    what: &str,
    describe: impl Fn(&I) -> String,
    mut check: impl FnMut(&I) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    let mut inner = state.lock().unwrap();
    loop {
        if let Some(found) = check(&inner) {
            return found;
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| panic!("no {what} within {WAIT:?}; {}", describe(&inner)));
        inner = changed.wait_timeout(inner, left).unwrap().0;
    }
}
