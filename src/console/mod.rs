//! The web console: a window on every event — overview, events, one event's path through dedup,
//! the stream and the relay, dead letters (replay, delete) and the audit log — on its own
//! listener (`[console] listen`), with a JSON API under `/api/v1/` for scripts.
//!
//! - `state.rs`: [`Console`], what the handlers share; `router.rs`: the routes.
//! - `auth.rs`: tokens, the identity header, sessions and CSRF tokens; `guard.rs`: the
//!   concurrency limit, the security headers and who a request is from.
//! - `reads.rs`: events and one event from Redis; `overview.rs`: the overview's numbers;
//!   `counts.rs`: the cluster-wide per-minute counts; `audit.rs`: the audit log.
//! - `keys.rs` and `keys_http.rs`: proxy keys looked up and forgotten.
//! - `writes.rs`: replay and delete through `relay::dlq`, audited; `batch.rs`: replaying a
//!   filtered set, after a preview of how many.
//! - `pages.rs` and `views.rs` (askama templates in `templates/`, the stylesheet in `assets/`):
//!   the HTML; `api.rs`: the JSON.

mod api;
mod audit;
mod auth;
mod batch;
mod batch_http;
mod counts;
mod guard;
mod keys;
mod keys_http;
mod overview;
mod pages;
mod reads;
mod router;
mod state;
mod views;
mod writes;

pub use audit::{record_cli, AuditEntry};
pub use auth::{Principal, Role};
pub use guard::CSP;
pub use router::router;
pub use state::Console;
