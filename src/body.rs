//! Receiving a request's body, bounded in size, in time, and in the memory all bodies may hold.
//!
//! Both fronts read their bodies here, through one [`BodyReader`] that the application builds
//! (`BodyReader::from_settings`): a webhook's body, and a keyed proxy request's (its fingerprint
//! covers the body). Bodies are read before a request is admitted (`server.max_in_flight`), so that a client that
//! sends its headers and then trickles or stalls its body holds no admission permit. What such a
//! client can still take is bounded here instead: its body must be complete within
//! `server.body_read_timeout`, and the bytes it has sent count against `server.body_memory_limit`,
//! which all bodies being read or handled share. The budget is charged by the bytes received, not
//! by a declared `Content-Length`, so that a thousand stalled bodies of one byte each hold a
//! thousand bytes rather than a thousand times the body limit.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ServerSettings;
use crate::metrics::BodyGauges;
use crate::timer::within_once_waiting;
use crate::util::scopeguard;

/// Reads bodies for every connection; shares the memory budget between them.
pub struct BodyReader {
    limit: usize,
    timeout: Duration,
    memory: Arc<Semaphore>,
    gauges: BodyGauges,
}

/// A complete body, and its share of the memory budget, given back when it is dropped.
pub struct ReceivedBody {
    pub bytes: Bytes,
    _memory: Charge,
}

/// Bytes taken from the memory budget, given back (and taken off the gauge) when dropped.
struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    gauge: metrics::Gauge,
}

impl Charge {
    fn add(&mut self, permit: OwnedSemaphorePermit) {
        self.gauge.increment(permit.num_permits() as f64);
        match self.permit.as_mut() {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(permit) = &self.permit {
            self.gauge.decrement(permit.num_permits() as f64);
        }
    }
}

/// Why a body could not be received.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("declared body of {0} bytes is over the limit")]
    DeclaredTooLarge(u64),
    #[error("body over the limit")]
    TooLarge,
    #[error("body not complete within {0:?}")]
    TimedOut(Duration),
    #[error("bodies being handled hold all of server.body_memory_limit")]
    MemoryFull,
    #[error("the connection ended before the body was complete")]
    Aborted(#[source] axum::Error),
    #[error("cannot read body")]
    Unreadable(#[source] axum::Error),
}

impl BodyReader {
    /// The reader of `server.body_limit`, `body_read_timeout` (within `request_timeout`:
    /// whichever is shorter cuts a slow body) and `body_memory_limit`.
    pub fn from_settings(server: &ServerSettings, gauges: BodyGauges) -> Self {
        Self::new(
            usize::try_from(server.body_limit.0).unwrap_or(usize::MAX),
            server.body_read_timeout.0.min(server.request_timeout.0),
            usize::try_from(server.body_memory_limit.0).unwrap_or(usize::MAX),
            gauges,
        )
    }

    /// `timeout` is the body's deadline, counted from the first wait for its bytes (right
    /// after its headers); `memory` is in bytes.
    pub fn new(limit: usize, timeout: Duration, memory: usize, gauges: BodyGauges) -> Self {
        Self {
            limit,
            timeout,
            memory: Arc::new(Semaphore::new(memory.min(Semaphore::MAX_PERMITS))),
            gauges,
        }
    }

    /// Reads the whole body, or says why not.
    pub async fn read(&self, headers: &HeaderMap, body: Body) -> Result<ReceivedBody, BodyError> {
        let declared = crate::util::declared_length(headers);
        if let Some(declared) = declared.filter(|n| *n > self.limit as u64) {
            return Err(BodyError::DeclaredTooLarge(declared));
        }
        self.gauges.reading.increment(1.0);
        let _reading = scopeguard(|| self.gauges.reading.decrement(1.0));
        // Nearly every webhook's body is in with its headers: no timer then.
        within_once_waiting(self.timeout, self.collect(body, declared))
            .await
            .unwrap_or(Err(BodyError::TimedOut(self.timeout)))
    }

    /// `declared`: the request's `Content-Length`, already checked against the limit.
    async fn collect(
        &self,
        mut body: Body,
        declared: Option<u64>,
    ) -> Result<ReceivedBody, BodyError> {
        let mut bytes = Pieces::new(declared);
        let mut memory = Charge {
            permit: None,
            gauge: self.gauges.memory_bytes.clone(),
        };
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(classify)?.into_data() else {
                // Trailers carry no body bytes, and no provider signs them.
                continue;
            };
            if bytes.len() + data.len() > self.limit {
                return Err(BodyError::TooLarge);
            }
            // The chunk is charged before it is kept; `limit` is at most the budget (checked at
            // configuration time), so one body alone always fits.
            let size = u32::try_from(data.len()).map_err(|_| BodyError::TooLarge)?;
            let charged = Arc::clone(&self.memory)
                .try_acquire_many_owned(size)
                .map_err(|_| BodyError::MemoryFull)?;
            memory.add(charged);
            bytes.extend(&data);
        }
        Ok(ReceivedBody {
            bytes: bytes.finish(),
            _memory: memory,
        })
    }
}

/// Bytes of the largest piece a body is received in ([`Pieces`]).
const PIECE: usize = 64 * 1024;

/// Bytes of the first piece of a body whose length is not declared, unless its first chunk is
/// larger.
const FIRST_UNDECLARED: usize = 4 * 1024;

/// A body being received: in pieces of at most [`PIECE`] bytes, each filled before the next is
/// taken, joined into one buffer when the body is complete. A body of one piece (a declared
/// length up to `PIECE`, nearly every webhook) is received into one buffer of its length and
/// never copied again.
///
/// Why not one buffer of the declared length, taken with the body's first bytes: then every body
/// of a flood has its buffer from the start, and a page of it takes memory as the body's bytes
/// are written there. A body refused (`body_memory_limit`) or cut off (its client gone) frees what
/// it had received, but the bodies that go on write into the buffers they already have, and that
/// memory goes unused: the process held about what all the bodies had received together, up to
/// three times the budget. A piece is taken when bytes arrive for it, so it takes the memory a
/// refused body let go. What the budget does not count is a piece partly filled per body being
/// received and the whole buffers being joined (tests/it/hostile_http/body_memory.rs,
/// bench/body-flood, BENCHMARKS.md).
struct Pieces {
    declared: Option<u64>,
    full: Vec<Bytes>,
    current: BytesMut,
    len: usize,
}

impl Pieces {
    fn new(declared: Option<u64>) -> Self {
        Self {
            declared,
            full: Vec::new(),
            current: BytesMut::new(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn extend(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.current.len() == self.current.capacity() {
                if !self.current.is_empty() {
                    self.full.push(std::mem::take(&mut self.current).freeze());
                }
                // What is left of a declared length, so that a body of one piece is a buffer of
                // its own length (hyper ends a body that would outgrow it). Without one (chunked
                // framing), about what has arrived so far, from 4 KiB: a small body stays small,
                // and a long one trickled in byte by byte still makes few pieces. A new buffer
                // rather than `reserve` on the empty one: that rounds a few bytes up to eight.
                let next = match self.declared.and_then(|n| usize::try_from(n).ok()) {
                    Some(declared) => declared.saturating_sub(self.len),
                    None => self.len.max(data.len()).max(FIRST_UNDECLARED),
                };
                self.current = BytesMut::with_capacity(next.clamp(1, PIECE));
            }
            let room = self.current.capacity() - self.current.len();
            let (now, rest) = data.split_at(room.min(data.len()));
            self.current.extend_from_slice(now);
            self.len += now.len();
            data = rest;
        }
    }

    /// The whole body, in one buffer.
    fn finish(self) -> Bytes {
        if self.full.is_empty() {
            return self.current.freeze();
        }
        let mut whole = BytesMut::with_capacity(self.len);
        for piece in self.full {
            whole.extend_from_slice(&piece);
        }
        whole.extend_from_slice(&self.current);
        whole.freeze()
    }
}

/// A body that fails to arrive is either cut short (the connection closed or broke: the client
/// is gone) or is not valid HTTP framing (a broken chunked encoding: the client is wrong). hyper
/// reports the second as an I/O error of kind `InvalidInput` or `InvalidData`.
fn classify(error: axum::Error) -> BodyError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(inner) = cause {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
            ) {
                return BodyError::Unreadable(error);
            }
        }
        cause = inner.source();
    }
    BodyError::Aborted(error)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::property::check;

