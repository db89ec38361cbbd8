//! Coalescing (docs/design.md, "Coalescing"): the script calls of concurrent requests for one
//! stream go to Redis as one call.
//!
//! Each stream (one source partition, so one hash slot) has a *lane*. A request that finds its
//! lane idle runs its own call at once, in its own task: no added latency, and no hop to another
//! task. A request that arrives while the lane already has `in_flight` calls out waits in the
//! lane's queue; when a call ends, whoever ran it takes what queued meanwhile (within
//! `max_events` events and `max_bytes` bytes of bodies, and always at least one request, so a
//! large request goes alone and is never split) and runs it as the next call. With a `window`
//! above zero a call first waits that long for company, idle or not.
//!
//! The lane never loses a request: the slot of a call in flight is a guard whose drop (the
//! request that ran it answered, went away or timed out; a panic) hands the queue to a spawned
//! task, which drains it until it is empty. A waiting request whose caller is gone (its client
//! went away, its deadline passed) is left out of the next call: it was answered already and
//! nothing of it is written. Each request keeps its own deadline, which its caller applies
//! around [`Coalescer::submit`].
//!
//! What a call is lies with the [`Runner`]: the coalescer only groups items and hands each its
//! own output, so the grouping is tested here on its own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::util::BoxFuture;

/// Runs one call for a batch of items of one lane.
pub trait Runner: Send + Sync + 'static {
    /// What is the same for every item of a lane (its stream, its source).
    type Lane: Send + Sync + 'static;
    /// One request's part of a call.
    type Item: Send + 'static;
    /// One request's answer.
    type Output: Send + 'static;

    /// Runs `items` as one call and answers each, in order: exactly one output per item.
    fn run<'a>(
        &'a self,
        lane: &'a Self::Lane,
        items: &'a [Self::Item],
    ) -> BoxFuture<'a, Vec<Self::Output>>;

    /// The output of an item whose call ended without answering it (the call panicked).
    fn lost(&self) -> Self::Output;
}

/// How much one item weighs against a call's bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Weight {
    pub events: u64,
    pub bytes: u64,
}

/// The bounds of one call and of a lane (`sink.coalesce_*`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_events: u64,
    pub max_bytes: u64,
    pub window: Duration,
    pub in_flight: usize,
}

/// One coalescer for every lane of a forwarder.
pub struct Coalescer<R: Runner> {
    inner: Arc<Inner<R>>,
}

struct Inner<R: Runner> {
    runner: R,
    limits: Limits,
    lanes: RwLock<HashMap<Box<str>, Arc<Lane<R>>>>,
    /// Called with the number of items and of events of every call.
    observe: Box<dyn Fn(usize, u64) + Send + Sync>,
}

struct Lane<R: Runner> {
    context: R::Lane,
    state: Mutex<State<R>>,
}

struct State<R: Runner> {
    queue: VecDeque<Waiting<R>>,
    /// Calls of this lane running now, each holding a [`Slot`].
    in_flight: usize,
}

struct Waiting<R: Runner> {
    item: R::Item,
    weight: Weight,
    reply: oneshot::Sender<R::Output>,
}

impl<R: Runner> Coalescer<R> {
    pub fn new(runner: R, limits: Limits, observe: Box<dyn Fn(usize, u64) + Send + Sync>) -> Self {
        let limits = Limits {
            in_flight: limits.in_flight.max(1),
            max_events: limits.max_events.max(1),
            ..limits
        };
        Self {
            inner: Arc::new(Inner {
                runner,
                limits,
                lanes: RwLock::new(HashMap::new()),
                observe,
            }),
        }
    }

    pub fn runner(&self) -> &R {
        &self.inner.runner
    }

    /// Runs `item` in lane `key` (made by `context` when first used), alone when the lane is
    /// idle, else in the next call with what queued with it; answers its own output.
    pub async fn submit(
        &self,
        key: &str,
        context: impl FnOnce() -> R::Lane,
        item: R::Item,
        weight: Weight,
    ) -> R::Output {
        let inner = &self.inner;
        let lane = inner.lane(key, context);
        let queued = {
            let mut state = lane.lock();
            if state.in_flight < inner.limits.in_flight
                && state.queue.is_empty()
                && inner.limits.window.is_zero()
            {
                state.in_flight += 1;
                Err(item)
            } else {
                let (reply, receiver) = oneshot::channel();
                state.queue.push_back(Waiting {
                    item,
                    weight,
                    reply,
                });
                let drain = state.in_flight < inner.limits.in_flight;
                if drain {
                    state.in_flight += 1;
                }
                Ok((receiver, drain))
            }
        };
        let receiver = match queued {
            // The lane was idle: this request's call goes at once, from this task.
            Err(item) => {
                let slot = Slot {
                    inner: Arc::clone(inner),
                    lane: Arc::clone(&lane),
                    active: true,
                };
                (inner.observe)(1, weight.events);
                let items = [item];
                let mut outputs = inner.runner.run(&lane.context, &items).await;
                drop(slot);
                return outputs.pop().unwrap_or_else(|| inner.runner.lost());
            }
            Ok((receiver, drain)) => {
                if drain {
                    Inner::spawn_drain(Arc::clone(inner), Arc::clone(&lane));
                }
                receiver
            }
        };
        receiver.await.unwrap_or_else(|_| inner.runner.lost())
    }
}

