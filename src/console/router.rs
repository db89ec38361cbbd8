//! The console's routes: the pages, the JSON API under `/api/v1/` and the stylesheet, behind
//! the concurrency limit and with the security headers on every answer.

use std::sync::Arc;

use axum::middleware;
use axum::routing::{get, post};
use axum::Router;

use super::state::Console;
use super::{api, batch_http, guard, keys_http, pages};

/// The router of the console's listener.
pub fn router(console: Arc<Console>) -> Router {
    let api = Router::new()
        .route("/overview", get(api::overview_json))
        .route("/events", get(api::events_json))
        .route("/events/{source}/{*event_id}", get(api::event_json))
        .route("/dead-letters", get(api::dead_letters_json))
        .route("/dead-letters/{route}/{id}/replay", post(api::replay_json))
        .route(
            "/dead-letters/{route}/{id}",
            axum::routing::delete(api::delete_json),
        )
        .route(
            "/dead-letters/{route}/replay-matching",
            get(batch_http::preview_json).post(batch_http::replay_json),
        )
        .route(
            "/keys",
            get(keys_http::key_json).delete(keys_http::forget_json),
        )
        .route("/audit", get(api::audit_json));
    Router::new()
        .route("/", get(pages::overview_page))
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/logout", post(pages::logout))
        .route("/events", get(pages::events_page))
        .route("/events/{source}/{*event_id}", get(pages::event_page))
        .route("/dead-letters", get(pages::dead_letters_page))
        .route(
            "/dead-letters/{route}/{id}/{action}",
            post(pages::dead_letter_write),
        )
        .route(
            "/dead-letters/{route}/replay-matching",
            get(batch_http::preview_page).post(batch_http::replay_page),
        )
        .route(
            "/keys",
            get(keys_http::keys_page).post(keys_http::look_up_page),
        )
        .route("/keys/forget", post(keys_http::forget_page))
        .route("/audit", get(pages::audit_page))
        .route("/assets/console.css", get(pages::stylesheet))
        .nest("/api/v1", api)
        .layer(middleware::map_response(guard::secure))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&console),
            guard::limit,
        ))
        .with_state(console)
}
