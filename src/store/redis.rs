//! The Redis store: one self-reconnecting connection (standalone, cluster or sentinel, see
//! [`super::connection`]), with the store timeout on every call.
//!
//! Scripts run by SHA (`EVALSHA`) and are reloaded transparently on `NOSCRIPT`, e.g. after Redis
//! restarted or a replica took over. Callers build a [`ScriptCall`] from a [`Script`] and its
//! keys and arguments; they never see the connection, so how Redis is reached is this module's
//! business alone. Every script keeps all its keys under one hash tag, so in a cluster each call
//! runs on the one master of that slot. With `store.wait_replicas`, an acknowledging script
//! takes `WAIT` with it in one pipeline ([`ScriptCall::invoke_waiting`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use redis::{FromRedisValue, ToRedisArgs, Value};

use super::connection::Connection;
use super::{with_timeout, RedisStartError, StoreError};
use crate::config::StoreSettings;

/// A Lua script, loaded once and then called by its SHA.
pub struct Script(redis::Script);

impl Script {
    pub fn new(source: &str) -> Self {
        Self(redis::Script::new(source))
    }
}

/// A Redis connection that recovers by itself, with the store timeout applied to every call.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) connection: Connection,
    pub(super) timeout: Duration,
    /// Kept to open the relay's dedicated connections (same topology) for blocking reads.
    pub(super) settings: Arc<StoreSettings>,
}

/// One `EVALSHA` being built: the script, then its keys and arguments in order.
///
/// Built as one command rather than through `redis::Script::key(..).arg(..)`, which copies every
/// argument (the body among them) into a vector of its own before building the command.
pub struct ScriptCall<'a> {
    store: &'a RedisStore,
    script: &'a Script,
    command: redis::Cmd,
}

impl<'a> ScriptCall<'a> {
    /// Appends a key or an argument (keys first, as many as the call was started with).
    pub fn arg(&mut self, value: impl ToRedisArgs) -> &mut Self {
        self.command.arg(value);
        self
    }

    /// Runs the script; when Redis has lost it (`NOSCRIPT`), loads it and runs the call once more.
    /// No deadline of its own: callers bound it with [`super::with_timeout`] as their call needs.
    pub async fn invoke<T: FromRedisValue>(&self) -> Result<T, StoreError> {
        let mut connection = self.store.connection.clone();
        let script = &self.script.0;
        let result = match self.command.query_async(&mut connection).await {
            Err(error)
                if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                script.prepare_invoke().load_async(&mut connection).await?;
                self.command.query_async(&mut connection).await
            }
            result => result,
        };
        result.map_err(StoreError::Redis)
    }

    /// Runs the script with `WAIT replicas timeout` pipelined behind it: both go in one write,
    /// over one connection, to the server that holds `key` (one of the script's keys; in a
    /// cluster, the master of its slot), so `WAIT` counts the replicas that hold every write
    /// that connection made up to and including the script's. Sent apart, a reconnect between
    /// the two would let `WAIT` run on a fresh connection that wrote nothing and confirm
    /// nothing. Without `wait` this is [`Self::invoke`].
    ///
    /// `WAIT` runs whatever the script did, so the caller decides whether the count matters
    /// ([`Waited::confirmation`]): a script that refused and wrote nothing has nothing to
    /// confirm. On `NOSCRIPT` the script is loaded and both are sent again.
    ///
    /// Not an `async fn`: the pipeline's future, several times the size of the call's, would
    /// make every call's future that large; it is boxed, and only a call that waits pays for it.
    pub fn invoke_waiting<'k, T: FromRedisValue + 'k>(
        self,
        key: &'k str,
        wait: Option<WaitReplicas>,
    ) -> impl Future<Output = Result<Waited<T>, StoreError>> + 'k
    where
        'a: 'k,
    {
        match wait {
            None => Either::Left(async move {
                Ok(Waited {
                    reply: self.invoke().await?,
                    wait: None,
                })
            }),
            Some(wait) => Either::Right(Box::pin(self.invoke_and_wait(key, wait))),
        }
    }

    /// [`Self::invoke_waiting`] with `WAIT`.
    async fn invoke_and_wait<T: FromRedisValue>(
        self,
        key: &str,
        wait: WaitReplicas,
    ) -> Result<Waited<T>, StoreError> {
        let mut pipeline = redis::pipe();
        pipeline
            .add_command(self.command)
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64);
        let mut connection = self.store.connection.clone();
        let mut replies = connection.pipeline_on_key_node(&pipeline, 2, key).await?;
        if is_noscript(replies.first()) {
            let script = &self.script.0;
            script.prepare_invoke().load_async(&mut connection).await?;
            replies = connection.pipeline_on_key_node(&pipeline, 2, key).await?;
        }
        let mut replies = replies.into_iter();
        let (Some(reply), Some(confirmed), None) = (replies.next(), replies.next(), replies.next())
        else {
            return Err(StoreError::Protocol(
                "WAIT pipeline: not two replies".to_owned(),
            ));
        };
        let reply = T::from_redis_value(reply.extract_error()?).map_err(redis::RedisError::from)?;
        let confirmed =
            i64::from_redis_value(confirmed.extract_error()?).map_err(redis::RedisError::from)?;
        Ok(Waited {
            reply,
            wait: Some((confirmed, wait.replicas)),
        })
    }
}

