//! Small pieces every layer uses: a boxed future for trait objects, a map for lookups on the
//! request path, the wall clock in ms, an error's causes on one line, and a guard that runs code
//! when a scope ends.
//!
//! A leaf: it imports nothing of the crate, so any module may use it without creating a cycle.

use std::future::Future;
use std::pin::Pin;

/// A boxed future, so that async traits can be used as `Arc<dyn …>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A map that every request looks up and only the configuration fills (the sources by name,
/// the coalescer's lanes by stream). The standard map's SipHash took a few hundred instructions
/// per lookup, several lookups per request; foldhash takes a few dozen. Its seed is still random
/// per process, and the keys a client can choose (a source name in the path) are only looked up,
/// never inserted, so no client can fill a bucket.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The wall clock as unix milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs `f` when dropped, also when the future holding it is cancelled (a client that goes away
/// cancels its request's handler), so that gauges incremented before it are always decremented.
pub fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

/// An error and its causes on one line, for logs.
pub fn error_chain<E: std::error::Error>(error: &E) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// The body length a request declares in `Content-Length`, when it declares a readable one.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}
