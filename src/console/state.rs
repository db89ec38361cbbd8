//! [`Console`]: what the console's handlers share — the settings, the store, who may do what,
//! the sessions, the counts and the audit log — built once by `App` when `console.listen` is set.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use tokio::sync::Semaphore;

use super::audit::Audit;
use super::auth::{Access, Sessions};
use super::counts::{self, Counts};
use crate::config::{ConfigError, Settings};
use crate::forward::Target;
use crate::metrics::Metrics;
use crate::relay::Route;
use crate::store::RedisStore;

/// The console of one daemon.
pub struct Console {
    pub settings: Settings,
    pub store: Option<RedisStore>,
    /// Who may do what; a reload (`SIGHUP`) replaces it, the sessions stay.
    pub access: ArcSwap<Access>,
    pub sessions: Sessions,
    pub counts: Counts,
    pub audit: Audit,
    /// `console.max_in_flight` permits; a request finding none is answered 503 at once.
    pub limit: Arc<Semaphore>,
    /// Each source's keys, by name.
    pub targets: BTreeMap<String, Target>,
    /// Each relay route, in name order.
    pub routes: Vec<Route>,
    /// Session cookies carry `Secure` unless the console listens on loopback.
    pub secure_cookie: bool,
}

impl Console {
    /// The console `settings` ask for; `None` when `console.listen` is absent.
    pub fn build(
        settings: &Settings,
        store: Option<RedisStore>,
        metrics: Arc<Metrics>,
    ) -> Result<Option<Self>, ConfigError> {
        let console = &settings.console;
        let Some(listen) = console.listen else {
            return Ok(None);
        };
        let prefix = &settings.store.key_prefix;
        let targets = settings
            .sources
            .keys()
            .map(|name| Ok((name.clone(), Target::of_source(settings, name)?)))
            .collect::<Result<_, ConfigError>>()?;
        let routes = settings
            .relay
            .routes
            .iter()
            .map(|(name, route)| Route::build(name, route, settings))
            .collect::<Result<_, _>>()?;
        Ok(Some(Self {
            settings: settings.clone(),
            access: ArcSwap::from_pointee(Access::new(console)),
            sessions: Sessions::new(console.session_ttl.0),
            counts: Counts::new(metrics, store.clone(), prefix),
            audit: Audit::new(store.clone(), prefix, console.audit_max_entries),
            limit: Arc::new(Semaphore::new(console.max_in_flight)),
            store,
            targets,
            routes,
            secure_cookie: !listen.ip().is_loopback(),
        }))
    }

    /// Puts the access rules of reloaded `settings` in place: rotated tokens, the operators, the
    /// identity header and its proxies. When they changed, every session ends (a token rotated
    /// out because it leaked must not live on in the sessions it opened): users log in again.
    pub fn reload_access(&self, settings: &Settings) {
        let access = Access::new(&settings.console);
        if **self.access.load() != access {
            self.access.store(Arc::new(access));
            self.sessions.close_all();
        }
    }

    /// Adds this daemon's counts every few seconds ([`counts::INTERVAL`]) until the console is
    /// dropped.
    pub fn spawn_counts(self: &Arc<Self>) {
        let console: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(counts::INTERVAL);
            loop {
                ticker.tick().await;
                let Some(console) = console.upgrade() else {
                    return;
                };
                if let Err(error) = console.counts.flush().await {
                    tracing::warn!(message = "Cannot add the console's counts.", %error);
                }
            }
        });
    }

    /// The routes that read `source`.
    pub fn routes_of<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a Route> + 'a {
        self.routes
            .iter()
            .filter(move |r| r.sources.iter().any(|s| s == source))
    }
}
