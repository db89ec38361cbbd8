//! What both forwarders share: one event to forward ([`Delivery`]), what came of it
//! ([`Forwarded`]), why it failed ([`ForwardError`]), the seam itself ([`Forwarder`]) and the
//! deadline of a forward. Its own file below the façade, so that the forwarders can import it
//! without importing the module that builds them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;

use super::Target;
use crate::event::VerifiedEvent;
use crate::sinks::SinkError;
use crate::store::{Fingerprint, StoreError};
use crate::util::BoxFuture;

/// Everything a forwarder needs of one event.
pub struct Delivery<'a> {
    pub target: &'a Target,
    pub event: &'a VerifiedEvent,
    /// Unix milliseconds at which the daemon received the request.
    pub received_at_ms: u64,
    /// The request's Content-Type, for sinks that pass it on.
    pub content_type: Option<&'a str>,
}

impl Delivery<'_> {
    /// The payload's fingerprint: the digest verification computed on its way, else a new one.
    pub fn fingerprint(&self) -> Fingerprint {
        match self.event.payload_digest() {
            Some(digest) => {
                let fingerprint = Fingerprint::from_digest(*digest);
                debug_assert_eq!(fingerprint, Fingerprint::of(self.event.fingerprint_input()));
                fingerprint
            }
            None => Fingerprint::of(self.event.fingerprint_input()),
        }
    }
}

/// What forwarding one event came to (one per event of a request, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// New event, now in the queue under this entry ID (or sink acknowledgement). `reclaimed`:
    /// an earlier delivery's lease had expired without completing (two-phase mode).
    New { entry_id: String, reclaimed: bool },
    /// Already forwarded within the window, under this entry ID.
    Duplicate { entry_id: String },
    /// Same event ID, different payload: nothing forwarded.
    Mismatch,
    /// Another delivery of the same event is being forwarded right now.
    InFlight,
    /// New, but another event of the same request was a mismatch or in flight, so nothing of
    /// the request was written; the provider's retry forwards it.
    Withheld,
}

/// Why an event could not be forwarded; every variant answers 503 so the provider retries.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("sink did not take the event")]
    Sink(#[source] SinkError),
    #[error("publish task failed: {0}")]
    Task(String),
    /// The error of a store call that carried several requests, shared by each of them.
    #[error(transparent)]
    Shared(Arc<ForwardError>),
}

/// The exactly-once seam.
pub trait Forwarder: Send + Sync + 'static {
    /// Deduplicates the events of one request (all of one source) and puts the new ones in the
    /// queue: one answer per event, in order. All or nothing: when any event is a mismatch or in
    /// flight, no event is written and the new ones are [`Forwarded::Withheld`].
    ///
    /// The caller keeps the call within [`Forwarder::bound`] when there is one, and answers a
    /// call that runs out of it as a store timeout ([`within`] does): the forwarder sets no
    /// timer of its own, so that a caller with a timer at hand (the webhook front's, one per
    /// connection) pays for no second one.
    fn forward_all<'a>(
        &'a self,
        deliveries: &'a [Delivery<'a>],
    ) -> BoxFuture<'a, Result<Vec<Forwarded>, ForwardError>>;

    /// Deduplicates one event and puts it in the queue unless it is a duplicate.
    fn forward<'a>(
        &'a self,
        delivery: Delivery<'a>,
    ) -> BoxFuture<'a, Result<Forwarded, ForwardError>> {
        Box::pin(async move {
            let one = [delivery];
            let forwarding = self.forward_all(&one);
            let mut answers = match self.bound() {
                Some(bound) => within(bound, forwarding).await?,
                None => forwarding.await?,
            };
            answers
                .pop()
                .ok_or_else(|| StoreError::Protocol("no answer for the event".to_owned()).into())
        })
    }

    /// The longest [`Forwarder::forward_all`] may take (a store call under `store.timeout`, and
    /// the wait for replicas), which its caller applies. `None`: no bound beyond the caller's
    /// own deadline (two-phase sinks, whose steps have deadlines each).
    fn bound(&self) -> Option<Duration> {
        None
    }

    /// Whether the store can serve requests now (`/readyz`).
    fn ready(&self) -> BoxFuture<'_, bool>;

    /// The `sink` label of `hookonce_forward_duration_seconds`.
    fn sink_label(&self) -> &'static str;
}

/// Runs a forward under a deadline; running out of time is a store timeout (503).
///
/// A combinator, not an `async fn`: an `async fn` keeps its argument beside the timer that took
/// it over, so its future was twice the call's (whose future is large: the coalescer's), and
/// every request moves it.
pub(crate) fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, ForwardError>>,
) -> impl Future<Output = Result<T, ForwardError>> {
    tokio::time::timeout(timeout, call)
        .map(move |timed| timed.unwrap_or(Err(StoreError::Timeout(timeout).into())))
}
