//! The relay's part of a reload (`SIGHUP`): every route's credentials, built from the reloaded
//! settings first and swapped only once all of them built.

use std::sync::Arc;

use super::credentials::Credentials;
use super::route::Route;
use crate::config::{ConfigError, Settings};

/// The running routes, kept by whoever reloads the configuration.
#[derive(Clone, Default)]
pub struct RouteCredentials {
    routes: Vec<Arc<Route>>,
}

/// Credentials built for every running route, not yet in use.
pub struct PreparedCredentials(Vec<(Arc<Route>, Credentials)>);

impl RouteCredentials {
    pub(super) fn new(routes: Vec<Arc<Route>>) -> Self {
        Self { routes }
    }

    /// Builds every running route's credentials from `settings`; one that does not build
    /// refuses them all. A reload that adds or removes routes is refused before this (the set
    /// of routes needs a restart), so each running route finds its settings.
    pub fn prepare(&self, settings: &Settings) -> Result<PreparedCredentials, ConfigError> {
        self.routes
            .iter()
            .map(|route| {
                let name = &route.name;
                let configured = settings.relay.routes.get(name).ok_or_else(|| {
                    ConfigError::invalid(
                        format!("relay.routes.{name}"),
                        "a running route cannot be removed without a restart",
                    )
                })?;
                Ok((Arc::clone(route), Credentials::build(name, configured)?))
            })
            .collect::<Result<_, _>>()
            .map(PreparedCredentials)
    }
}

impl PreparedCredentials {
    /// Puts the new credentials in place; deliveries under way finish with the old ones.
    pub fn apply(self) {
        for (route, credentials) in self.0 {
            route.credentials.store(Arc::new(credentials));
        }
    }
}
