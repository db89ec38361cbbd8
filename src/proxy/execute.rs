//! One keyed request against the ledger: claim (waiting up to `wait` for a request in flight),
//! execute upstream, and store or release — the states absent → processing → completed.
//!
//! The claim carries a lease of at least `upstream_timeout`, so it cannot expire while its
//! request is upstream; only a claim whose process died is taken over, by compare-and-set on
//! its token. The store failing before the claim answers 503 and never calls the upstream (fail
//! closed); failing after the upstream answered loses only the stored copy (the client still
//! gets the response, and a retry after the lease executes again).
//!
//! Only an exchange that got no response head (refused, reset or timed out before it) releases
//! the claim. Once the upstream began a storable answer it has executed the request: a body that
//! breaks or does not end in time completes the key as *incomplete*, which this request and every
//! retry answer with a 502 problem until `hookonce forget` deletes the record. The exchange,
//! including a body streamed past `max_stored_body`, is bounded by one `upstream_timeout`
//! counted from sending the request upstream.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{response, Request, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::passthrough::{downstream, failed};
use super::{error_chain, Ending, KeyedRequest, Proxy, ProxyReply};
use crate::ledger::Claim;
use crate::metrics::CompletionFailure;
use crate::outcome::ProxyOutcome;
use crate::proxy::response::StoredResponse;
use crate::proxy::upstream::UpstreamError;
use crate::store::record;
use crate::store::StoreError;
use crate::timer::RequestTimer;

/// The longest pause between two claims of a duplicate waiting on a Redis-held key.
const MAX_POLL: Duration = Duration::from_millis(200);

/// What the upstream exchange gave, read as far as storing it needs.
enum Exchanged {
    /// A `retry_statuses` answer: streamed to the client as sent, the claim released.
    Retry(Response<Incoming>),
    /// The whole body, within `max_stored_body`.
    Whole(response::Parts, Bytes),
    /// Over `max_stored_body`: the body read so far followed by the rest, streamed.
    Over(response::Parts, Body),
    /// A storable head whose body failed or did not end by the deadline: the upstream executed
    /// the request, and there is no whole answer to give or to store.
    Broken(response::Parts, UpstreamError),
}

impl Proxy {
    pub(super) async fn execute(&self, request: KeyedRequest) -> ProxyReply {
        let claim = match self.claim(&request.record_key, &request.fingerprint).await {
            Ok(claim) => claim,
            Err(error) => {
                return ProxyReply::refused(ProxyOutcome::Unavailable, error_chain(&error));
            }
        };
        match claim {
            Claim::Claimed { token, reclaimed } => {
                if reclaimed {
                    self.metrics.lease_taken_over();
                }
                self.run(request, &token).await
            }
            Claim::Done { ack } => match StoredResponse::decode(&ack) {
                Some(stored) if stored.incomplete => ProxyReply::refused(
                    ProxyOutcome::Incomplete,
                    "executed earlier; its answer is stored as incomplete",
                ),
                Some(stored) => ProxyReply {
                    outcome: ProxyOutcome::Replayed,
                    ending: Ending::Replay(stored),
                    detail: None,
                },
                None => {
                    ProxyReply::refused(ProxyOutcome::Unavailable, "unreadable stored response")
                }
            },
            Claim::Mismatch => ProxyReply::refused(ProxyOutcome::KeyReused, "another payload"),
            Claim::InFlight { .. } => ProxyReply::refused(ProxyOutcome::InFlight, "in flight"),
        }
    }