fn is_noscript(reply: Option<&Value>) -> bool {
    matches!(
        reply,
        Some(Value::ServerError(error)) if error.kind() == Some(redis::ServerErrorKind::NoScript)
    )
}

/// How many replicas must confirm a write before it is acknowledged, and how long `WAIT` may
/// take (`store.wait_replicas`, `store.wait_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    pub replicas: i64,
    pub timeout: Duration,
}

/// A script's reply and, when `WAIT` ran behind it, how many replicas confirmed.
#[derive(Debug)]
pub struct Waited<T> {
    pub reply: T,
    /// (confirmed, wanted), when `WAIT` ran.
    wait: Option<(i64, i64)>,
}

impl<T> Waited<T> {
    /// Whether the write may be acknowledged: no wait was asked, or enough replicas confirmed
    /// in time; fewer is [`StoreError::Replication`] (503), never a 2xx that was not confirmed.
    pub fn confirmation(&self) -> Result<(), StoreError> {
        match self.wait {
            Some((confirmed, wanted)) if confirmed < wanted => {
                Err(StoreError::Replication { confirmed, wanted })
            }
            _ => Ok(()),
        }
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        StoreError::Redis(error)
    }
}

impl RedisStore {
    pub async fn connect(settings: &StoreSettings) -> Result<Self, RedisStartError> {
        Ok(Self {
            connection: Connection::connect(settings).await?,
            timeout: settings.timeout.0,
            settings: Arc::new(settings.clone()),
        })
    }

    /// The deadline of one store call (`store.timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Loads scripts up front, so that the first request already runs them by SHA.
    pub async fn load(&self, scripts: &[&Script]) -> Result<(), RedisStartError> {
        let mut connection = self.connection.clone();
        for script in scripts {
            script
                .0
                .prepare_invoke()
                .load_async(&mut connection)
                .await
                .map_err(RedisStartError::Script)?;
        }
        Ok(())
    }

    /// Bytes of a number argument at most (a `u64` in decimal), for sizing a call with
    /// [`RedisStore::script_sized`].
    pub const NUMBER_BYTES: usize = 20;

    /// Starts an `EVALSHA` of `script` with `keys` keys; push the keys, then the arguments.
    /// Room for a few short ones: a call that carries more (a body, a stored response) says how
    /// much with [`RedisStore::script_sized`].
    pub fn script<'a>(&'a self, script: &'a Script, keys: usize) -> ScriptCall<'a> {
        self.script_sized(script, keys, 8, 256)
    }

