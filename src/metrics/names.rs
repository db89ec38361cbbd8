//! Every metric name in one place (docs/design.md, "Metrics"). Its own file below the façade,
//! so that the files that register handles share the names without importing each other or it.

pub const EVENTS_TOTAL: &str = "hookonce_events_total";
pub const DUPLICATE_HITS_TOTAL: &str = "hookonce_duplicate_hits_total";
pub const HTTP_REQUESTS_TOTAL: &str = "hookonce_http_requests_total";
pub const REQUEST_DURATION_SECONDS: &str = "hookonce_request_duration_seconds";
pub const STORE_DURATION_SECONDS: &str = "hookonce_store_duration_seconds";
pub const FORWARD_DURATION_SECONDS: &str = "hookonce_forward_duration_seconds";
pub const STORE_BATCH_REQUESTS: &str = "hookonce_store_batch_requests";
pub const STORE_BATCH_EVENTS: &str = "hookonce_store_batch_events";
pub const BUILD_INFO: &str = "hookonce_build_info";
pub const REQUESTS_IN_FLIGHT: &str = "hookonce_requests_in_flight";
pub const BODY_READS_IN_FLIGHT: &str = "hookonce_body_reads_in_flight";
pub const BODY_MEMORY_BYTES: &str = "hookonce_body_memory_bytes";
pub const LEASE_RECLAIMS_TOTAL: &str = "hookonce_lease_reclaims_total";
pub const STREAM_LENGTH: &str = "hookonce_stream_length";
pub const READY: &str = "hookonce_ready";
pub const CONFIG_RELOADS_TOTAL: &str = "hookonce_config_reloads_total";
pub const CONFIG_LAST_RELOAD_SUCCESSFUL: &str = "hookonce_config_last_reload_successful";
pub const PROXY_REQUESTS_TOTAL: &str = "hookonce_proxy_requests_total";
pub const PROXY_DURATION_SECONDS: &str = "hookonce_proxy_duration_seconds";
pub const PROXY_UPSTREAM_DURATION_SECONDS: &str = "hookonce_proxy_upstream_duration_seconds";
pub const PROXY_CLAIMS_HELD: &str = "hookonce_proxy_claims_held";
pub const PROXY_OLDEST_CLAIM_SECONDS: &str = "hookonce_proxy_oldest_claim_seconds";
pub const PROXY_LEASE_TAKEOVERS_TOTAL: &str = "hookonce_proxy_lease_takeovers_total";
pub const PROXY_COMPLETION_FAILURES_TOTAL: &str = "hookonce_proxy_completion_failures_total";
pub const RELAY_DELIVERIES_TOTAL: &str = "hookonce_relay_deliveries_total";
pub const RELAY_ATTEMPT_DURATION_SECONDS: &str = "hookonce_relay_attempt_duration_seconds";
pub const RELAY_END_TO_END_SECONDS: &str = "hookonce_relay_end_to_end_seconds";
pub const RELAY_LAG: &str = "hookonce_relay_lag";
pub const DEAD_LETTERS: &str = "hookonce_dead_letters";
pub const TELEMETRY_EXPORT_FAILURES_TOTAL: &str = "hookonce_telemetry_export_failures_total";

/// Label value for requests whose source is not configured.
pub const UNKNOWN_SOURCE: &str = "_unknown";
