//! Admission control: at most `server.max_in_flight` requests handled at once, across every
//! listener (webhooks and each proxy draw from one pool).
//!
//! A permit is taken only once a request's body is in (a webhook's, a keyed proxy request's) or,
//! for a request passed through to a proxy's upstream, just before it goes upstream: a client that
//! sends its headers and then stalls is cut by the body's own deadline (`crate::body`) without ever
//! holding a permit, so it cannot starve either front.

use std::sync::Arc;

use metrics::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The shared pool of `server.max_in_flight` permits and the gauge of those taken.
pub struct Admission {
    permits: Arc<Semaphore>,
    gauge: Gauge,
}

/// One admitted request: its permit, and its share of `hookonce_requests_in_flight`, both given
/// back when it is dropped.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    gauge: Gauge,
}

impl Admission {
    /// A pool of `max_in_flight` permits counted on `gauge` (`hookonce_requests_in_flight`).
    pub fn new(max_in_flight: usize, gauge: Gauge) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_in_flight.min(Semaphore::MAX_PERMITS))),
            gauge,
        }
    }

    /// A permit if one is free now; `None` means the request is answered 503 at once (a queue
    /// would only turn overload into latency for the providers' retries).
    pub fn try_admit(&self) -> Option<Admitted> {
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        self.gauge.increment(1.0);
        Some(Admitted {
            _permit: permit,
            gauge: self.gauge.clone(),
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_are_given_back_when_dropped() {
        let admission = Admission::new(2, Gauge::noop());
        let first = admission.try_admit().expect("a free permit");
        let second = admission.try_admit().expect("a free permit");
        assert!(admission.try_admit().is_none(), "the pool holds two");
        drop(first);
        assert!(
            admission.try_admit().is_some(),
            "a dropped permit is free again"
        );
        drop(second);
    }
}
