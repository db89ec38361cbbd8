//! One route's loop (stub: replaced by the read/deliver/refresh loop).

use std::sync::Arc;
use std::time::Duration;

use super::Route;
use crate::metrics::RelayMetrics;
use crate::store::{RedisStore, Script};

/// The relay's scripts, loaded once per relay.
pub struct Scripts {}

impl Scripts {
    pub fn new() -> Self {
        Self {}
    }

    pub fn all(&self) -> Vec<&Script> {
        Vec::new()
    }
}

/// One route of one relay process.
pub struct RouteWorker {
    pub route: Arc<Route>,
    pub metrics: Arc<RelayMetrics>,
    pub store: RedisStore,
    pub scripts: Arc<Scripts>,
    pub client: reqwest::Client,
    pub consumer: String,
    pub claim_idle: Duration,
}

impl RouteWorker {
    pub async fn run(self, mut stopped: tokio::sync::watch::Receiver<bool>) {
        let _ = stopped.wait_for(|stop| *stop).await;
    }
}