impl<R: Runner> Inner<R> {
    fn lane(&self, key: &str, context: impl FnOnce() -> R::Lane) -> Arc<Lane<R>> {
        if let Some(lane) = self
            .lanes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Arc::clone(lane);
        }
        let mut lanes = self.lanes.write().unwrap_or_else(PoisonError::into_inner);
        let lane = lanes.entry(key.into()).or_insert_with(|| {
            Arc::new(Lane {
                context: context(),
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    in_flight: 0,
                }),
            })
        });
        Arc::clone(lane)
    }

    /// Starts a task that runs the lane's queue until it is empty; the caller has counted its
    /// slot in `in_flight` already.
    fn spawn_drain(inner: Arc<Self>, lane: Arc<Lane<R>>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(Self::drain(inner, lane));
            }
            // No runtime left (the process is ending): the waiting requests' senders drop and
            // each answers as lost.
            Err(_) => {
                let mut state = lane.lock();
                state.queue.clear();
                state.in_flight -= 1;
            }
        }
    }

    async fn drain(inner: Arc<Self>, lane: Arc<Lane<R>>) {
        let mut slot = Slot {
            inner: Arc::clone(&inner),
            lane: Arc::clone(&lane),
            active: true,
        };
        loop {
            if !inner.limits.window.is_zero() && !lane.lock().full(&inner.limits) {
                tokio::time::sleep(inner.limits.window).await;
            }
            let batch = {
                let mut state = lane.lock();
                let batch = state.take(&inner.limits);
                if batch.is_empty() {
                    state.in_flight -= 1;
                    slot.active = false;
                    return;
                }
                batch
            };
            let events = batch.iter().map(|w| w.weight.events).sum();
            (inner.observe)(batch.len(), events);
            let (items, replies): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|w| (w.item, w.reply)).unzip();
            let outputs = inner.runner.run(&lane.context, &items).await;
            let mut outputs = outputs.into_iter();
            for reply in replies {
                // A caller that went away meanwhile does not hear its answer; its events were
                // written, and its provider's retry is a duplicate.
                let _ = reply.send(outputs.next().unwrap_or_else(|| inner.runner.lost()));
            }
        }
    }
}

impl<R: Runner> Lane<R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<R>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<R: Runner> State<R> {
    /// Drops the requests whose caller is gone: nothing of them is written.
    fn prune(&mut self) {
        self.queue.retain(|w| !w.reply.is_closed());
    }

    /// Whether the queue holds a full call already (no point waiting for the window).
    fn full(&self, limits: &Limits) -> bool {
        let (mut events, mut bytes) = (0, 0);
        self.queue.iter().any(|w| {
            events += w.weight.events;
            bytes += w.weight.bytes;
            events >= limits.max_events || bytes >= limits.max_bytes
        })
    }

    /// The next call: the oldest live requests, within the bounds, at least one.
    fn take(&mut self, limits: &Limits) -> Vec<Waiting<R>> {
        self.prune();
        let (mut events, mut bytes) = (0, 0);
        let mut batch = Vec::new();
        while let Some(next) = self.queue.front() {
            let (e, b) = (events + next.weight.events, bytes + next.weight.bytes);
            if !batch.is_empty() && (e > limits.max_events || b > limits.max_bytes) {
                break;
            }
            (events, bytes) = (e, b);
            batch.extend(self.queue.pop_front());
        }
        batch
    }
}

/// One call of a lane in flight. Dropped — its call answered, or its caller gone mid-call — it
/// hands what queued meanwhile to a task of its own, or frees its place in the lane.
struct Slot<R: Runner> {
    inner: Arc<Inner<R>>,
    lane: Arc<Lane<R>>,
    /// False once the drain that holds it freed its place itself.
    active: bool,
}

