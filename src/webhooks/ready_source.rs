//! One configured source as the pipeline serves it: its provider, its target and its metrics.
//! Its own file below the façade, so that the pipeline (`ingest.rs`) can import it without
//! importing the module that builds the sources.

use std::sync::Arc;

use super::providers::Provider;
use crate::forward::Target;
use crate::metrics::SourceMetrics;

/// One configured source, ready to serve.
pub struct Source {
    pub provider: Arc<dyn Provider>,
    pub target: Target,
    pub metrics: SourceMetrics,
}
