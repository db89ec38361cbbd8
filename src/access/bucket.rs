//! Token buckets as the generic cell rate algorithm (GCRA): a bucket is one number, the
//! theoretical arrival time (TAT) of the next request at the configured rate, so that taking a
//! token is one compare-and-swap and an idle bucket costs nothing to keep or to forget.
//!
//! With an interval `T` between tokens (1 / rate) and a burst of `B`, a request at `now` is
//! admitted when `TAT - now <= (B - 1) * T`, and then moves `TAT` to `max(TAT, now) + T`: B
//! requests at once empty a full bucket, and one more token comes every `T`. A bucket whose `TAT`
//! is not after `now` is full again, which is what lets the client table drop it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::Limit;

/// A limit as bucket arithmetic, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Between two tokens.
    interval: u64,
    /// How far ahead of `now` the TAT may run and still admit: `(burst - 1) * interval`.
    tolerance: u64,
}

impl Pace {
    pub fn of(limit: Limit) -> Self {
        // Checked settings keep the rate within 1/day to 1e9/s, so the interval is 1 ns to a day.
        let interval = (1e9 / limit.per_second).round().max(1.0) as u64;
        let tolerance = interval.saturating_mul(u64::from(limit.burst.max(1)) - 1);
        Self {
            interval,
            tolerance,
        }
    }

    /// Whether a bucket at `tat` admits a request at `now`; when it does not, how long until it
    /// would.
    pub fn wait(self, tat: u64, now: u64) -> Option<Duration> {
        let ahead = tat.saturating_sub(now);
        (ahead > self.tolerance).then(|| Duration::from_nanos(ahead - self.tolerance))
    }

    /// The TAT after one token is taken at `now`.
    pub fn after_take(self, tat: u64, now: u64) -> u64 {
        tat.max(now).saturating_add(self.interval)
    }

    /// The TAT after one token is charged at `now` whether or not one was left, owing at most
    /// one token: a client charged while empty waits one interval, never longer.
    pub fn after_charge(self, tat: u64, now: u64) -> u64 {
        let cap = now
            .saturating_add(self.tolerance)
            .saturating_add(self.interval);
        self.after_take(tat, now).min(cap)
    }
}

/// Nanoseconds since `base`, the clock every bucket of one owner reads.
pub fn nanos_since(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One bucket shared by every request of its owner (a source), lock-free.
#[derive(Debug)]
pub struct TokenBucket {
    pace: Pace,
    base: Instant,
    tat: AtomicU64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limit: Limit) -> Self {
        Self {
            pace: Pace::of(limit),
            base: Instant::now(),
            tat: AtomicU64::new(0),
        }
    }

    /// Takes a token now, or says how long until one is there.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(nanos_since(self.base))
    }

    fn take_at(&self, now: u64) -> Result<(), Duration> {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            if let Some(wait) = self.pace.wait(tat, now) {
                return Err(wait);
            }
            let next = self.pace.after_take(tat, now);
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }
}

/// Whole seconds for `Retry-After`: rounded up, at least 1 (a 0 would invite an immediate retry
/// that is refused again).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn limit(per_second: f64, burst: u32) -> Limit {
        Limit { per_second, burst }
    }

    #[test]
    fn a_full_bucket_admits_its_burst_then_one_token_per_interval() {
        let bucket = TokenBucket::new(limit(10.0, 3));
        for _ in 0..3 {
            assert!(bucket.take_at(0).is_ok());
        }
        let wait = bucket.take_at(0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert!(bucket.take_at(SECOND / 10 - 1).is_err());
        assert!(bucket.take_at(SECOND / 10).is_ok());
        assert!(bucket.take_at(SECOND / 10).is_err());
        // Idle for long: full again, but never more than the burst.
        let later = 100 * SECOND;
        for _ in 0..3 {
            assert!(bucket.take_at(later).is_ok());
        }
        assert!(bucket.take_at(later).is_err());
    }

    #[test]
    fn a_slow_rate_waits_its_interval() {
        let bucket = TokenBucket::new(limit(0.5, 1));
        assert!(bucket.take_at(0).is_ok());
        assert_eq!(bucket.take_at(SECOND).unwrap_err(), Duration::from_secs(1));
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }

    #[test]
    fn charging_an_empty_bucket_owes_at_most_one_interval() {
        let pace = Pace::of(limit(1.0, 2));
        let mut tat = 0;
        for _ in 0..50 {
            tat = pace.after_charge(tat, 0);
        }
        assert_eq!(pace.wait(tat, 0), Some(Duration::from_secs(1)));
        assert_eq!(pace.wait(tat, SECOND), None);
    }

    #[test]
    fn concurrent_takers_get_exactly_the_burst() {
        let bucket = std::sync::Arc::new(TokenBucket::new(limit(1.0 / 86_400.0, 1000)));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let bucket = std::sync::Arc::clone(&bucket);
                std::thread::spawn(move || (0..500).filter(|_| bucket.take_at(0).is_ok()).count())
            })
            .collect();
        let taken: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(taken, 1000);
    }
}