    /// The property below found it (one case in a few hundred runs): a declared body of fewer
    /// than eight bytes took eight, `reserve`'s least allocation.
    #[test]
    fn a_declared_body_of_a_few_bytes_is_a_buffer_of_its_length() {
        for total in 1..=9usize {
            let body = vec![7u8; total];
            let mut pieces = Pieces::new(Some(total as u64));
            pieces.extend(&body);
            assert!(pieces.full.is_empty(), "{total}");
            assert_eq!(pieces.current.capacity(), total);
            assert_eq!(&pieces.finish()[..], &body[..]);
        }
    }

    /// Whatever the chunks and whether the length is declared, the body comes out as sent; a
    /// declared body's pieces are full but the last, and a body of one piece is one buffer of its
    /// own length; an undeclared body's pieces grow with it.
    #[test]
    fn pieces_join_into_the_body_as_sent() {
        let chunks = prop::collection::vec(1usize..40_000, 0..12);
        check(256, (chunks, any::<bool>()), |(chunks, declare)| {
            let total: usize = chunks.iter().sum();
            let body: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
            let mut pieces = Pieces::new(declare.then_some(total as u64));
            let mut at = 0;
            for size in chunks {
                pieces.extend(&body[at..at + size]);
                at += size;
                prop_assert_eq!(pieces.len(), at);
            }
            if declare {
                prop_assert!(pieces.full.iter().all(|piece| piece.len() == PIECE));
            } else {
                prop_assert!(pieces.full.iter().all(|piece| piece.len() <= PIECE));
                // Each piece about what came before it: few pieces for a long body.
                prop_assert!(pieces.full.len() <= 5 + total / PIECE);
            }
            if declare && total <= PIECE {
                prop_assert!(pieces.full.is_empty());
                prop_assert_eq!(pieces.current.capacity(), total);
            }
            if !declare && total <= FIRST_UNDECLARED {
                prop_assert!(pieces.current.capacity() <= FIRST_UNDECLARED);
            }
            prop_assert_eq!(&pieces.finish()[..], &body[..]);
            Ok(())
        });
    }
}
