//! Small pieces every layer uses: a boxed future for trait objects, a map for lookups on the
//! request path, the wall clock in ms, an error's causes on one line, a guard that runs code
//! when a scope ends, a future that is finished even when its caller goes away, and an IP
//! address as text without `fmt`.
//!
//! A leaf: it imports nothing of the crate, so any module may use it without creating a cycle.

use std::future::Future;
use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `Idempotency-Replayed`, on every answer given again rather than made anew: a proxy's stored
/// response, a webhook's acknowledgement of a delivery already forwarded. A name made once: given
/// as text, a header map parses it at every call.
pub const REPLAYED: http::HeaderName = http::HeaderName::from_static("idempotency-replayed");

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

/// A duration in seconds as the milliseconds a log line gives, to the microsecond: `1.802`
/// rather than the `1.8024099999999998` of the seconds times a thousand.
pub fn log_millis(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
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

/// `work`, run to its end even if the future awaiting it is dropped first: it runs on the
/// awaiting task, and if that task lets go of it before it is done (a client that goes away
/// cancels its request's handler), the rest of it runs in a task of its own. So what `work`
/// holds (a claim, a permit, an answer still to be stored) is settled as if nothing had
/// happened, as with `tokio::spawn(work).await`, without that spawn's hand-off to another task
/// and wake-up back for every request that is not cancelled. A panic inside `work` is caught and
/// returned as an error, as a spawned task's would be. Outside a runtime (unit tests) a dropped
/// `work` is dropped.
pub fn finish_even_if_dropped<F>(work: F) -> Unabandoned<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Unabandoned {
        work: Some(Box::pin(work)),
    }
}

/// See [`finish_even_if_dropped`].
pub struct Unabandoned<T: Send + 'static> {
    /// `None` once `work` has ended (or panicked) here.
    work: Option<BoxFuture<'static, T>>,
}

impl<T: Send + 'static> Future for Unabandoned<T> {
    /// `work`'s output, or the message of its panic.
    type Output = Result<T, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(work) = this.work.as_mut() else {
            return Poll::Ready(Err("polled again after it ended".to_owned()));
        };
        let ended = match std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(panic) => Err(panic_message(panic.as_ref())),
        };
        this.work = None;
        Poll::Ready(ended)
    }
}

impl<T: Send + 'static> Drop for Unabandoned<T> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(work);
            }
        }
    }
}

/// What a caught panic says.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    format!("panicked: {text}")
}

/// Calls `f` with `ip` as `Display` writes it. An IPv4 address, the common case, is written
/// without an allocation or `fmt`'s machinery: each request's log line names its client, and
/// each proxied request's `X-Forwarded-For` its peer.
pub fn with_ip_text<R>(ip: IpAddr, f: impl FnOnce(&str) -> R) -> R {
    let IpAddr::V4(address) = ip else {
        return f(&ip.to_string());
    };
    let mut text = [0u8; 15];
    let mut len = 0;
    for (i, octet) in address.octets().into_iter().enumerate() {
        if i > 0 {
            text[len] = b'.';
            len += 1;
        }
        let digits = [octet / 100, octet / 10 % 10, octet % 10];
        // No leading zeros: one digit fewer below 100, another below 10.
        let skip = usize::from(octet < 100) + usize::from(octet < 10);
        for digit in &digits[skip..] {
            text[len] = b'0' + digit;
            len += 1;
        }
    }
    f(std::str::from_utf8(&text[..len]).expect("ASCII digits and dots"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn ip_text_is_what_display_writes() {
        for octet in 0..=255u8 {
            for ip in [
                IpAddr::from([octet, 0, 9, 10]),
                IpAddr::from([99, octet, 100, 255]),
                IpAddr::from([1, 20, octet, octet]),
            ] {
                assert_eq!(with_ip_text(ip, str::to_owned), ip.to_string());
            }
        }
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(with_ip_text(v6, str::to_owned), "2001:db8::1");
    }

    #[test]
    fn log_millis_are_whole_microseconds_written_short() {
        let text = |seconds: f64| serde_json::to_string(&log_millis(seconds)).unwrap();
        assert_eq!(text(0.0018024099999999998), "1.802");
        assert_eq!(text(0.0018025), "1.803");
        assert_eq!(text(0.000_000_4), "0.0");
        assert_eq!(text(12.345_678_9), "12345.679");
        for micros in [1u64, 999, 1_000, 1_001, 123_456, 9_999_999] {
            let seconds = std::time::Duration::from_micros(micros).as_secs_f64();
            let exact = serde_json::to_string(&(micros as f64 / 1e3)).unwrap();
            assert_eq!(text(seconds), exact, "{micros}");
        }
    }

    #[tokio::test]
    async fn work_that_is_awaited_answers_its_caller() {
        assert_eq!(finish_even_if_dropped(async { 7 }).await, Ok(7));
    }

    #[tokio::test]
    async fn a_panic_is_answered_as_an_error() {
        let ended = finish_even_if_dropped(async {
            if true {
                panic!("the upstream went away");
            }
        })
        .await;
        assert_eq!(ended, Err("panicked: the upstream went away".to_owned()));
    }

    #[tokio::test]
    async fn work_whose_caller_goes_away_runs_to_its_end() {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
        let finished = Arc::new(AtomicBool::new(false));
        let caller = tokio::spawn({
            let finished = Arc::clone(&finished);
            finish_even_if_dropped(async move {
                started_tx.send(()).unwrap();
                go_rx.await.unwrap();
                finished.store(true, Ordering::SeqCst);
                ended_tx.send(()).unwrap();
            })
        });
        started_rx.await.unwrap();
        // The caller goes away while the work waits halfway.
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        assert!(!finished.load(Ordering::SeqCst));
        go_tx.send(()).unwrap();
        ended_rx.await.unwrap();
        assert!(finished.load(Ordering::SeqCst));
    }
}