impl<R: Runner> Drop for Slot<R> {
    fn drop(&mut self) {
        if !self.active {
            return;
        }
        let mut state = self.lane.lock();
        state.prune();
        if state.queue.is_empty() {
            state.in_flight -= 1;
        } else {
            drop(state);
            Inner::spawn_drain(Arc::clone(&self.inner), Arc::clone(&self.lane));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Semaphore;

    use super::*;

    /// Records every call; each call waits until `release` lets it go (when `gate` is set).
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<Vec<u32>>>,
        running: AtomicUsize,
        most_running: AtomicUsize,
        gate: Option<Arc<Semaphore>>,
        panic_on: Option<u32>,
    }

    impl Runner for Arc<Recorder> {
        type Lane = String;
        type Item = u32;
        type Output = Option<(String, u32)>;

        fn run<'a>(
            &'a self,
            lane: &'a String,
            items: &'a [u32],
        ) -> BoxFuture<'a, Vec<Self::Output>> {
            Box::pin(async move {
                let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.most_running.fetch_max(now, Ordering::SeqCst);
                self.calls.lock().unwrap().push(items.to_vec());
                if let Some(gate) = &self.gate {
                    gate.acquire().await.expect("open").forget();
                }
                self.running.fetch_sub(1, Ordering::SeqCst);
                if self.panic_on.is_some_and(|p| items.contains(&p)) {
                    panic!("the call failed");
                }
                items.iter().map(|i| Some((lane.clone(), *i))).collect()
            })
        }

