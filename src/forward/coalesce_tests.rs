//! The grouping of `coalesce.rs` tested without Redis, through a `Runner` that records its calls.

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

    fn run<'a>(&'a self, lane: &'a String, items: &'a [u32]) -> BoxFuture<'a, Vec<Self::Output>> {
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
        max_requests: 1000,
        max_bytes: 1000,
        window: Duration::ZERO,
        in_flight,
    }
}

fn weight(events: u64, bytes: u64) -> Weight {
    Weight { events, bytes }
}

fn one() -> Weight {
    weight(1, 10)
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

/// The calls of one lane (one call in flight) when request 0 runs alone and held while requests
/// 1, 2, … of `weights` queue behind it in order; then every call is let go.
async fn calls_behind_a_held_call(limits: Limits, weights: &[Weight]) -> Vec<Vec<u32>> {
    let gate = Arc::new(Semaphore::new(0));
    let recorder = Arc::new(Recorder {
        gate: Some(Arc::clone(&gate)),
        ..Recorder::default()
    });
    let c = coalescer(
        &recorder,
        Limits {
            in_flight: 1,
            ..limits
        },
    );
    let first = submit(&c, "a", 0, one());
    calls_reach(&recorder, 1).await;
    let mut handles = Vec::new();
    for (i, weight) in (1..).zip(weights) {
        handles.push(submit(&c, "a", i, *weight));
        queued(&c, "a", i as usize).await;
    }
    // One permit per call at most; with one call in flight they run one after another.
    gate.add_permits(weights.len() + 1);
    first.await.unwrap();
    for handle in handles {
        assert!(handle.await.unwrap().is_some());
    }
    let calls = recorder.calls.lock().unwrap().clone();
    calls
}

#[tokio::test]
async fn a_call_stays_within_its_bounds_and_a_heavy_request_goes_alone() {
    // Request 5 is over the events' bound and 6 over the bytes' bound on their own.
    let weights = [one(), one(), one(), one(), weight(10, 10), weight(1, 5000)];
    assert_eq!(
        calls_behind_a_held_call(limits(3, 1), &weights).await,
        vec![vec![0], vec![1, 2, 3], vec![4], vec![5], vec![6]]
    );
}

#[tokio::test]
async fn a_call_carries_at_most_max_requests_requests_whatever_their_events() {
    let batch = weight(5, 10);
    let bounds = Limits {
        max_requests: 2,
        ..limits(64, 1)
    };
    // Two requests a call, of five events each or of one: the request bound holds for both.
    assert_eq!(
        calls_behind_a_held_call(bounds, &[batch, batch, one(), one(), one()]).await,
        vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]
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
