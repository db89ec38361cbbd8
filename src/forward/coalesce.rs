//! Coalescing (docs/design.md, "Coalescing"): the script calls of concurrent requests for one
//! stream go to Redis as one call.
//!
//! Each stream (one source partition, so one hash slot) has a *lane*. A request that finds its
//! lane idle runs its own call at once, in its own task: no added latency, and no hop to another
//! task. A request that arrives while the lane already has `in_flight` calls out waits in the
//! lane's queue; when a call ends, whoever ran it takes what queued meanwhile (within
//! `max_requests` requests, `max_events` events and `max_bytes` bytes of bodies, and always at
//! least one request, so a large request goes alone and is never split) and runs it as the next
//! call. With a `window` above zero a call first waits that long for company, idle or not.
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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::util::{BoxFuture, FastMap};

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

    /// Runs one item alone, in its caller's task: the lane was idle. The caller's own deadline
    /// bounds this call, so a runner may leave out a deadline that [`Runner::run`] needs for
    /// the calls it runs in a drain task, which nobody else bounds. By default, `run`.
    fn run_in_caller<'a>(
        &'a self,
        lane: &'a Self::Lane,
        items: &'a [Self::Item],
    ) -> BoxFuture<'a, Vec<Self::Output>> {
        self.run(lane, items)
    }

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
    pub max_requests: usize,
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
    lanes: RwLock<FastMap<Box<str>, Arc<Lane<R>>>>,
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
            max_requests: limits.max_requests.max(1),
            ..limits
        };
        Self {
            inner: Arc::new(Inner {
                runner,
                limits,
                lanes: RwLock::new(FastMap::default()),
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
                let mut outputs = inner.runner.run_in_caller(&lane.context, &items).await;
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
        self.queue.len() >= limits.max_requests
            || self.queue.iter().any(|w| {
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
            let over = e > limits.max_events || b > limits.max_bytes;
            if !batch.is_empty() && (over || batch.len() >= limits.max_requests) {
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
#[path = "coalesce_tests.rs"]
mod tests;