        fn lost(&self) -> Self::Output {
            None
        }
    }

    fn limits(max_events: u64, in_flight: usize) -> Limits {
        Limits {
            max_events,
            max_bytes: 1000,
            window: Duration::ZERO,
            in_flight,
        }
    }

    fn one() -> Weight {
        Weight {
            events: 1,
            bytes: 10,
        }
    }

    fn coalescer(recorder: &Arc<Recorder>, limits: Limits) -> Arc<Coalescer<Arc<Recorder>>> {
        Arc::new(Coalescer::new(
            Arc::clone(recorder),
            limits,
            Box::new(|_, _| {}),
        ))
    }

    fn submit(
        c: &Arc<Coalescer<Arc<Recorder>>>,
        lane: &'static str,
        item: u32,
        weight: Weight,
    ) -> tokio::task::JoinHandle<Option<(String, u32)>> {
        let c = Arc::clone(c);
        tokio::spawn(async move { c.submit(lane, || lane.to_owned(), item, weight).await })
    }

    /// Waits until the recorder has seen `n` calls.
    async fn calls_reach(recorder: &Recorder, n: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while recorder.calls.lock().unwrap().len() < n {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the calls happen");
    }

    async fn queued(c: &Coalescer<Arc<Recorder>>, lane: &str, n: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let len = c
                    .inner
                    .lanes
                    .read()
                    .unwrap()
                    .get(lane)
                    .map_or(0, |l| l.lock().queue.len());
                if len >= n {
                    return;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the requests queue");
    }

    #[tokio::test]
    async fn a_lone_request_runs_at_once_in_its_own_call() {
        let recorder = Arc::new(Recorder::default());
        let c = coalescer(&recorder, limits(64, 1));
        assert_eq!(
            c.submit("a", || "a".into(), 7, one()).await,
            Some(("a".into(), 7))
        );
        assert_eq!(*recorder.calls.lock().unwrap(), vec![vec![7]]);
    }

    #[tokio::test]
    async fn requests_that_queue_during_a_call_go_together_in_order() {
        let gate = Arc::new(Semaphore::new(0));
        let recorder = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(64, 1));
        let first = submit(&c, "a", 0, one());
        calls_reach(&recorder, 1).await;
        let rest: Vec<_> = (1..=5).map(|i| submit(&c, "a", i, one())).collect();
        queued(&c, "a", 5).await;
        gate.add_permits(1);
        calls_reach(&recorder, 2).await;
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), Some(("a".into(), 0)));
        for (i, handle) in rest.into_iter().enumerate() {
            assert_eq!(handle.await.unwrap(), Some(("a".into(), i as u32 + 1)));
        }
        assert_eq!(
            *recorder.calls.lock().unwrap(),
            vec![vec![0], vec![1, 2, 3, 4, 5]]
        );
        assert_eq!(recorder.most_running.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_call_stays_within_its_bounds_and_a_heavy_request_goes_alone() {
        let gate = Arc::new(Semaphore::new(0));
        let recorder = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(3, 1));
        let first = submit(&c, "a", 0, one());
        calls_reach(&recorder, 1).await;
        let mut handles = Vec::new();
        for i in 1..=4 {
            handles.push(submit(&c, "a", i, one()));
            queued(&c, "a", i as usize).await;
        }
        let heavy = Weight {
            events: 10,
            bytes: 10,
        };
        handles.push(submit(&c, "a", 5, heavy));
        queued(&c, "a", 5).await;
        let big = Weight {
            events: 1,
            bytes: 5000,
        };
        handles.push(submit(&c, "a", 6, big));
        queued(&c, "a", 6).await;
        for n in 2..=5 {
            gate.add_permits(1);
            calls_reach(&recorder, n).await;
        }
        gate.add_permits(1);
        first.await.unwrap();
        for handle in handles {
            assert!(handle.await.unwrap().is_some());
        }
        assert_eq!(
            *recorder.calls.lock().unwrap(),
            vec![vec![0], vec![1, 2, 3], vec![4], vec![5], vec![6]]
        );
    }

    #[tokio::test]
    async fn lanes_are_independent() {
        let gate = Arc::new(Semaphore::new(0));
        let recorder = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(64, 1));
        let a = submit(&c, "a", 1, one());
        calls_reach(&recorder, 1).await;
        // Lane b is idle: its request does not wait for lane a's call.
        let b = submit(&c, "b", 2, one());
        calls_reach(&recorder, 2).await;
        assert_eq!(recorder.most_running.load(Ordering::SeqCst), 2);
        gate.add_permits(100);
        assert_eq!(a.await.unwrap(), Some(("a".into(), 1)));
        assert_eq!(b.await.unwrap(), Some(("b".into(), 2)));
    }

    #[tokio::test]
    async fn in_flight_bounds_the_concurrent_calls_of_a_lane() {
        let gate = Arc::new(Semaphore::new(0));
        let recorder = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(64, 2));
        let h: Vec<_> = (0..2).map(|i| submit(&c, "a", i, one())).collect();
        calls_reach(&recorder, 2).await;
        let rest: Vec<_> = (2..5).map(|i| submit(&c, "a", i, one())).collect();
        queued(&c, "a", 3).await;
        assert_eq!(recorder.most_running.load(Ordering::SeqCst), 2);
        gate.add_permits(1);
        calls_reach(&recorder, 3).await;
        gate.add_permits(100);
        for handle in h.into_iter().chain(rest) {
            assert!(handle.await.unwrap().is_some());
        }
        let calls = recorder.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(calls[2], vec![2, 3, 4]);
        assert!(recorder.most_running.load(Ordering::SeqCst) <= 2);
    }

    #[tokio::test]
    async fn a_caller_gone_mid_call_hands_the_queue_on_and_a_gone_waiter_is_left_out() {
        let gate = Arc::new(Semaphore::new(0));
        let recorder = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(64, 1));
        let leader = submit(&c, "a", 0, one());
        calls_reach(&recorder, 1).await;
        let gone = submit(&c, "a", 1, one());
        queued(&c, "a", 1).await;
        let waiting = submit(&c, "a", 2, one());
        queued(&c, "a", 2).await;
        // A waiting request's client goes away, then the leader's, mid-call.
        gone.abort();
        assert!(gone.await.is_err());
        leader.abort();
        assert!(leader.await.is_err());
        calls_reach(&recorder, 2).await;
        gate.add_permits(100);
        assert_eq!(waiting.await.unwrap(), Some(("a".into(), 2)));
        assert_eq!(recorder.calls.lock().unwrap()[1], vec![2]);
        // The lane is idle again: a new request runs at once, alone.
        let next = submit(&c, "a", 3, one());
        assert_eq!(next.await.unwrap(), Some(("a".into(), 3)));
        assert_eq!(recorder.calls.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_failed_call_answers_each_of_its_requests_and_the_lane_goes_on() {
        let recorder = Arc::new(Recorder {
            panic_on: Some(13),
            ..Recorder::default()
        });
        let c = coalescer(&recorder, limits(64, 1));
        assert_eq!(submit(&c, "a", 13, one()).await.ok(), None);
        assert_eq!(
            c.submit("a", || "a".into(), 14, one()).await,
            Some(("a".into(), 14))
        );
    }

    #[tokio::test]
    async fn a_window_gathers_requests_even_when_idle() {
        let recorder = Arc::new(Recorder::default());
        let c = coalescer(
            &recorder,
            Limits {
                window: Duration::from_millis(50),
                ..limits(64, 1)
            },
        );
        let h: Vec<_> = (0..4).map(|i| submit(&c, "a", i, one())).collect();
        for handle in h {
            assert!(handle.await.unwrap().is_some());
        }
        let calls = recorder.calls.lock().unwrap().clone();
        assert!(calls.len() < 4, "{calls:?}");
    }
}
