//! The in-process ledger: the memory store's dedup records.
//!
//! Records live in a map behind a std mutex (never held across an await) with an expiry heap.
//! Their number is bounded by `store.memory_max_records`, and the bytes of their keys and values
//! together by `store.memory_max_bytes` (a proxy's stored answers are the large values). When
//! either is full, expired records are purged first; if still full, a new claim fails with 503
//! rather than evicting a live record early, which would let a duplicate through, and a complete
//! whose value would not fit fails with [`StoreError::FullBytes`] and changes nothing, so that the
//! caller can store something smaller (the proxy stores its answer truncated). A processing record
//! carries a `watch` sender so that a delivery in the same process can wait for the one holding
//! the lease instead of answering 409. Nothing survives a restart.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{judge_existing, new_token, Claim, Ledger};
use crate::store::record::{self, Record as StoredRecord};
use crate::store::StoreError;
use crate::util::{unix_ms, BoxFuture};

struct Record {
    value: String,
    expires_at: Instant,
    /// Present while processing: dropped (waking waiters) when the record changes.
    _settled: Option<watch::Sender<()>>,
}

#[derive(Default)]
struct State {
    records: HashMap<String, Record>,
    /// Bytes of every record's key and value, as [`held`] counts them.
    bytes: usize,
    /// Expiry order; an entry whose record has since changed is skipped when popped.
    expiry: BinaryHeap<Reverse<(Instant, String)>>,
}

impl State {
    fn purge_expired(&mut self, now: Instant) {
        while let Some(Reverse((deadline, _))) = self.expiry.peek() {
            if *deadline > now {
                break;
            }
            let Reverse((deadline, key)) = self.expiry.pop().expect("peeked");
            if self
                .records
                .get(&key)
                .is_some_and(|r| r.expires_at == deadline)
            {
                self.remove(&key);
            }
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(record) = self.records.remove(key) {
            self.bytes -= held(key, &record.value);
        }
    }

    /// Whether `value` under `key` fits the byte budget `max`, in place of the key's current
    /// record; purges expired records first when it does not.
    fn fits(&mut self, key: &str, value: &str, max: usize, now: Instant) -> bool {
        let fits = |state: &Self| {
            let current = state.records.get(key).map_or(0, |r| held(key, &r.value));
            state.bytes - current + held(key, value) <= max
        };
        if fits(self) {
            return true;
        }
        self.purge_expired(now);
        fits(self)
    }

    fn live(&self, key: &str, now: Instant) -> Option<&Record> {
        self.records.get(key).filter(|r| r.expires_at > now)
    }

    fn put(&mut self, key: &str, value: String, ttl: Duration, settled: Option<watch::Sender<()>>) {
        let expires_at = Instant::now() + ttl;
        self.expiry.push(Reverse((expires_at, key.to_owned())));
        self.bytes += held(key, &value);
        let old = self.records.insert(
            key.to_owned(),
            Record {
                value,
                expires_at,
                _settled: settled,
            },
        );
        if let Some(old) = old {
            self.bytes -= held(key, &old.value);
        }
    }
}

/// What one record costs the byte budget: its key and value (the map's own overhead per record
/// is bounded by `memory_max_records`).
fn held(key: &str, value: &str) -> usize {
    key.len() + value.len()
}

pub struct MemoryLedger {
    state: Mutex<State>,
    max_records: usize,
    max_bytes: usize,
}

impl MemoryLedger {
    /// A ledger of at most `max_records` records of at most `max_bytes` in total.
    pub fn new(max_records: usize, max_bytes: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            max_records,
            max_bytes,
        }
    }

    /// Bytes of the live records' keys and values (tests and diagnostics).
    pub fn record_bytes(&self) -> usize {
        let mut state = self.lock();
        state.purge_expired(Instant::now());
        state.bytes
    }