    /// Claims the key; while another request holds it, waits up to `wait` for it to finish
    /// (on the memory ledger's signal, or by polling Redis with backoff) and claims again.
    async fn claim(&self, key: &str, fingerprint: &str) -> Result<Claim, StoreError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut pause = Duration::from_millis(5);
        loop {
            let claim = self
                .ledger
                .claim(key, fingerprint, self.lease, self.ttl)
                .await?;
            let Claim::InFlight { wait } = claim else {
                return Ok(claim);
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Claim::InFlight { wait: None });
            }
            match wait {
                Some(mut settled) => {
                    let _ = tokio::time::timeout_at(deadline, settled.changed()).await;
                }
                None => {
                    tokio::time::sleep(pause.min(deadline - now)).await;
                    pause = (pause * 2).min(MAX_POLL);
                }
            }
        }
    }

    /// Executes a claimed request upstream and settles the claim from the answer.
    async fn run(&self, request: KeyedRequest, token: &str) -> ProxyReply {
        let _held = self.claims.hold();
        let KeyedRequest {
            record_key,
            fingerprint,
            mut parts,
            body,
            peer,
            _admitted,
        } = request;
        if let Err(detail) = self.upstream.prepare(&mut parts, peer) {
            self.release(&record_key, token).await;
            return ProxyReply::refused(ProxyOutcome::Unavailable, detail);
        }
        let started = Instant::now();
        // One deadline for the whole exchange: the head, the stored part of the body, and the
        // rest of a body streamed past max_stored_body, so that no client waits past it.
        let deadline = tokio::time::Instant::now() + self.upstream.timeout();
        let timer = RequestTimer::take(&mut parts.extensions);
        let request = Request::from_parts(parts, Body::from(body.bytes.clone()));
        let result = self.exchange(request, deadline, &timer).await;
        self.metrics
            .upstream
            .record(started.elapsed().as_secs_f64());
        let (parts, body, stored) = match result {
            // No head: the upstream may not have seen the request, so the retry executes again.
            Err(error) => {
                self.release(&record_key, token).await;
                return failed(ProxyOutcome::Released, error);
            }
            Ok(Exchanged::Retry(response)) => {
                self.release(&record_key, token).await;
                let response = downstream(response.map(|b| bounded(Body::new(b), deadline)));
                let detail = format!("upstream answered {}", response.status().as_u16());
                return ProxyReply {
                    outcome: ProxyOutcome::Released,
                    ending: Ending::Upstream(response),
                    detail: Some(detail),
                };
            }
            // The upstream began a storable answer: it executed the request. Releasing would
            // let the retry execute it again, so the key is completed as incomplete instead.
            Ok(Exchanged::Broken(parts, error)) => {
                let stored = StoredResponse::incomplete(parts.status, &parts.headers);
                let failure = self
                    .complete(&record_key, token, &fingerprint, stored)
                    .await;
                let mut detail = format!(
                    "upstream answered {} and then its body broke: {}",
                    parts.status.as_u16(),
                    error_chain(&error)
                );
                if let Some(failure) = failure {
                    detail = format!("{detail}; {failure}");
                }
                return ProxyReply::refused(ProxyOutcome::Incomplete, detail);
            }
            Ok(Exchanged::Whole(parts, bytes)) => {
                let stored =
                    StoredResponse::new(parts.status, &parts.headers, bytes.clone(), false);
                (parts, Body::from(bytes), stored)
            }
            Ok(Exchanged::Over(parts, body)) => {
                let stored = StoredResponse::new(parts.status, &parts.headers, Bytes::new(), true);
                (parts, body, stored)
            }
        };
        let detail = self
            .complete(&record_key, token, &fingerprint, stored)
            .await;
        ProxyReply {
            outcome: ProxyOutcome::Executed,
            ending: Ending::Upstream(downstream(Response::from_parts(parts, body))),
            detail,
        }
    }

    /// Sends the request and reads the answer as far as deciding what to store needs, all by
    /// `deadline`, on the connection's `timer`. An error is an exchange that got no response
    /// head.
    async fn exchange(
        &self,
        request: Request<Body>,
        deadline: tokio::time::Instant,
        timer: &RequestTimer,
    ) -> Result<Exchanged, UpstreamError> {
        let timeout = self.upstream.timeout();
        let mut steps = timer.until(deadline.into_std());
        let sending = std::pin::pin!(self.upstream.send(request));
        let response = steps
            .race(sending)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(timeout)))?;
        if self.retry_statuses.contains(&response.status().as_u16()) {
            return Ok(Exchanged::Retry(response));
        }
        let (parts, mut body) = response.into_parts();
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut size = 0;
        loop {
            let frame = match steps.race(body.frame()).await {
                Some(Some(Ok(frame))) => frame,
                Some(Some(Err(error))) => {
                    return Ok(Exchanged::Broken(
                        parts,
                        UpstreamError::Body(Box::new(error)),
                    ))
                }
                Some(None) => break,
                None => return Ok(Exchanged::Broken(parts, UpstreamError::Timeout(timeout))),
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers are not stored
            };
            size += data.len();
            chunks.push(data);
            if size > self.max_stored_body {
                let read = futures_util::stream::iter(chunks.into_iter().map(Ok));
                let stream = read.chain(body.into_data_stream());
                let body = bounded(Body::from_stream(stream), deadline);
                return Ok(Exchanged::Over(parts, body));
            }
        }
        Ok(Exchanged::Whole(parts, chunks.concat().into()))
    }

    /// Completes the claim with the stored response; the detail to log when that failed or
    /// stored less than the whole answer.
    async fn complete(
        &self,
        key: &str,
        token: &str,
        fingerprint: &str,
        stored: StoredResponse,
    ) -> Option<String> {
        // Set-Cookie is the first client's session: it reached that client, it is not replayed.
        let stored = if self.store_set_cookie {
            stored
        } else {
            stored.without_set_cookie()
        };
        let room = record::done_room(fingerprint);
        let done = record::done_from(stored.encode_with_room(room), fingerprint);
        let mut result = self.ledger.complete(key, token, &done, self.ttl).await;
        let mut note = None;
        // The memory store's byte budget is full: the execution must not be lost for want of
        // room for its body, so the key is completed with status and headers only, as an answer
        // over max_stored_body is, and its replays say Idempotency-Replay-Truncated.
        if matches!(result, Err(StoreError::FullBytes(_))) && !stored.body.is_empty() {
            let done = record::done_from(stored.truncate().encode_with_room(room), fingerprint);
            result = self.ledger.complete(key, token, &done, self.ttl).await;
            note =
                Some("answer stored truncated: it would not fit store.memory_max_bytes".to_owned());
        }
        let (why, detail) = match result {
            Ok(true) => return note,
            Ok(false) => (
                CompletionFailure::TakenOver,
                "claim was taken over before completion; not stored".to_owned(),
            ),
            // The record is on the master, the replicas did not confirm it in time: a failover
            // now could lose it, and the client's retry would then execute again.
            Err(error @ StoreError::Replication { .. }) => (
                CompletionFailure::Unconfirmed,
                format!(
                    "response stored but not confirmed by the replicas: {}",
                    error_chain(&error)
                ),
            ),
            Err(error) => (
                CompletionFailure::StoreError,
                format!("response not stored: {}", error_chain(&error)),
            ),
        };
        self.metrics.completion_failed(why);
        Some(detail)
    }

    /// Gives the claim up, so that the client's retry executes again.
    async fn release(&self, key: &str, token: &str) {
        if let Err(error) = self.ledger.release(key, token).await {
            // The claim then blocks retries until its lease ends; nothing worse.
            tracing::warn!(message = "Cannot release a proxy claim.", proxy = %self.name, error = error_chain(&error));
        }
    }
}

/// `body`, cut off at `deadline`: a body still streaming then ends with an error, so that the
/// client's connection is closed without a clean end (a cut body must not look complete).
fn bounded(body: Body, deadline: tokio::time::Instant) -> Body {
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let stream =
        futures_util::stream::unfold(Some(body.into_data_stream()), move |state| async move {
            let mut stream = state?;
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(Ok(data))) => Some((Ok(data), Some(stream))),
                Ok(Some(Err(error))) => Some((Err(BoxError::from(error)), None)),
                Ok(None) => None,
                Err(_) => Some((
                    Err(BoxError::from(
                        "the upstream's answer did not end within upstream_timeout",
                    )),
                    None,
                )),
            }
        });
    Body::from_stream(stream)
}
