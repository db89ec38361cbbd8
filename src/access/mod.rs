//! Who may call the webhook front (docs/design.md, "Who may call").
//!
//! - `client_addr`: the client of a request — the socket's peer, or through
//!   `server.trusted_proxies` the rightmost untrusted hop of `X-Forwarded-For` / `Forwarded`.
//! - `source_access`: one source's allowlist (`allowed_ips`) and delivery bucket (`rate_limit`).
//! - `gate`: the listener's trusted proxies and the per-client bucket of rejected requests
//!   (`server.rejected_limit`), over `client_table`, which bounds it in memory.
//! - `bucket`: the token buckets (GCRA), `networks`: lists of address ranges.
//!
//! Everything here is built from settings by `from_settings` and holds no global state, so a
//! reload of the configuration builds new ones and swaps them.

mod bucket;
mod client_addr;
mod client_table;
mod gate;
mod networks;
mod source_access;

pub use bucket::retry_after_secs;
pub use client_addr::{resolve, ClientAddr, X_FORWARDED_FOR};
pub use client_table::MAX_CLIENTS;
pub use gate::{charges, Gate};
pub use networks::Networks;
pub use source_access::SourceAccess;