    /// Number of live records (tests and diagnostics).
    pub fn record_count(&self) -> usize {
        let mut state = self.lock();
        state.purge_expired(Instant::now());
        state.records.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated; keep serving.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn claim_now(
        &self,
        key: &str,
        fingerprint: &str,
        lease: Duration,
        hold: Duration,
    ) -> Result<Claim, StoreError> {
        let now = Instant::now();
        let now_ms = unix_ms();
        let mut state = self.lock();
        let mut reclaimed = false;
        if let Some(record) = state.live(key, now) {
            match judge_existing(&record.value, fingerprint, now_ms) {
                Some(Ok(Claim::InFlight { .. })) => {
                    let wait = record._settled.as_ref().map(watch::Sender::subscribe);
                    return Ok(Claim::InFlight { wait });
                }
                Some(decided) => return decided,
                None => reclaimed = true,
            }
        } else if state.records.len() >= self.max_records {
            state.purge_expired(now);
            if state.records.len() >= self.max_records {
                return Err(StoreError::Full(self.max_records));
            }
        }
        let token = new_token();
        let deadline = now_ms + lease.as_millis() as u64;
        let value = record::processing(&token, fingerprint, deadline);
        if !state.fits(key, &value, self.max_bytes, now) {
            return Err(StoreError::FullBytes(self.max_bytes));
        }
        let (settled, _) = watch::channel(());
        state.put(key, value, hold, Some(settled));
        Ok(Claim::Claimed { token, reclaimed })
    }

    fn holds(state: &State, key: &str, token: &str) -> bool {
        state
            .records
            .get(key)
            .and_then(|r| StoredRecord::parse(&r.value))
            .is_some_and(
                |r| matches!(r, StoredRecord::Processing { token: held, .. } if held == token),
            )
    }
}

impl Ledger for MemoryLedger {
    fn claim<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        lease: Duration,
        hold: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let claim = self.claim_now(key, fingerprint, lease, hold);
        Box::pin(async move { claim })
    }

