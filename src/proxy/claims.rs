//! The claims this process holds right now, for the stuck-claim gauges.
//!
//! A claim that stays in processing (a hung upstream, a bug) blocks its key's retries with 409
//! until its lease ends; `hookonce_proxy_claims_held` and `hookonce_proxy_oldest_claim_seconds`
//! make that visible before clients complain. A claim whose process died is invisible here by
//! nature; the process that takes it over counts it in `hookonce_proxy_lease_takeovers_total`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use metrics::Gauge;

/// Claims held, by a process-local ID, with when each was taken. A `BTreeMap`: its IDs are
/// small and new, and a hash map hashed each one with SipHash twice per keyed request.
pub struct Claims {
    held: Mutex<BTreeMap<u64, Instant>>,
    next: AtomicU64,
    count: Gauge,
}

/// One held claim; dropping it (also when its task panics) forgets it.
pub struct Held<'a> {
    claims: &'a Claims,
    id: u64,
}

impl Claims {
    pub fn new(count: Gauge) -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
            count,
        }
    }

    /// Records a claim taken now.
    pub fn hold(&self) -> Held<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Instant::now());
        self.count.increment(1.0);
        Held { claims: self, id }
    }

    /// How many claims are held, and the age of the oldest.
    pub fn snapshot(&self) -> (usize, Option<Duration>) {
        let held = self.lock();
        let oldest = held.values().min().map(Instant::elapsed);
        (held.len(), oldest)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Instant>> {
        // The map is consistent after every single insert or remove; keep serving after a panic.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.claims.lock().remove(&self.id);
        self.claims.count.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_claims_are_counted_until_dropped() {
        let claims = Claims::new(Gauge::noop());
        assert_eq!(claims.snapshot(), (0, None));
        let first = claims.hold();
        let second = claims.hold();
        let (count, oldest) = claims.snapshot();
        assert_eq!(count, 2);
        assert!(oldest.is_some());
        drop(first);
        drop(second);
        assert_eq!(claims.snapshot(), (0, None));
    }
}
