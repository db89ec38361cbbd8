//! The console against a real daemon: a real redis-server, the relay delivering to a real HTTP
//! worker (`support::relay_worker`), the console on its own loopback listener, spoken to over
//! HTTP (`api.rs`, `pages.rs`) and by a real browser (`browser.rs`: Debian's chromium driven
//! over WebDriver). This file holds the setup they share.

mod access;
mod api;
mod browser;
mod keys;
mod pages;
mod scale;

use hookonce::config::Secret;

use crate::relay::{dead_letters, route, send, xlen};
use crate::support::relay_worker::{Answer, RelayWorker};
use crate::support::{eventually, Backend, TestApp};

pub const VIEWER: &str = "viewer-token-for-tests";
pub const OPERATOR: &str = "operator-token-for-tests";
/// Payloads that would run script if the console did not escape them.
pub const SCRIPT: &str = "<script>document.title='pwned';alert(1)</script>";
pub const IMG: &str = "\"><img src=x onerror=alert(1)>";

/// A daemon over a fresh Redis with the relay (route `billing` over `stripe`, two attempts, to
/// `worker`) and a console with one viewer and one operator token.
pub async fn start(worker: &RelayWorker) -> TestApp {
    let billing = hookonce::config::RouteSettings {
        max_attempts: 2,
        ..route(&["stripe"], &worker.url("billing"))
    };
    TestApp::builder(Backend::Redis)
        .relay(|r| *r = crate::relay::relay(true, vec![("billing", billing)]))
        .console(|c| {
            c.viewer_tokens = vec![Secret::literal(VIEWER).unwrap()];
            c.operator_tokens = vec![Secret::literal(OPERATOR).unwrap()];
        })
        .start()
        .await
}

/// The console's URL of `path`.
pub fn url(app: &TestApp, path: &str) -> String {
    format!("http://{}{path}", app.console_addr.expect("a console"))
}

/// An HTTP client that shows redirects instead of following them.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Makes event `id` of `stripe` a dead letter of `billing` (the worker fails it twice) and
/// returns the dead letter's ID.
pub async fn dead_letter(app: &TestApp, worker: &RelayWorker, id: &str) -> String {
    worker.poison("billing", id, Answer::status(500));
    let redis = app.redis.as_ref().unwrap();
    let before = xlen(redis, &dead_letters("stripe", "billing"));
    send(app, id, "invoice.paid").await;
    let dlq = dead_letters("stripe", "billing");
    eventually(10, "a dead letter", || {
        let len = xlen(redis, &dlq);
        async move { len > before }
    })
    .await;
    crate::relay::xrange(redis, &dlq)
        .into_iter()
        .find(|(_, fields)| fields["event_id"] == id)
        .map(|(letter, _)| letter)
        .expect("the dead letter")
}
