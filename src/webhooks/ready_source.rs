//! One configured source as the pipeline serves it: its provider, its target, its metrics and
//! who may call it.
//! Its own file below the façade, so that the pipeline (`ingest.rs`) can import it without
//! importing the module that builds the sources.

use std::sync::Arc;

use super::providers::Provider;
use crate::access::SourceAccess;
use crate::forward::Target;
use crate::metrics::SourceMetrics;

/// One configured source, ready to serve.
pub struct Source {
    pub provider: Arc<dyn Provider>,
    pub target: Target,
    pub metrics: SourceMetrics,
    /// Its allowlist and delivery rate limit.
    pub access: SourceAccess,
}
