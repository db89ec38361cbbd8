//! The master behind Sentinel: found through redis-rs's `Sentinel`, and found again after a
//! failover.
//!
//! The connection to the master is a `ConnectionManager`, which reconnects by itself — but to
//! the address it was given. After a failover that address is a dead server or, once it is back,
//! a replica that answers writes with `READONLY`. So every call that fails that way (a dropped or
//! refused connection, a timeout, `READONLY`, `MASTERDOWN`) starts one rediscovery in the
//! background: ask the sentinels which server is the master now (redis-rs checks its `ROLE`),
//! connect to it, and swap the connection in. The failing call itself still fails (503, and the
//! provider retries); calls after the swap go to the new master.
//!
//! The rediscovery runs in a task of its own so that a request's deadline cannot cut it short,
//! and only one runs at a time: a burst of failing calls asks the sentinels once.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{
    Sentinel, SentinelClient, SentinelClientBuilder, SentinelNodeConnectionInfo, SentinelServerType,
};
use redis::{
    Client, Cmd, ConnectionInfo, IntoConnectionInfo, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, TlsMode, Value,
};

use super::client_options::{manager_config, tls_certificates, with_credentials, with_tls_mode};
use crate::config::StoreSettings;

/// A connection to the current master; cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelConnection(Arc<Inner>);

struct Inner {
    /// Held while the sentinels are asked, so that one rediscovery runs at a time.
    sentinel: tokio::sync::Mutex<Sentinels>,
    master_name: String,
    config: ConnectionManagerConfig,
    timeout: Duration,
    current: RwLock<Current>,
}

#[derive(Clone)]
struct Current {
    /// Bumped at every swap, so a failure seen on an old connection does not replace a new one.
    generation: u64,
    manager: ConnectionManager,
}

impl SentinelConnection {
    pub(super) async fn connect(settings: &StoreSettings) -> RedisResult<Self> {
        let mut sentinels = Vec::with_capacity(settings.sentinels.len());
        for url in &settings.sentinels {
            let info = url.0.as_str().into_connection_info()?;
            let redis = with_credentials(
                info.redis_settings().clone(),
                settings.sentinel_username.as_ref(),
                settings.sentinel_password.as_ref(),
            );
            sentinels.push(with_tls_mode(info.set_redis_settings(redis), settings));
        }
        let master = with_credentials(
            redis::RedisConnectionInfo::default(),
            settings.username.as_ref(),
            settings.password.as_ref(),
        );
        let master_name = settings.sentinel_master.clone().unwrap_or_default();
        let config = manager_config(settings.timeout.0);
        let mut sentinel = if settings.uses_tls() {
            Sentinels::tls(sentinels, &master_name, master, settings)?
        } else {
            Sentinels::Plain {
                sentinel: Sentinel::build(sentinels)?,
                master_info: SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(master),
            }
        };
        let manager = discover(&mut sentinel, &master_name, &config).await?;
        Ok(Self(Arc::new(Inner {
            sentinel: tokio::sync::Mutex::new(sentinel),
            master_name,
            config,
            timeout: settings.timeout.0,
            current: RwLock::new(Current {
                generation: 0,
                manager,
            }),
        })))
    }

