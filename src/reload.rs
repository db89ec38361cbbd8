//! Reloading the configuration and its secret files without a restart (`SIGHUP`).
//!
//! A reload loads the configuration as a start would (the same file or embedded default, then
//! the environment; every `file:` secret and `secrets_files` entry read again), validates it
//! whole, and compares it with the running one key by key (`config::changes`). Only when every
//! difference is a live key and every part it feeds builds does it swap them, each in one atomic
//! store: requests and deliveries already under way finish on what they loaded. Anything else is
//! refused, the running configuration kept, and the refusal names the keys (never a value).
//! Both results are counted (`hookonce_config_reloads_total{result}`) and logged.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::app::{self, App};
use crate::config::{self, ConfigError, Loaded, Origin};
use crate::metrics::ReloadMetrics;
use crate::relay::RouteCredentials;
use crate::webhooks::PreparedSources;

/// Why a reload was refused; the running configuration is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("cannot change without a restart: {}", .0.join(", "))]
    NeedsRestart(Vec<String>),
}

/// What a reload applied.
#[derive(Debug)]
pub struct Applied {
    /// The live keys whose configured values changed (a secret file's new content is not one:
    /// its path is the key's value).
    pub changed: Vec<String>,
    /// `name=N` for every source: how many secrets it verifies with now (counts, never
    /// values), so that the log shows a rotation's second secret arriving and the first leaving.
    pub secrets: Vec<String>,
}

/// What one process reloads: the webhook front's sources (when it serves them) and the relay's
/// route credentials (when it runs routes).
pub struct Reloader {
    origin: Origin,
    /// The layered tree of the configuration now running.
    running: Mutex<Value>,
    app: Option<Arc<App>>,
    routes: RouteCredentials,
    metrics: ReloadMetrics,
}

impl Reloader {
    /// For `serve`: the app's sources and, when it runs the relay, its routes.
    pub fn for_app(origin: Origin, running: Value, app: Arc<App>) -> Self {
        Self {
            origin,
            running: Mutex::new(running),
            routes: app.relay_credentials(),
            metrics: app.metrics.reloads(),
            app: Some(app),
        }
    }

    /// For `hookonce relay`: its routes only.
    pub fn for_relay(
        origin: Origin,
        running: Value,
        routes: RouteCredentials,
        metrics: ReloadMetrics,
    ) -> Self {
        Self {
            origin,
            running: Mutex::new(running),
            app: None,
            routes,
            metrics,
        }
    }

    /// Loads the configuration again and applies it, or refuses it; counted and logged either
    /// way.
    pub fn reload(&self) -> Result<Applied, ReloadError> {
        let result = self
            .origin
            .load()
            .map_err(ReloadError::from)
            .and_then(|loaded| self.apply(loaded));
        self.metrics.record(result.is_ok());
        match &result {
            Ok(applied) => tracing::info!(
                message = "Configuration reloaded.",
                changed = %applied.changed.join(", "),
                secrets = %applied.secrets.join(", "),
            ),
            Err(error) => tracing::warn!(
                message = "Configuration reload refused; the running configuration is kept.",
                error = %crate::util::error_chain(error),
            ),
        }
        result
    }

    fn apply(&self, loaded: Loaded) -> Result<Applied, ReloadError> {
        let Loaded { settings, tree } = loaded;
        app::validate(&settings)?;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let changes = config::changes(&running, &tree);
        if !changes.frozen.is_empty() {
            return Err(ReloadError::NeedsRestart(changes.frozen));
        }
        // Everything is built before anything is swapped: one part that does not build refuses
        // the whole set.
        let sources = match &self.app {
            Some(_) => Some(PreparedSources::build(&settings)?),
            None => None,
        };
        let routes = self.routes.prepare(&settings)?;
        if let (Some(app), Some(sources)) = (&self.app, sources) {
            sources.apply(&app.ingest);
            if let Some(console) = &app.console {
                console.reload_access(&settings);
            }
        }
        routes.apply();
        *running = tree;
        let secrets = match &self.app {
            Some(_) => settings
                .sources
                .iter()
                .map(|(name, source)| format!("{name}={}", source.all_secrets().count()))
                .collect(),
            None => Vec::new(),
        };
        Ok(Applied {
            changed: changes.live,
            secrets,
        })
    }

    /// Reloads on every `SIGHUP` until the process ends.
    #[cfg(unix)]
    pub fn spawn(self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        // Registered before this returns: a SIGHUP from now on reloads instead of ending the
        // process (its default action).
        let mut hangups = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let reloader = &self;
                // Loading reads files: off the async workers, one reload at a time.
                let _ = tokio::task::block_in_place(|| reloader.reload());
            }
        });
        Ok(())
    }

    #[cfg(not(unix))]
    pub fn spawn(self) -> std::io::Result<()> {
        Ok(())
    }
}
