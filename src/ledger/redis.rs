//! The Redis ledger: claim, complete and release as token-checked scripts.
//!
//! Each operation is one script call (one round trip). The claim reads Redis's own clock (`TIME`)
//! for lease deadlines, so replicas with skewed clocks agree on when a lease has expired.
//!
//! With `store.wait_replicas`, complete takes `WAIT` with it in the same pipeline (see
//! [`crate::store::ScriptCall::invoke_waiting`]): its done record is what every later attempt
//! is answered from — a webhook's duplicate, a proxy's replay — so it is confirmed before the
//! front acknowledges. Claim and release do not wait: a claim acknowledges nothing (a lost one
//! is met by complete, which writes the done record over a missing claim), and a lost release
//! brings back a claim that blocks retries until its lease ends, never a loss.

use std::time::{Duration, Instant};

use metrics::Histogram;
use redis::Value;

use super::{judge_existing, new_token, Claim, Ledger};
use crate::store::{with_timeout, RedisStartError, RedisStore, Script, StoreError, WaitReplicas};
use crate::util::BoxFuture;

/// Bytes of a number argument at most, for sizing a call's buffer.
const NUMBER: usize = RedisStore::NUMBER_BYTES;

/// KEYS[1] = record. ARGV = token, fingerprint, lease ms, hold ms.
/// Returns `{0, record}` when a record exists that the caller must judge, `{1, reclaimed}` when
/// claimed. The decision about an existing record is made in Rust (`judge_existing`), from the
/// record and Redis's clock returned with it, so both ledgers share one rule.
const CLAIM_SCRIPT: &str = r#"#!lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local record = redis.call('GET', KEYS[1])
local reclaimed = 0
if record then
  if string.sub(record, 1, 2) ~= 'p ' then
    return {0, record, string.format('%d', now)}
  end
  local fingerprint, deadline = string.match(record, '^p %S+ (%S+) (%d+)$')
  if fingerprint ~= ARGV[2] or tonumber(deadline) > now then
    return {0, record, string.format('%d', now)}
  end
  reclaimed = 1
end
local value = 'p ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. string.format('%d', now + tonumber(ARGV[3]))
redis.call('SET', KEYS[1], value, 'PX', ARGV[4])
return {1, reclaimed}
"#;

/// KEYS[1] = record. ARGV = token, done record, ttl ms. Writes unless another token holds it.
const COMPLETE_SCRIPT: &str = r#"#!lua
local record = redis.call('GET', KEYS[1])
if record and string.match(record, '^p (%S+) ') ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"#;

/// KEYS[1] = record. ARGV = token. Deletes the record only while this token holds it.
const RELEASE_SCRIPT: &str = r#"#!lua
local record = redis.call('GET', KEYS[1])
if record and string.match(record, '^p (%S+) ') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

pub struct RedisLedger {
    store: RedisStore,
    claim: Script,
    complete: Script,
    release: Script,
    claim_latency: Histogram,
    complete_latency: Histogram,
    release_latency: Histogram,
    /// `store.wait_replicas`: `WAIT` behind each complete.
    wait: Option<WaitReplicas>,
}

impl RedisLedger {
    pub async fn new(
        store: RedisStore,
        latency: impl Fn(&'static str) -> Histogram,
    ) -> Result<Self, RedisStartError> {
        let ledger = Self {
            claim: Script::new(CLAIM_SCRIPT),
            complete: Script::new(COMPLETE_SCRIPT),
            release: Script::new(RELEASE_SCRIPT),
            claim_latency: latency("claim"),
            complete_latency: latency("complete"),
            release_latency: latency("release"),
            wait: store.wait_replicas(),
            store,
        };
        ledger
            .store
            .load(&[&ledger.claim, &ledger.complete, &ledger.release])
            .await?;
        Ok(ledger)
    }

    async fn claim_once(
        &self,
        key: &str,
        fingerprint: &str,
        lease: Duration,
        hold: Duration,
    ) -> Result<Claim, StoreError> {
        let token = new_token();
        let started = Instant::now();
        let size = key.len() + token.len() + fingerprint.len() + 2 * NUMBER;
        let mut call = self.store.script_sized(&self.claim, 1, 5, size);
        call.arg(key)
            .arg(&token)
            .arg(fingerprint)
            .arg(lease.as_millis() as u64)
            .arg(hold.as_millis() as u64);
        let reply: Vec<Value> = call.invoke().await?;
        self.claim_latency.record(started.elapsed().as_secs_f64());
        match reply.as_slice() {
            [Value::Int(1), Value::Int(reclaimed)] => Ok(Claim::Claimed {
                token,
                reclaimed: *reclaimed == 1,
            }),
            [Value::Int(0), Value::BulkString(record), Value::BulkString(now)] => {
                let record = String::from_utf8_lossy(record);
                let now_ms = String::from_utf8_lossy(now).parse().unwrap_or(u64::MAX);
                judge_existing(&record, fingerprint, now_ms).unwrap_or_else(|| {
                    Err(StoreError::Protocol(format!(
                        "claim refused a reclaimable record {record:?}"
                    )))
                })
            }
            other => Err(StoreError::Protocol(format!("claim answered {other:?}"))),
        }
    }
}

impl Ledger for RedisLedger {
    fn claim<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        lease: Duration,
        hold: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(with_timeout(
            self.store.timeout(),
            self.claim_once(key, fingerprint, lease, hold),
        ))
    }

    fn complete<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        done: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let call = async move {
            let started = Instant::now();
            let size = key.len() + token.len() + done.len() + NUMBER;
            let mut call = self.store.script_sized(&self.complete, 1, 4, size);
            call.arg(key)
                .arg(token)
                .arg(done)
                .arg(ttl.as_millis() as u64);
            let waited = call.invoke_waiting::<i64>(key, self.wait).await?;
            self.complete_latency
                .record(started.elapsed().as_secs_f64());
            let written = waited.reply == 1;
            if written {
                // The done record is what answers every later attempt: acknowledged only once
                // the replicas hold it. Not written (another token holds the key), there is
                // nothing of ours to confirm.
                waited.confirmation()?;
            }
            Ok(written)
        };
        let wait = self.wait.map_or(Duration::ZERO, |w| w.timeout);
        Box::pin(with_timeout(self.store.timeout() + wait, call))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let call = async move {
            let started = Instant::now();
            let mut call = self.store.script(&self.release, 1);
            call.arg(key).arg(token);
            let _: i64 = call.invoke().await?;
            self.release_latency.record(started.elapsed().as_secs_f64());
            Ok(())
        };
        Box::pin(with_timeout(self.store.timeout(), call))
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(self.store.ping())
    }
}
