//! One configured source as the pipeline serves it: its provider, its target and its metrics.
//! Its own file below the façade, so that the pipeline (`ingest.rs`) can import it without
//! importing the module that builds the sources.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::providers::Provider;
use crate::forward::Target;
use crate::metrics::SourceMetrics;

/// One configured source, ready to serve.
pub struct Source {
    /// What a reload replaces in place; a request loads it once and finishes on what it loaded.
    pub live: ArcSwap<LiveSource>,
    /// Its keys, stream and dedup window: fixed for the life of the process.
    pub target: Target,
    pub metrics: SourceMetrics,
}

/// The part of a source that a reload (`SIGHUP`) may change: its provider, which holds the
/// secrets and the timestamp tolerance.
pub struct LiveSource {
    pub provider: Arc<dyn Provider>,
}

impl Source {
    pub fn new(live: LiveSource, target: Target, metrics: SourceMetrics) -> Self {
        Self {
            live: ArcSwap::from_pointee(live),
            target,
            metrics,
        }
    }
}
