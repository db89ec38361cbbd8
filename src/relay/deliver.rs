//! One delivery attempt: `POST` the raw body to the route's worker with hookonce's headers.

/// The HTTP client every route of a relay shares: pooled connections, no redirects (a worker
/// that redirects is misconfigured, and following would resend the body elsewhere).
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(1024)
        .build()
}