    fn current(&self) -> Current {
        self.0
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Looks at a call's result; a failure that says "not the master any more" starts a
    /// rediscovery. A server's error reply comes back as a value (`READONLY` from a demoted
    /// master among them), so the replies are looked at too, every one of a pipeline's.
    fn observe(&self, generation: u64, result: Result<&[Value], &RedisError>) {
        let lost = match result {
            Err(error) => means_master_lost(error),
            Ok(replies) => replies.iter().any(says_master_lost),
        };
        if lost {
            self.rediscover(generation);
        }
    }

    fn rediscover(&self, seen: u64) {
        let inner = Arc::clone(&self.0);
        tokio::spawn(async move {
            // Another rediscovery is under way: it will find the same master.
            let Ok(mut sentinel) = inner.sentinel.try_lock() else {
                return;
            };
            if inner.generation() != seen {
                return;
            }
            let found = tokio::time::timeout(
                inner.timeout * 4,
                discover(&mut sentinel, &inner.master_name, &inner.config),
            )
            .await;
            match found {
                Ok(Ok(manager)) => {
                    let mut current = inner
                        .current
                        .write()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    current.generation += 1;
                    current.manager = manager;
                    tracing::info!(
                        message = "Connected to the master the sentinels name.",
                        master = inner.master_name
                    );
                }
                // The sentinels may not have elected a new master yet; the next failing call
                // asks again.
                Ok(Err(error)) => tracing::warn!(
                    message = "Cannot find the master through the sentinels yet.",
                    master = inner.master_name,
                    error = %crate::util::error_chain(&error)
                ),
                Err(_) => tracing::warn!(
                    message = "The sentinels did not name a reachable master in time.",
                    master = inner.master_name
                ),
            }
        });
    }
}

impl Inner {
    fn generation(&self) -> u64 {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .generation
    }
}

/// How the sentinels are asked. Over plain TCP, redis-rs's `Sentinel` with the sentinel URLs
/// as given (each may carry its own credentials). Over TLS, a `SentinelClient`: only its builder
/// hands the CA and client certificate of `store.tls_*` to the connections to the master it
/// finds (`Sentinel::build` has no certificates, so a master signed by a private CA would be
/// refused). The builder takes one set of sentinel credentials for all of them:
/// `store.sentinel_username` / `store.sentinel_password`, or else those of the first URL.
enum Sentinels {
    Plain {
        sentinel: Sentinel,
        /// How to connect to the master (its credentials, not the sentinels').
        master_info: SentinelNodeConnectionInfo,
    },
    Tls(SentinelClient),
}

impl Sentinels {
    fn tls(
        sentinels: Vec<ConnectionInfo>,
        master_name: &str,
        master: redis::RedisConnectionInfo,
        settings: &StoreSettings,
    ) -> RedisResult<Self> {
        let mode = if settings.tls_insecure {
            TlsMode::Insecure
        } else {
            TlsMode::Secure
        };
        let first = sentinels.first().map(|info| info.redis_settings().clone());
        let addresses = sentinels.iter().map(|info| info.addr().clone());
        let mut builder =
            SentinelClientBuilder::new(addresses, master_name, SentinelServerType::Master)?
                .set_client_to_sentinel_tls_mode(mode)
                .set_client_to_redis_tls_mode(mode);
        if let Some(first) = first {
            if let Some(username) = first.username() {
                builder = builder.set_client_to_sentinel_username(username);
            }
            if let Some(password) = first.password() {
                builder = builder.set_client_to_sentinel_password(password);
            }
        }
        if let Some(username) = master.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = master.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(certificates) = tls_certificates(settings)? {
            builder = builder
                .set_client_to_sentinel_certificates(certificates.clone())
                .set_client_to_redis_certificates(certificates);
        }
        Ok(Self::Tls(builder.build()?))
    }

    /// A client for the master the sentinels name (redis-rs connects to it and checks that its
    /// `ROLE` is master).
    async fn master(&mut self, master_name: &str) -> RedisResult<Client> {
        match self {
            Self::Plain {
                sentinel,
                master_info,
            } => {
                sentinel
                    .async_master_for(master_name, Some(master_info))
                    .await
            }
            Self::Tls(client) => client.async_get_client().await,
        }
    }
}

/// Asks the sentinels for the master and connects to it.
async fn discover(
    sentinel: &mut Sentinels,
    master_name: &str,
    config: &ConnectionManagerConfig,
) -> RedisResult<ConnectionManager> {
    let client = sentinel.master(master_name).await?;
    ConnectionManager::new_with_config(client, config.clone()).await
}

/// Whether a reply is an error that says this server is no longer a writable master.
fn says_master_lost(reply: &Value) -> bool {
    matches!(
        reply,
        Value::ServerError(error) if matches!(
            error.kind(),
            Some(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
    )
}

/// Whether an error means the connection no longer leads to a writable master.
fn means_master_lost(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            redis::ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let Current {
                generation,
                mut manager,
            } = self.current();
            let result = manager.req_packed_command(cmd).await;
            self.observe(generation, result.as_ref().map(std::slice::from_ref));
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let Current {
                generation,
                mut manager,
            } = self.current();
            let result = manager.req_packed_commands(pipeline, offset, count).await;
            self.observe(generation, result.as_deref());
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
