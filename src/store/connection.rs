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
//! any redis-rs connection. What a topology changes beyond that — where a script and its `WAIT`
//! run together, which servers readiness and the eviction check ask — is in the two methods
//! below.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisFuture, RedisResult, TlsMode, Value};

use super::client_options::{
    describe_tls, manager_config, tls_certificates, with_credentials, CLIENT_RETRIES,
    MAX_RETRY_WAIT,
};
use super::sentinel::SentinelConnection;
use super::RedisStartError;
use crate::config::{StoreSettings, StoreTopology};

/// A connection to standalone Redis, a Redis Cluster, or Sentinel's master.
#[derive(Clone)]
pub(super) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
}

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
                StoreTopology::Sentinel => {
                    Self::Sentinel(SentinelConnection::connect(settings).await?)
                }
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

    /// Sends `pipeline` in one round trip over one connection to the server that holds `key`:
    /// in a cluster the master of the key's slot, routed by redis-rs (`route_pipeline` to the
    /// slot's master; a `MOVED` or `ASK` reply to any of its commands sends the whole pipeline
    /// again to the node named), elsewhere the one master. The replies come back as sent,
    /// server errors among them, for the caller to read one by one.
    pub(super) async fn pipeline_on_key_node(
        &mut self,
        pipeline: &redis::Pipeline,
        count: usize,
        key: &str,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Self::Cluster(cluster) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = SingleNodeRoutingInfo::SpecificNode(route);
                cluster
                    .route_pipeline(pipeline.clone(), 0, count, routing)
                    .await
            }
            other => other.req_packed_commands(pipeline, 0, count).await,
        }
    }

    /// Runs `command` on every master — in a cluster, every master that owns slots — and
    /// returns each one's reply by address. A master that cannot be reached is an error.
    ///
    /// In a cluster the masters are taken from `CLUSTER SLOTS`, and each is reached by routing
    /// to a slot it owns. redis-rs's "all masters" routing skips nodes it has no connection to,
    /// and a command routed to a node it cannot reach may go to another node instead (harmless
    /// for a keyed command, which would be redirected, but not for `PING`). So the command goes
    /// in a pipeline behind `CLUSTER MYID`, and a reply from any node other than the slot's
    /// owner is an error. A slot without a master is an error too.
    pub(super) async fn on_every_master(
        &mut self,
        command: Cmd,
    ) -> RedisResult<Vec<(String, Value)>> {
        let Self::Cluster(cluster) = self else {
            let reply: Value = command.query_async(self).await?;
            return Ok(vec![("master".to_owned(), reply)]);
        };
        let masters = slot_owners(cluster).await?;
        let mut replies = Vec::with_capacity(masters.len());
        for owner in masters {
            let mut pipeline = redis::pipe();
            pipeline
                .cmd("CLUSTER")
                .arg("MYID")
                .add_command(command.clone());
            let route =
                SingleNodeRoutingInfo::SpecificNode(Route::new(owner.slot, SlotAddr::Master));
            let mut reply = cluster
                .route_pipeline(pipeline, 0, 2, route)
                .await?
                .into_iter();
            let id = reply.next().map(String::from_redis_value).transpose()?;
            if id.as_deref() != Some(owner.id.as_str()) {
                return Err(unexpected(format!(
                    "master {} of slot {} is unreachable",
                    owner.address, owner.slot
                )));
            }
            replies.push((owner.address, reply.next().unwrap_or(Value::Nil)));
        }
        Ok(replies)
    }
}

/// A master that owns slots: its address, node ID and one of its slots.
struct SlotOwner {
    address: String,
    id: String,
    slot: u16,
}

/// Slots in a Redis Cluster.
const SLOTS: u32 = 16384;

/// Every master that owns slots, as `host:port` and one slot it owns, from `CLUSTER SLOTS` on
/// any node that answers; an error when some slot has no master.
async fn slot_owners(cluster: &mut ClusterConnection) -> RedisResult<Vec<SlotOwner>> {
    let mut last = None;
    // A random node may be the one that just failed: ask up to three.
    for _ in 0..3 {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let ranges = match cluster.route_command(slots_command(), routing).await {
            Ok(Value::Array(ranges)) => ranges,
            Ok(other) => return Err(unexpected(format!("CLUSTER SLOTS: {other:?}"))),
            Err(error) => {
                last = Some(error);
                continue;
            }
        };
        let mut owners: Vec<SlotOwner> = Vec::new();
        let mut covered = 0;
        for range in ranges {
            let (first, last, owner) = parse_range(range)?;
            covered += u32::from(last - first) + 1;
            if !owners.iter().any(|known| known.id == owner.id) {
                owners.push(owner);
            }
        }
        if covered != SLOTS {
            return Err(unexpected(format!(
                "{covered} of {SLOTS} slots have a master"
            )));
        }
        return Ok(owners);
    }
    Err(last.unwrap_or_else(|| unexpected("no node answered CLUSTER SLOTS".to_owned())))
}

fn slots_command() -> Cmd {
    let mut command = redis::cmd("CLUSTER");
    command.arg("SLOTS");
    command
}

/// One `CLUSTER SLOTS` entry: `[first, last, [host, port, id, …], replicas…]`.
fn parse_range(range: Value) -> RedisResult<(u16, u16, SlotOwner)> {
    let Value::Array(mut fields) = range else {
        return Err(unexpected(format!("slot range {range:?}")));
    };
    if fields.len() < 3 {
        return Err(unexpected(format!("slot range {fields:?}")));
    }
    let master: Vec<Value> = Vec::from_redis_value(fields.swap_remove(2))?;
    let last = u16::from_redis_value(fields.swap_remove(1))?;
    let first = u16::from_redis_value(fields.swap_remove(0))?;
    let text = |i: usize| {
        master
            .get(i)
            .cloned()
            .map(String::from_redis_value)
            .transpose()
    };
    let port = master
        .get(1)
        .cloned()
        .map(u16::from_redis_value)
        .transpose()?;
    match (text(0)?, port, text(2)?) {
        (Some(host), Some(port), Some(id)) if first <= last => Ok((
            first,
            last,
            SlotOwner {
                address: format!("{host}:{port}"),
                id,
                slot: first,
            },
        )),
        _ => Err(unexpected(format!("slot range master {master:?}"))),
    }
}

fn unexpected(what: String) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected cluster reply",
        what,
    ))
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

async fn standalone(settings: &StoreSettings) -> RedisResult<ConnectionManager> {
    let info = settings.redis_url.0.as_str().into_connection_info()?;
    let redis = with_credentials(
        info.redis_settings().clone(),
        settings.username.as_ref(),
        settings.password.as_ref(),
    );
    let client = super::client_options::client(info.set_redis_settings(redis), settings)?;
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
    if settings.uses_tls() {
        if settings.tls_insecure {
            builder = builder.tls(TlsMode::Insecure);
        }
        if let Some(certificates) = tls_certificates(settings)? {
            builder = builder.certs(certificates);
        }
    }
    builder.build()?.get_async_connection().await
}

/// What a connection error names: the URL, the seed nodes, or the master and its sentinels,
/// every URL redacted, and how TLS is set up when it is used.
fn describe(settings: &StoreSettings) -> String {
    let target = describe_target(settings);
    match describe_tls(settings) {
        Some(tls) => format!("{target} ({tls})"),
        None => target,
    }
}

fn describe_target(settings: &StoreSettings) -> String {
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
