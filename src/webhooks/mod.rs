//! The webhook front: `POST /webhooks/{source}` from a provider, verified, deduplicated and
//! forwarded exactly once.
//!
//! - [`ingest`]: one request's pipeline and the outcome → HTTP mapping.
//! - [`body`]: receiving a body within its size, deadline and the shared memory budget.
//! - this file: the configured sources, each a provider (its signature scheme) and a
//!   [`Target`] (its keys, stream and dedup window), built once from the settings.

pub mod ingest;
pub mod partitions;
pub mod providers;
mod ready_source;
mod reply;

use std::collections::HashMap;
use std::sync::Arc;

use crate::access::{Gate, SourceAccess};
use crate::body::BodyReader;
use crate::config::{ConfigError, Settings, SourceSettings};
use crate::forward::{Forwarder, Target};
use crate::metrics::Metrics;
use crate::util::FastMap;
use providers::Provider;

pub use ingest::Ingest;
pub use ready_source::{LiveSource, Source};

/// Checks every source's provider-specific keys (by building its provider), naming the key.
pub fn validate(settings: &Settings) -> Result<(), ConfigError> {
    for (name, source) in &settings.sources {
        providers::build(name, source)?;
    }
    Ok(())
}

/// The provider and target of the configured source `name`, for the commands that act on one
/// source (`sign`, `inspect`, `forget`).
pub fn source(settings: &Settings, name: &str) -> Result<(Arc<dyn Provider>, Target), ConfigError> {
    let Some(source) = settings.sources.get(name) else {
        return Err(ConfigError::invalid(
            format!("sources.{name}"),
            "no source of this name is configured",
        ));
    };
    let provider = providers::build(name, source)?;
    Ok((provider, Target::of_source(settings, name)?))
}

impl LiveSource {
    /// The live part of the source `name` as `source` configures it.
    pub fn build(name: &str, source: &SourceSettings) -> Result<Self, ConfigError> {
        Ok(Self {
            provider: providers::build(name, source)?,
            access: SourceAccess::from_settings(name, source)?,
        })
    }
}

/// The live part of every source and the gate, built from reloaded settings and not yet
/// applied: a reload builds all of them first, so that one invalid source refuses the whole set.
pub struct PreparedSources {
    sources: HashMap<String, LiveSource>,
    gate: Gate,
}

impl PreparedSources {
    /// Builds each configured source's live part, and the gate, from `settings`.
    pub fn build(settings: &Settings) -> Result<Self, ConfigError> {
        let sources = settings
            .sources
            .iter()
            .map(|(name, source)| Ok((name.clone(), LiveSource::build(name, source)?)))
            .collect::<Result<_, ConfigError>>()?;
        Ok(Self {
            sources,
            gate: Gate::from_settings(&settings.server)?,
        })
    }

    /// Swaps every source's live part and the gate; requests in flight finish on what they
    /// loaded. A source the running pipeline does not know is skipped (a reload that adds
    /// sources is refused before it gets here).
    pub fn apply(self, ingest: &Ingest) {
        ingest.swap_gate(self.gate);
        for (name, live) in self.sources {
            if let Some(source) = ingest.source(&name) {
                source.live.store(Arc::new(live));
            }
        }
    }
}

impl Ingest {
    /// The pipeline for every configured source, reading bodies with `body` (the reader both
    /// fronts share) and forwarding through `forwarder`.
    pub fn build(
        settings: &Settings,
        forwarder: Arc<dyn Forwarder>,
        body: Arc<BodyReader>,
        metrics: &Arc<Metrics>,
    ) -> Result<Self, ConfigError> {
        let mut sources = FastMap::default();
        for (name, source) in &settings.sources {
            let live = LiveSource::build(name, source)?;
            let target = Target::of_source(settings, name)?;
            let metrics = metrics.source(name);
            sources.insert(name.clone(), Source::new(live, target, metrics));
        }
        Ok(Ingest::new(
            sources,
            forwarder,
            Arc::clone(metrics),
            body,
            settings.server.request_timeout.0,
            settings.server.retry_after_secs,
        )
        .with_gate(Gate::from_settings(&settings.server)?))
    }
}