    /// [`RedisStore::script`] for a call of about `args` keys and arguments holding about `bytes`
    /// bytes in all: the command's buffers are allocated once at that size instead of growing
    /// (a coalesced call carries tens of bodies, and each doubling copied all of them again; a
    /// proxy's two calls grew nine times between them, 4 % of a keyed request's instructions).
    pub fn script_sized<'a>(
        &'a self,
        script: &'a Script,
        keys: usize,
        args: usize,
        bytes: usize,
    ) -> ScriptCall<'a> {
        let hash = script.0.get_hash();
        // EVALSHA, the hash and the key count come first.
        let mut command = redis::Cmd::with_capacity(args + 3, bytes + hash.len() + 16);
        command.arg("EVALSHA").arg(hash).arg(keys);
        ScriptCall {
            store: self,
            script,
            command,
        }
    }

    /// `store.wait_replicas` and `store.wait_timeout`, when waiting is on: what every write that
    /// acknowledges something (the atomic script, a ledger's complete) runs `WAIT` with.
    pub fn wait_replicas(&self) -> Option<WaitReplicas> {
        (self.settings.wait_replicas > 0).then(|| WaitReplicas {
            replicas: i64::from(self.settings.wait_replicas),
            timeout: self.settings.wait_timeout.0,
        })
    }

    /// Refuses a Redis that may evict keys, unless allowed; warns when `CONFIG` is not permitted.
    /// Every master is asked (in a cluster, each one that owns slots): one evicting master is
    /// enough to let duplicates through for the sources whose slots it holds.
    pub async fn check_eviction_policy(&self, allow_eviction: bool) -> Result<(), RedisStartError> {
        let mut connection = self.connection.clone();
        let mut command = redis::cmd("CONFIG");
        command.arg("GET").arg("maxmemory-policy");
        let replies = match connection.on_every_master(command).await {
            Ok(replies) => replies,
            Err(error) => {
                warn_unreadable_policy("every master", &error.to_string());
                return Ok(());
            }
        };
        for (node, reply) in replies {
            let policy = match Vec::<String>::from_redis_value(reply) {
                Ok(pair) if pair.len() == 2 => pair[1].clone(),
                other => {
                    warn_unreadable_policy(&node, &format!("{:?}", other.err()));
                    continue;
                }
            };
            if policy == "noeviction" {
                continue;
            }
            if !allow_eviction {
                return Err(RedisStartError::EvictionPolicy { policy, node });
            }
            tracing::warn!(
                message = "Redis may evict dedup records; duplicates can get through.",
                policy,
                node
            );
        }
        Ok(())
    }

    /// Whether Redis answers `PING` within the store timeout (`/readyz`, `hookonce_ready`): in a
    /// cluster every master that owns slots must answer, since a request for any source may
    /// land on any of them. A master that failed and whose slots a replica took over is out of
    /// the slot map, so it does not count.
    pub async fn ping(&self) -> bool {
        let mut connection = self.connection.clone();
        let call = async move {
            let replies = connection.on_every_master(redis::cmd("PING")).await?;
            let all_up = !replies.is_empty()
                && replies
                    .iter()
                    .all(|(_, reply)| matches!(reply, Value::SimpleString(s) if s == "PONG"));
            if all_up {
                Ok(())
            } else {
                Err(StoreError::Protocol(format!("PING: {replies:?}")))
            }
        };
        with_timeout(self.timeout, call).await.is_ok()
    }

    /// `XLEN` of a stream, for the `hookonce_stream_length` gauge.
    pub async fn stream_length(&self, stream: &str) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            Ok(redis::cmd("XLEN")
                .arg(stream)
                .query_async::<u64>(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// Records a source's partition count at `key` and returns the count recorded before, if
    /// any: `SET … NX GET` keeps an earlier count (so a changed one can be refused), `SET … GET`
    /// (`overwrite`, for `repartition`) replaces it. One command, so two daemons starting at
    /// once agree on which count came first. No expiry: the count outlives every record.
    pub async fn record_partitions(
        &self,
        key: &str,
        count: u32,
        overwrite: bool,
    ) -> Result<Option<String>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(count);
            if !overwrite {
                cmd.arg("NX");
            }
            Ok(cmd
                .arg("GET")
                .query_async::<Option<String>>(&mut connection)
                .await?)
        };
        with_timeout(self.timeout, call).await
    }

    /// The raw dedup record at `key` and its remaining time to live in ms, for `hookonce inspect`.
    pub async fn get_record(&self, key: &str) -> Result<Option<(String, i64)>, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let (record, ttl): (Option<String>, i64) = redis::pipe()
                .get(key)
                .pttl(key)
                .query_async(&mut connection)
                .await?;
            Ok(record.map(|r| (r, ttl)))
        };
        with_timeout(self.timeout, call).await
    }

    /// Deletes one dedup record, for `hookonce forget`. Returns whether it existed.
    pub async fn delete_record(&self, key: &str) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let call = async move {
            let deleted: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut connection)
                .await?;
            Ok(deleted == 1)
        };
        with_timeout(self.timeout, call).await
    }
}

fn warn_unreadable_policy(node: &str, reply: &str) {
    tracing::warn!(
        message = "Cannot read Redis maxmemory-policy (CONFIG not permitted?); make sure it is noeviction.",
        node,
        reply
    );
}