    fn complete<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        done: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut state = self.lock();
        let mine = !state.records.contains_key(key) || Self::holds(&state, key, token);
        if !mine {
            return Box::pin(async { Ok(false) });
        }
        if !state.fits(key, done, self.max_bytes, Instant::now()) {
            let full = StoreError::FullBytes(self.max_bytes);
            return Box::pin(async move { Err(full) });
        }
        state.put(key, done.to_owned(), ttl, None);
        Box::pin(async { Ok(true) })
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut state = self.lock();
        if Self::holds(&state, key, token) {
            state.remove(key);
        }
        Box::pin(async { Ok(()) })
    }

    fn ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn local_records(&self) -> Option<usize> {
        Some(self.record_count())
    }

    fn local_bytes(&self) -> Option<usize> {
        Some(self.record_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::done;

    const LEASE: Duration = Duration::from_secs(30);
    const HOLD: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn claim_complete_and_duplicate() {
        let ledger = MemoryLedger::new(10, 1 << 20);
        let Claim::Claimed { token, reclaimed } =
            ledger.claim("k", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("first claim");
        };
        assert!(!reclaimed);
        assert!(matches!(
            ledger.claim("k", "fp", LEASE, HOLD).await.unwrap(),
            Claim::InFlight { wait: Some(_) }
        ));
        assert!(ledger
            .complete("k", &token, &done("1-0", "fp"), HOLD)
            .await
            .unwrap());
        assert!(matches!(
            ledger.claim("k", "fp", LEASE, HOLD).await.unwrap(),
            Claim::Done { .. }
        ));
    }

    #[tokio::test]
    async fn released_and_expired_leases_can_be_claimed_again() {
        let ledger = MemoryLedger::new(10, 1 << 20);
        let Claim::Claimed { token, .. } = ledger.claim("k", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("claim");
        };
        ledger.release("k", "not-the-token").await.unwrap();
        assert!(matches!(
            ledger.claim("k", "fp", LEASE, HOLD).await.unwrap(),
            Claim::InFlight { .. }
        ));
        ledger.release("k", &token).await.unwrap();
        let Claim::Claimed { token: old, .. } =
            ledger.claim("k", "fp", Duration::ZERO, HOLD).await.unwrap()
        else {
            panic!("claim after release");
        };
        let Claim::Claimed {
            token: new,
            reclaimed,
        } = ledger.claim("k", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("reclaim after the lease");
        };
        assert!(reclaimed);
        assert!(!ledger
            .complete("k", &old, &done("1-0", "fp"), HOLD)
            .await
            .unwrap());
        assert!(ledger
            .complete("k", &new, &done("1-0", "fp"), HOLD)
            .await
            .unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn records_expire_and_capacity_is_bounded() {
        let ledger = MemoryLedger::new(1, 1 << 20);
        let Claim::Claimed { token, .. } = ledger.claim("a", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("claim");
        };
        ledger
            .complete("a", &token, &done("1-0", "fp"), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(
            ledger.claim("b", "fp", LEASE, HOLD).await,
            Err(StoreError::Full(1))
        ));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(
            ledger.claim("b", "fp", LEASE, HOLD).await.unwrap(),
            Claim::Claimed { .. }
        ));
        assert_eq!(ledger.record_count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_are_bounded_expired_records_make_room_and_nothing_live_is_evicted() {
        let ledger = MemoryLedger::new(100, 1000);
        let Claim::Claimed { token, .. } = ledger.claim("a", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("claim");
        };
        let claimed = ledger.record_bytes();
        assert!(claimed > 1 && claimed < 100, "{claimed}");
        let big = done(&"x".repeat(980), "fp");
        assert!(ledger
            .complete("a", &token, &big, Duration::from_secs(5))
            .await
            .unwrap());
        assert_eq!(ledger.record_bytes(), 1 + big.len());
        // The budget is full of a live record: a new claim is refused, nothing is evicted.
        assert!(matches!(
            ledger.claim("b", "fp", LEASE, HOLD).await,
            Err(StoreError::FullBytes(1000))
        ));
        assert!(matches!(
            ledger.claim("a", "fp", LEASE, HOLD).await.unwrap(),
            Claim::Done { .. }
        ));
        // Once it expired, it is purged to make room.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(
            ledger.claim("b", "fp", LEASE, HOLD).await.unwrap(),
            Claim::Claimed { .. }
        ));
        assert_eq!(ledger.record_count(), 1);
        assert!(ledger.record_bytes() < 100);
    }

    #[tokio::test]
    async fn a_complete_over_the_budget_fails_and_leaves_the_claim_for_a_smaller_one() {
        let ledger = MemoryLedger::new(100, 1000);
        let Claim::Claimed { token, .. } = ledger.claim("a", "fp", LEASE, HOLD).await.unwrap()
        else {
            panic!("claim");
        };
        let before = ledger.record_bytes();
        let too_big = done(&"x".repeat(2000), "fp");
        assert!(matches!(
            ledger.complete("a", &token, &too_big, HOLD).await,
            Err(StoreError::FullBytes(1000))
        ));
        assert_eq!(ledger.record_bytes(), before, "nothing changed");
        // The claim still holds: the smaller record (the truncated answer) completes it.
        assert!(ledger
            .complete("a", &token, &done("small", "fp"), HOLD)
            .await
            .unwrap());
        ledger.release("a", &token).await.unwrap();
        assert!(matches!(
            ledger.claim("a", "fp", LEASE, HOLD).await.unwrap(),
            Claim::Done { .. }
        ));
    }

    #[tokio::test]
    async fn released_records_give_their_bytes_back() {
        let ledger = MemoryLedger::new(100, 1000);
        for _ in 0..50 {
            let Claim::Claimed { token, .. } = ledger.claim("a", "fp", LEASE, HOLD).await.unwrap()
            else {
                panic!("claim");
            };
            ledger.release("a", &token).await.unwrap();
        }
        assert_eq!(ledger.record_bytes(), 0);
    }
}
