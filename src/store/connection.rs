//! How Redis is reached: one connection type over the three topologies, built on redis-rs's own
//! clients.
//!
//! - standalone: a `ConnectionManager` (one multiplexed connection that reconnects by itself);
//! - cluster: redis-rs's `ClusterConnection`, which keeps one connection per node, routes every
//!   command by its key's slot, follows `MOVED`/`ASK` and refreshes the slot map after a
//!   resharding or a failover — no routing of our own;
//! - sentinel: the master the sentinels name, asked again after a failover ([`super::sentinel`]).
//!
//! [`Connection`] is a `redis::aio::ConnectionLike`, so commands and pipelines run on it as on
//! any redis-rs connection. What a topology changes beyond that — where `WAIT` runs, which
//! servers readiness and the eviction check ask — is in the two methods below.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Client, Cmd, FromRedisValue, IntoConnectionInfo, RedisFuture, RedisResult, Value};

use super::sentinel::SentinelConnection;
use super::RedisStartError;
use crate::config::{Secret, StoreSettings, StoreTopology};

/// A connection to standalone Redis, a Redis Cluster, or Sentinel's master.
#[derive(Clone)]
pub(super) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
}

/// Retries of one call inside the client: few, because the caller's deadline (`store.timeout`)
/// is what bounds a request, and the provider retries what got 503.
const CLIENT_RETRIES: u32 = 2;
const MAX_RETRY_WAIT: Duration = Duration::from_millis(200);

impl Connection {
    /// Connects to the configured topology within four times `store.timeout`.
    pub(super) async fn connect(settings: &StoreSettings) -> Result<Self, RedisStartError> {
        let target = describe(settings);
        let fail = |source| RedisStartError::Connect {
            url: target.clone(),
            source,
        };
        let connecting = async {
            Ok::<_, redis::RedisError>(match settings.topology {
                StoreTopology::Standalone => Self::Standalone(standalone(settings).await?),
                StoreTopology::Cluster => Self::Cluster(cluster(settings).await?),
                StoreTopology::Sentinel => Self::Sentinel(SentinelConnection::connect(settings).await?),
            })
        };
        tokio::time::timeout(settings.timeout.0 * 4, connecting)
            .await
            .map_err(|_| {
                fail(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "timed out connecting",
                )))
            })?
            .map_err(fail)
    }

    /// Runs `command` on the server that holds `key`: in a cluster the master of the key's slot
    /// (so `WAIT` meets the writes of the script that ran there), elsewhere the one master.
    pub(super) async fn on_key_node<T: FromRedisValue>(
        &mut self,
        command: Cmd,
        key: &str,
    ) -> RedisResult<T> {
        match self {
            Self::Cluster(cluster) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = cluster.route_command(command, routing).await?;
                Ok(T::from_redis_value(value)?)
            }
            other => command.query_async(other).await,
        }
    }

    /// Runs `command` on every master — in a cluster, every master the client's slot map holds,
    /// that is every master that owns slots — and returns each one's reply by address.
    pub(super) async fn on_every_master(
        &mut self,
        command: Cmd,
    ) -> RedisResult<Vec<(String, Value)>> {
        match self {
            Self::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match cluster.route_command(command, routing).await? {
                    Value::Map(replies) => Ok(replies
                        .into_iter()
                        .map(|(address, reply)| {
                            (String::from_redis_value(address).unwrap_or_default(), reply)
                        })
                        .collect()),
                    other => Ok(vec![("cluster".to_owned(), other)]),
                }
            }
            other => {
                let reply: Value = command.query_async(other).await?;
                Ok(vec![("master".to_owned(), reply)])
            }
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
            Self::Sentinel(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
            Self::Sentinel(connection) => connection.get_db(),
        }
    }
}

/// The reconnect policy of every single-server connection (standalone, sentinel's master).
pub(super) fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(CLIENT_RETRIES as usize)
        .set_max_delay(MAX_RETRY_WAIT)
}

/// `info` with the data-node credentials of `store.username` / `store.password`, when set.
pub(super) fn with_credentials(
    mut redis: redis::RedisConnectionInfo,
    username: Option<&Secret>,
    password: Option<&Secret>,
) -> redis::RedisConnectionInfo {
    if let Some(username) = username {
        redis = redis.set_username(username.expose());
    }
    if let Some(password) = password {
        redis = redis.set_password(password.expose());
    }
    redis
}

async fn standalone(settings: &StoreSettings) -> RedisResult<ConnectionManager> {
    let info = settings.redis_url.0.as_str().into_connection_info()?;
    let redis = with_credentials(
        info.redis_settings().clone(),
        settings.username.as_ref(),
        settings.password.as_ref(),
    );
    let client = Client::open(info.set_redis_settings(redis))?;
    ConnectionManager::new_with_config(client, manager_config(settings.timeout.0)).await
}

async fn cluster(settings: &StoreSettings) -> RedisResult<ClusterConnection> {
    let timeout = settings.timeout.0;
    let seeds = settings.cluster_nodes.iter().map(|node| node.0.as_str());
    let mut builder = ClusterClientBuilder::new(seeds)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(CLIENT_RETRIES)
        .max_retry_wait(MAX_RETRY_WAIT.as_millis() as u64);
    if let Some(username) = &settings.username {
        builder = builder.username(username.expose());
    }
    if let Some(password) = &settings.password {
        builder = builder.password(password.expose());
    }
    builder.build()?.get_async_connection().await
}

/// What a connection error names: the URL, the seed nodes, or the master and its sentinels,
/// every URL redacted.
fn describe(settings: &StoreSettings) -> String {
    let list = |urls: &[crate::config::ServiceUrl]| {
        urls.iter()
            .map(|url| url.redacted())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match settings.topology {
        StoreTopology::Standalone => settings.redis_url.redacted(),
        StoreTopology::Cluster => format!("cluster seed nodes [{}]", list(&settings.cluster_nodes)),
        StoreTopology::Sentinel => format!(
            "master {:?} of sentinels [{}]",
            settings.sentinel_master.as_deref().unwrap_or_default(),
            list(&settings.sentinels)
        ),
    }
}
