//! The webhook listener's gate, in front of every source: who the client is (through
//! `server.trusted_proxies`) and whether it has spent its allowance of rejected requests
//! (`server.rejected_limit`). Built from the server's settings and held by the pipeline, so a
//! reload builds a new one and swaps it.

use std::net::IpAddr;
use std::time::Duration;

use axum::http::HeaderMap;

use super::client_addr::{self, ClientAddr};
use super::client_table::ClientTable;
use super::networks::Networks;
use crate::config::{ConfigError, ServerSettings};
use crate::outcome::Outcome;

/// Trusted proxies and the table of clients' rejected requests.
#[derive(Debug, Default)]
pub struct Gate {
    trusted: Networks,
    /// `None` when `server.rejected_limit` is not set.
    rejected: Option<ClientTable>,
}

impl Gate {
    pub fn from_settings(server: &ServerSettings) -> Result<Self, ConfigError> {
        Ok(Self {
            trusted: Networks::new(&server.trusted_proxies),
            rejected: server.rejected_requests_limit()?.map(ClientTable::new),
        })
    }

    /// The client of a request from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> ClientAddr {
        client_addr::resolve(peer, headers, &self.trusted)
    }

    /// `Err(wait)` while `client` has spent its rejected requests: answer 429 without reading
    /// the body.
    pub fn check(&self, client: &ClientAddr) -> Result<(), Duration> {
        self.rejected.as_ref().map_or(Ok(()), |t| t.check(client))
    }

    /// Charges `client` for a request that ended in `outcome`, if that is a rejection.
    pub fn settle(&self, client: &ClientAddr, outcome: Outcome) {
        if let (Some(table), true) = (&self.rejected, charges(outcome)) {
            table.charge(client);
        }
    }
}

/// Whether an outcome is charged to its client's rejected requests: every answer that says the
/// request itself was wrong or unwelcome. Not charged: what a client holding the secret can get
/// (`forwarded`, `duplicate`, `in_flight`, `payload_mismatch`, a source's `rate_limited`), what
/// is the daemon's own trouble (`unavailable`), and the 429 of this limit itself, which would
/// otherwise keep a client out for as long as it retried.
pub fn charges(outcome: Outcome) -> bool {
    match outcome {
        Outcome::UnknownSource
        | Outcome::Forbidden
        | Outcome::InvalidSignature
        | Outcome::StaleTimestamp
        | Outcome::Malformed
        | Outcome::TooLarge
        | Outcome::BodyTimeout
        | Outcome::Aborted => true,
        Outcome::Forwarded
        | Outcome::Duplicate
        | Outcome::InFlight
        | Outcome::PayloadMismatch
        | Outcome::Unavailable
        | Outcome::RateLimited => false,
    }
}
