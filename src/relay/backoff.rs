//! Retry delays: exponential from `backoff`, full jitter, capped by `max_backoff`; and a
//! worker's `Retry-After` (seconds or an HTTP date), honoured on 429 and 503 for that event.

use std::time::{Duration, SystemTime};

/// A route's retry schedule.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The longest wait after `attempt` (1-based) failed: `base · 2^(attempt-1)`, capped.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(40);
        self.base
            .checked_mul(1u32 << doublings.min(31))
            .and_then(|d| d.checked_mul(1u32 << doublings.saturating_sub(31)))
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// Full jitter: uniform in `[0, ceiling]`, so that retries of many events after one outage
    /// spread out instead of arriving together. `unit` is a random number in `[0, 1)`.
    pub fn jittered(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The wait after `attempt` failed with `status`: the worker's `Retry-After` on 429 and
    /// 503 (capped by `max`), otherwise the jittered backoff.
    pub fn after(
        &self,
        attempt: u32,
        status: Option<u16>,
        retry_after: Option<Duration>,
    ) -> Duration {
        match (status, retry_after) {
            (Some(429 | 503), Some(wait)) => wait.min(self.max),
            _ => self.jittered(attempt, rand::random::<f64>()),
        }
    }
}

/// Parses a `Retry-After` value: delta-seconds or an HTTP date (a date in the past is zero).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // A huge number is a long wait, not an error: the cap applies later.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ceilings_double_and_cap() {
        let b = Backoff {
            base: S,
            max: 60 * S,
        };
        assert_eq!(b.ceiling(1), S);
        assert_eq!(b.ceiling(2), 2 * S);
        assert_eq!(b.ceiling(4), 8 * S);
        assert_eq!(b.ceiling(7), 60 * S);
        assert_eq!(b.ceiling(1000), 60 * S);
        assert_eq!(b.ceiling(0), S);
    }

    #[test]
    fn full_jitter_stays_within_the_ceiling() {
        let b = Backoff {
            base: S,
            max: 60 * S,
        };
        assert_eq!(b.jittered(3, 0.0), Duration::ZERO);
        assert_eq!(b.jittered(3, 0.5), 2 * S);
        for _ in 0..100 {
            assert!(b.after(3, Some(500), None) <= 4 * S);
        }
    }

    #[test]
    fn retry_after_only_on_429_and_503_and_capped() {
        let b = Backoff {
            base: S,
            max: 60 * S,
        };
        assert_eq!(b.after(1, Some(429), Some(30 * S)), 30 * S);
        assert_eq!(b.after(1, Some(503), Some(3600 * S)), 60 * S);
        assert!(b.after(1, Some(500), Some(30 * S)) <= S);
        assert!(b.after(1, None, Some(30 * S)) <= S);
    }

    #[test]
    fn retry_after_parses_seconds_and_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(120 * S));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(30 * S)
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
        assert!(parse_retry_after("99999999999999999999999", now).is_some());
    }
}
