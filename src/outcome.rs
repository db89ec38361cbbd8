//! The outcomes of a delivery (docs/design.md, "Outcomes and status codes"): one per event, used
//! as the `outcome` metric label.

/// What happened to one event (or to a request that never got as far as an event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Forwarded,
    Duplicate,
    InFlight,
    PayloadMismatch,
    InvalidSignature,
    StaleTimestamp,
    Malformed,
    TooLarge,
    Unavailable,
    UnknownSource,
    /// The client went away before its body was complete: nobody hears the answer.
    Aborted,
    /// The body was not complete within `server.body_read_timeout`.
    BodyTimeout,
    /// The client is not in the source's `allowed_ips`: 403, the body not read.
    Forbidden,
    /// The source's `rate_limit` (a verified delivery) or the client's `server.rejected_limit`
    /// (before the body) is spent: 429 + `Retry-After`.
    RateLimited,
}

impl Outcome {
    pub const ALL: [Outcome; 14] = [
        Outcome::Forwarded,
        Outcome::Duplicate,
        Outcome::InFlight,
        Outcome::PayloadMismatch,
        Outcome::InvalidSignature,
        Outcome::StaleTimestamp,
        Outcome::Malformed,
        Outcome::TooLarge,
        Outcome::Unavailable,
        Outcome::UnknownSource,
        Outcome::Aborted,
        Outcome::BodyTimeout,
        Outcome::Forbidden,
        Outcome::RateLimited,
    ];

    /// The metric label and the `error` field of rejection bodies.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Duplicate => "duplicate",
            Outcome::InFlight => "in_flight",
            Outcome::PayloadMismatch => "payload_mismatch",
            Outcome::InvalidSignature => "invalid_signature",
            Outcome::StaleTimestamp => "stale_timestamp",
            Outcome::Malformed => "malformed",
            Outcome::TooLarge => "too_large",
            Outcome::Unavailable => "unavailable",
            Outcome::UnknownSource => "unknown_source",
            Outcome::Aborted => "aborted",
            Outcome::BodyTimeout => "body_timeout",
            Outcome::Forbidden => "forbidden",
            Outcome::RateLimited => "rate_limited",
        }
    }

    /// Position in `ALL`, for arrays of pre-registered metric handles.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The event reached the queue, now or earlier: the provider may stop retrying.
    pub fn is_accepted(self) -> bool {
        matches!(self, Outcome::Forwarded | Outcome::Duplicate)
    }

    /// Which outcome speaks for a request carrying several events: the one the provider must act on.
    /// A retryable failure outranks a permanent one, which outranks success, so that a batch is
    /// acknowledged only when every event is in the queue.
    pub fn severity(self) -> u8 {
        match self {
            Outcome::Forwarded => 0,
            Outcome::Duplicate => 1,
            Outcome::PayloadMismatch => 2,
            Outcome::InFlight => 3,
            Outcome::Unavailable => 4,
            _ => 5,
        }
    }

    /// The outcome that speaks for a request from those of its events: the most pressing
    /// refusal ([`Outcome::severity`]), else `forwarded` when any event reached the queue now,
    /// else `duplicate`. So a batch with one new event among duplicates is a forwarded request.
    pub fn of_request(events: &[Outcome]) -> Outcome {
        let worst = events
            .iter()
            .copied()
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Malformed);
        if worst == Outcome::Duplicate && events.contains(&Outcome::Forwarded) {
            Outcome::Forwarded
        } else {
            worst
        }
    }
}

/// What happened to one request on an Idempotency-Key proxy (docs/design.md,
/// "Idempotency-Key proxy"): the `outcome` label of the `hookonce_proxy_*` metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyOutcome {
    /// The upstream ran the request and its response was stored.
    Executed,
    /// A stored response was answered again (also after waiting for the first).
    Replayed,
    /// Another request with this key is being executed: 409.
    InFlight,
    /// The key was used with another payload: 422.
    KeyReused,
    /// A key is required and none was sent: 400.
    MissingKey,
    /// The key header is present but not a valid key: 400.
    InvalidKey,
    /// Not subject to idempotency (method, path, or no key where none is required).
    PassedThrough,
    /// The upstream answered a retry status, timed out or failed: the claim was given up.
    Released,
    /// The store failed (or the daemon is saturated); the upstream was not called: 503.
    Unavailable,
    /// A keyed request whose body exceeds `server.body_limit`: 413.
    TooLarge,
    /// A keyed request whose body framing is broken (chunked encoding): 400.
    Malformed,
    /// A keyed request whose body was not complete within `server.body_read_timeout`: 408.
    BodyTimeout,
    /// The client went away before its keyed body was complete: nobody hears the answer.
    Aborted,
    /// A request on a keyed method whose path is not in its one canonical spelling (`//`,
    /// `/./`, `%`-encoded unreserved characters, `;` parameters, a trailing slash or letter case
    /// that differ from a route): 400, never passed through unkeyed.
    NonCanonicalPath,
    /// The upstream began a storable answer that broke: the request was executed, its answer is
    /// incomplete, and it and every retry get 502 until the key is forgotten.
    Incomplete,
}

impl ProxyOutcome {
    pub const ALL: [ProxyOutcome; 15] = [
        ProxyOutcome::Executed,
        ProxyOutcome::Replayed,
        ProxyOutcome::InFlight,
        ProxyOutcome::KeyReused,
        ProxyOutcome::MissingKey,
        ProxyOutcome::InvalidKey,
        ProxyOutcome::PassedThrough,
        ProxyOutcome::Released,
        ProxyOutcome::Unavailable,
        ProxyOutcome::TooLarge,
        ProxyOutcome::Malformed,
        ProxyOutcome::BodyTimeout,
        ProxyOutcome::Aborted,
        ProxyOutcome::NonCanonicalPath,
        ProxyOutcome::Incomplete,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ProxyOutcome::Executed => "executed",
            ProxyOutcome::Replayed => "replayed",
            ProxyOutcome::InFlight => "in_flight",
            ProxyOutcome::KeyReused => "key_reused",
            ProxyOutcome::MissingKey => "missing_key",
            ProxyOutcome::InvalidKey => "invalid_key",
            ProxyOutcome::PassedThrough => "passed_through",
            ProxyOutcome::Released => "released",
            ProxyOutcome::Unavailable => "unavailable",
            ProxyOutcome::TooLarge => "too_large",
            ProxyOutcome::Malformed => "malformed",
            ProxyOutcome::BodyTimeout => "body_timeout",
            ProxyOutcome::Aborted => "aborted",
            ProxyOutcome::NonCanonicalPath => "non_canonical_path",
            ProxyOutcome::Incomplete => "incomplete",
        }
    }

    /// Position in `ALL`, for arrays of pre-registered metric handles.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What became of one relay attempt or entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayOutcome {
    Delivered,
    Failed,
    DeadLettered,
    Skipped,
}

impl RelayOutcome {
    pub const ALL: [RelayOutcome; 4] = [
        RelayOutcome::Delivered,
        RelayOutcome::Failed,
        RelayOutcome::DeadLettered,
        RelayOutcome::Skipped,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RelayOutcome::Delivered => "delivered",
            RelayOutcome::Failed => "failed",
            RelayOutcome::DeadLettered => "dead_lettered",
            RelayOutcome::Skipped => "skipped",
        }
    }
}
