//! Small pieces every layer uses: a boxed future for trait objects, and the wall clock in ms.
//!
//! A leaf: it imports nothing of the crate, so any module may use it without creating a cycle.

use std::future::Future;
use std::pin::Pin;

/// A boxed future, so that async traits can be used as `Arc<dyn …>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The wall clock as unix milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
