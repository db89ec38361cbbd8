//! Every metric's unit and help text, and which metrics are gauges, for describing them to the
//! recorder once at start-up (`registry.rs`).

use metrics::Unit;

use super::names::*;

/// Metric names that are gauges (the others are counters or, ending in `_seconds`, histograms).
pub(super) const GAUGES: [&str; 9] = [
    BUILD_INFO,
    REQUESTS_IN_FLIGHT,
    BODY_READS_IN_FLIGHT,
    BODY_MEMORY_BYTES,
    STREAM_LENGTH,
    READY,
    CONFIG_LAST_RELOAD_SUCCESSFUL,
    PROXY_CLAIMS_HELD,
    PROXY_OLDEST_CLAIM_SECONDS,
];

/// Every metric's unit and help text.
pub(super) const HELP: [(&str, Unit, &str); 25] = [
    (EVENTS_TOTAL, Unit::Count, "Events by source and outcome."),
    (
        DUPLICATE_HITS_TOTAL,
        Unit::Count,
        "Duplicate deliveries absorbed.",
    ),
    (
        HTTP_REQUESTS_TOTAL,
        Unit::Count,
        "Webhook requests by source and status.",
    ),
    (
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Webhook request latency.",
    ),
    (
        STORE_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of store operations.",
    ),
    (
        FORWARD_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of forwarding one event.",
    ),
    (
        STORE_BATCH_REQUESTS,
        Unit::Count,
        "Requests per atomic-mode script call (several when concurrent requests coalesce).",
    ),
    (
        STORE_BATCH_EVENTS,
        Unit::Count,
        "Events per atomic-mode script call.",
    ),
    (BUILD_INFO, Unit::Count, "Build information."),
    (
        REQUESTS_IN_FLIGHT,
        Unit::Count,
        "Requests admitted (a webhook's body is in) and being handled.",
    ),
    (
        BODY_READS_IN_FLIGHT,
        Unit::Count,
        "Webhook request bodies being received, before admission.",
    ),
    (
        BODY_MEMORY_BYTES,
        Unit::Bytes,
        "Bytes of webhook request bodies held in memory (of server.body_memory_limit).",
    ),
    (
        LEASE_RECLAIMS_TOTAL,
        Unit::Count,
        "Claims taken over after an earlier lease expired (two-phase mode).",
    ),
    (
        STREAM_LENGTH,
        Unit::Count,
        "Entries in a source's Redis Stream (sampled).",
    ),
    (
        READY,
        Unit::Count,
        "1 while the store and sink answer readiness checks, else 0.",
    ),
    (
        CONFIG_RELOADS_TOTAL,
        Unit::Count,
        "Configuration reloads (SIGHUP) by result: applied, or refused (the running configuration kept).",
    ),
    (
        CONFIG_LAST_RELOAD_SUCCESSFUL,
        Unit::Count,
        "0 when the last reload was refused (the running configuration is not the file's), else 1.",
    ),
    (
        PROXY_REQUESTS_TOTAL,
        Unit::Count,
        "Idempotency-Key proxy requests by proxy and outcome.",
    ),
    (
        PROXY_DURATION_SECONDS,
        Unit::Seconds,
        "Idempotency-Key proxy request latency by outcome.",
    ),
    (
        PROXY_UPSTREAM_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of the upstream exchange of proxied requests.",
    ),
    (
        PROXY_CLAIMS_HELD,
        Unit::Count,
        "Idempotency keys this process is executing now (processing claims it holds).",
    ),
    (
        PROXY_OLDEST_CLAIM_SECONDS,
        Unit::Count,
        "Age of the oldest processing claim this process holds; 0 when none (sampled).",
    ),
    (
        PROXY_LEASE_TAKEOVERS_TOTAL,
        Unit::Count,
        "Claims taken over after their lease expired (the proxy holding them died).",
    ),
    (
        PROXY_COMPLETION_FAILURES_TOTAL,
        Unit::Count,
        "Executed requests whose response does not protect their retries: not stored, taken over, or stored but not confirmed by the replicas.",
    ),
    (
        TELEMETRY_EXPORT_FAILURES_TOTAL,
        Unit::Count,
        "Batches of spans the OTLP collector did not take (down, slow or refusing); their spans are lost.",
    ),
];

/// The relay's metric names that are gauges.
pub(super) const RELAY_GAUGES: [&str; 2] = [RELAY_LAG, DEAD_LETTERS];

/// The relay's metrics' units and help texts.
pub(super) const RELAY_HELP: [(&str, Unit, &str); 5] = [
    (
        RELAY_DELIVERIES_TOTAL,
        Unit::Count,
        "Relay results by route: delivered, failed (attempts that did not succeed), dead_lettered, skipped (not matched).",
    ),
    (
        RELAY_ATTEMPT_DURATION_SECONDS,
        Unit::Seconds,
        "Latency of one delivery attempt to a route's worker.",
    ),
    (
        RELAY_END_TO_END_SECONDS,
        Unit::Seconds,
        "From receiving the webhook to the worker's 2xx.",
    ),
    (
        RELAY_LAG,
        Unit::Count,
        "Entries of a source's stream the route has not acknowledged, unread or pending (sampled).",
    ),
    (
        DEAD_LETTERS,
        Unit::Count,
        "Entries in a route's dead-letter stream for a source (sampled).",
    ),
];
