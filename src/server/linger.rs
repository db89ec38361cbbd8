//! Lingering close: a request body that its handler stopped reading is read and discarded, for a
//! bounded time and amount, so that the client sees the answer that was sent before its body.
//!
//! An answer made before the body is read (413 for a declared length over the limit, 404, 400 for a
//! missing key…) is written at once; if the connection were then closed with the client's bytes
//! still unread, the kernel would answer them with a reset, and a client that writes its whole
//! body before reading — most HTTP clients and every provider's sender — would get a broken pipe
//! instead of the status. This is what nginx's lingering close does: [`Lingering`] wraps every
//! request body, and when it is dropped before its end, a task keeps reading (the connection stays
//! served by hyper meanwhile) until the body ends, [`Drain::bytes`] have been discarded or
//! [`Drain::time`] has passed; the connection is closed or kept alive after that as hyper decides.
//! No permit and no memory beyond one chunk are held while draining.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// How much of an abandoned body is read and discarded before the connection is given up.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// At most this many bytes.
    pub bytes: u64,
    /// For at most this long after the handler let go of the body.
    pub time: Duration,
}

impl Drain {
    /// Several times `body_limit`, for as long as a body may take (`body_read_timeout`): a client
    /// that sends up to eight times the limit at the pace a body is allowed hears its answer.
    pub fn for_limits(body_limit: u64, body_read_timeout: Duration) -> Self {
        Self {
            bytes: body_limit.saturating_mul(8),
            time: body_read_timeout,
        }
    }
}

/// A request body that drains itself when dropped before its end.
pub struct Lingering {
    inner: Option<Incoming>,
    drain: Drain,
    /// The body ended (or broke): nothing is left to drain.
    finished: bool,
    /// Whether anything polled the body. A client that sent `Expect: 100-continue` waits for
    /// that before it sends: if nobody asked for the body, there is nothing to drain.
    polled: bool,
    expects_continue: bool,
}

impl Lingering {
    pub fn new(body: Incoming, drain: Drain, expects_continue: bool) -> Self {
        Self {
            inner: Some(body),
            drain,
            finished: false,
            polled: false,
            expects_continue,
        }
    }
}

impl Body for Lingering {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        this.polled = true;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if self.finished || body.is_end_stream() || (self.expects_continue && !self.polled) {
            return;
        }
        // Dropped outside a runtime only in unit tests; there is no connection to keep then.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body, self.drain));
        }
    }
}

/// Reads and discards `body` within `limit`; dropping it then lets hyper close the connection.
async fn drain(mut body: Incoming, limit: Drain) {
    let discard = async {
        let mut read = 0u64;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                read += data.len() as u64;
                if read > limit.bytes {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(limit.time, discard).await;
}
