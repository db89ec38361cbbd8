//! Both fronts under one hostile crowd at once: stalled, trickling, oversize and abandoned bodies
//! on the webhook listener and on a keyed proxy, many more than `server.max_in_flight`, while
//! signed deliveries, their duplicates and keyed requests with their retries keep getting their
//! documented answers, over a real Redis.
//!
//! The two fronts share one body reader (deadline and memory budget) and one admission pool, so
//! this is where one front's crowd could starve the other's well-behaved clients.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::proxy::{order, ALICE, ORDERS, PROXY};
use crate::support::http::{read_head, send_slowly, start_request, trickle, Framing};
use crate::support::metrics::{
    BODY_MEMORY, BODY_READS, EVENTS, HTTP_REQUESTS, IN_FLIGHT, PROXY_REQUESTS,
};
use crate::support::settings::{secs, ByteSize, ProxySettings};
use crate::support::upstream::Upstream;
use crate::support::{eventually, now, stripe_body, with_id, Backend, TestApp};

/// Fewer permits than the crowd has members on either front alone.
const MAX_IN_FLIGHT: usize = 8;
/// A small body limit, so that "several times the limit" stays quick to send.
const LIMIT: usize = 16 * 1024;
/// The body deadline: what cuts the stalled and trickling bodies.
const BODY_READ_TIMEOUT: u64 = 3;
/// Comfortably above what the crowd can hold at once (about 200 KiB: a few bytes per stalled or
/// trickling body, half a kilobyte per abandoned one, at most `LIMIT` per chunked oversize body),
/// so that neither the crowd nor the good load is refused for memory, yet far below the default.
const MEMORY: usize = 512 * 1024;

/// The crowd on each front.
const STALLED: usize = 100;
const TRICKLING: usize = 10;
const OVERSIZE: usize = 8;
const ABANDONED: usize = 20;
/// The crowd's members are started over this long; the last stalled ones end a deadline later.
const SPREAD: Duration = Duration::from_secs(2);

/// Well-behaved clients per front, each sending one request at a time: together fewer than
/// `MAX_IN_FLIGHT`, so any 503 they get is the crowd's doing.
const GOOD_WORKERS: usize = 3;
/// At most this many rounds per good worker, one every [`PACE`] at most, so that the load is
/// bounded on a fast machine too yet outlasts the crowd (which takes `SPREAD` plus a body
/// deadline at least, less than `ROUNDS * PACE`).
const ROUNDS: usize = 400;
const PACE: Duration = Duration::from_millis(20);

/// Where the crowd is: every member started (`crowded`), every member finished (`done`).
#[derive(Default)]
struct Phase {
    crowded: AtomicBool,
    done: AtomicBool,
}

/// What one good worker sent: the IDs or keys, and how many rounds it completed with the whole
/// crowd on (which must not be none, or the test proved nothing).
struct Sent {
    ids: Vec<String>,
    crowded_rounds: usize,
}

impl Phase {
    /// Whether another round is to be sent, after `rounds`; counts the round just done when the
    /// whole crowd was on.
    async fn next(&self, rounds: usize, crowded_rounds: &mut usize) -> bool {
        if rounds > 0 && self.crowded.load(Ordering::SeqCst) {
            *crowded_rounds += 1;
        }
        tokio::time::sleep(PACE).await;
        !self.done.load(Ordering::SeqCst) && rounds < ROUNDS
    }
}

/// One front as the crowd sees it: where it posts, and the headers that get a request as far as
/// reading its body (a key and a principal on the proxy; nothing on the webhook route).
#[derive(Clone, Copy)]
struct Front {
    addr: SocketAddr,
    path: &'static str,
    keyed: bool,
}

impl Front {
    fn headers(&self, name: &str) -> Vec<(String, String)> {
        if !self.keyed {
            return Vec::new();
        }
        vec![
            ("Idempotency-Key".to_owned(), format!("hostile-{name}")),
            ("Authorization".to_owned(), ALICE.to_owned()),
        ]
    }

    /// Starts every member of the crowd on this front, spread over [`SPREAD`]; each task checks
    /// its own answer (or, for the abandoned ones, only leaves).
    fn crowd(self, tasks: &mut JoinSet<()>) {
        let offset = |n: usize, count: usize| SPREAD * n as u32 / count as u32;
        for n in 0..STALLED {
            tasks.spawn(async move {
                tokio::time::sleep(offset(n, STALLED)).await;
                let headers = self.headers(&format!("stalled-{n}"));
                let mut stream = start_request(self.addr, self.path, &headers, 1000, b"{\"i").await;
                let head = read_head(&mut stream).await;
                let head = head.unwrap_or_else(|e| panic!("stalled {}: {e}", self.path));
                assert!(head.starts_with("HTTP/1.1 408"), "{}: {head}", self.path);
            });
        }
        for n in 0..TRICKLING {
            tasks.spawn(async move {
                tokio::time::sleep(offset(n, TRICKLING)).await;
                let headers = self.headers(&format!("trickling-{n}"));
                let pause = Duration::from_millis(100);
                let head = trickle(self.addr, self.path, &headers, 1000, pause).await;
                let head = head.unwrap_or_else(|e| panic!("trickling {}: {e}", self.path));
                assert!(head.starts_with("HTTP/1.1 408"), "{}: {head}", self.path);
            });
        }
        for n in 0..OVERSIZE {
            tasks.spawn(async move {
                tokio::time::sleep(offset(n, OVERSIZE)).await;
                let owned = self.headers(&format!("oversize-{n}"));
                let headers: Vec<(&str, &str)> = owned
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                // Half declare their length (refused before a byte is read), half are chunked
                // (refused once the limit is crossed); all are written whole before reading.
                let framing = [Framing::Length, Framing::Chunked][n % 2];
                let pause = Duration::from_millis(20);
                let sent = send_slowly(
                    self.addr,
                    self.path,
                    &headers,
                    framing,
                    4 * LIMIT,
                    2048,
                    pause,
                );
                let mut stream = sent.await.unwrap_or_else(|e| {
                    panic!("oversize {} ({framing:?}) written: {e}", self.path)
                });
                let head = read_head(&mut stream).await;
                let head = head.unwrap_or_else(|e| panic!("oversize {}: {e}", self.path));
                assert!(
                    head.starts_with("HTTP/1.1 413"),
                    "{} ({framing:?}): {head}",
                    self.path
                );
            });
        }
        for n in 0..ABANDONED {
            tasks.spawn(async move {
                tokio::time::sleep(offset(n, ABANDONED)).await;
                let headers = self.headers(&format!("abandoned-{n}"));
                // Half the body, then the client is gone: the daemon reads the head and the
                // half from the socket, then the end of the connection.
                let half = [b'x'; 500];
                drop(start_request(self.addr, self.path, &headers, 1000, &half).await);
            });
        }
    }
}

/// Runs every task to its end, re-raising the first panic with its own message.
async fn join_all(mut tasks: JoinSet<()>) {
    while let Some(ended) = tasks.join_next().await {
        if let Err(error) = ended {
            std::panic::resume_unwind(error.into_panic());
        }
    }
}

/// Signed Stripe and GitHub deliveries with unique IDs, each sent again as a provider's retry
/// would be, until the crowd is gone; returns the Stripe and the GitHub IDs delivered.
async fn deliveries(t: &TestApp, worker: usize, phase: &Phase) -> (Sent, Vec<String>) {
    let (mut stripe, mut github) = (Vec::new(), Vec::new());
    let mut crowded_rounds = 0;
    while phase.next(stripe.len(), &mut crowded_rounds).await {
        let n = stripe.len();
        let id = format!("evt_both_{worker}_{n}");
        let body = stripe_body(&id, 400);
        let gh = format!("gh-both-{worker}-{n}");
        let gh_body = format!(r#"{{"zen":"{gh}"}}"#);
        for resent in [false, true] {
            let answer = t.deliver("stripe", &body, &now()).await;
            assert_eq!(answer.status(), 200, "stripe {id} (resent: {resent})");
            assert_eq!(replayed(&answer), resent, "stripe {id} (resent: {resent})");
            let answer = t.deliver("github", gh_body.as_bytes(), &with_id(&gh)).await;
            assert_eq!(answer.status(), 200, "github {gh} (resent: {resent})");
            assert_eq!(replayed(&answer), resent, "github {gh} (resent: {resent})");
        }
        stripe.push(id);
        github.push(gh);
    }
    let sent = Sent {
        ids: stripe,
        crowded_rounds,
    };
    (sent, github)
}

fn replayed(answer: &reqwest::Response) -> bool {
    answer
        .headers()
        .get("idempotency-replayed")
        .is_some_and(|v| v == "true")
}

/// Keyed requests with unique keys, each retried once, until the crowd is gone; returns the keys.
async fn orders(t: &TestApp, worker: usize, phase: &Phase) -> Sent {
    let mut keys = Vec::new();
    let mut crowded_rounds = 0;
    while phase.next(keys.len(), &mut crowded_rounds).await {
        let key = format!("good-{worker}-{}", keys.len());
        let body = format!(r#"{{"order":"{key}"}}"#);
        let first = order(t, &key, body.as_bytes()).await;
        assert_eq!(first.status, 201, "{key}: {first:?}");
        assert!(!first.replayed(), "{key}: {first:?}");
        let retry = order(t, &key, body.as_bytes()).await;
        assert_eq!(retry.status, 201, "{key} retried: {retry:?}");
        assert!(retry.replayed(), "{key} retried: {retry:?}");
        assert_eq!(
            retry.body, first.body,
            "{key}: the replay is the first answer"
        );
        keys.push(key);
    }
    Sent {
        ids: keys,
        crowded_rounds,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_on_both_fronts_starves_neither_front() {
    let upstream = Upstream::start().await;
    let proxy = ProxySettings {
        upstream: upstream.url(),
        routes: vec![ORDERS.to_owned()],
        require_key: true,
        ..ProxySettings::default()
    };
    // Every honest delivery must be 200 while the crowd loads the machine: a store timeout far
    // above its slowest round trip (what is tested is the front's limits, not Redis's latency).
    let t = TestApp::builder(Backend::Redis)
        .store(|s| s.timeout = secs(5))
        .server(|s| {
            s.max_in_flight = MAX_IN_FLIGHT;
            s.body_limit = ByteSize(LIMIT as u64);
            s.body_read_timeout = secs(BODY_READ_TIMEOUT);
            s.body_memory_limit = ByteSize(MEMORY as u64);
        })
        .proxy(PROXY, proxy)
        .start()
        .await;
    let webhooks = Front {
        addr: t.addr,
        path: "/webhooks/stripe",
        keyed: false,
    };
    let keyed = Front {
        addr: t.proxy_addrs[PROXY],
        path: ORDERS,
        keyed: true,
    };

    let phase = Phase::default();
    let crowd = async {
        let mut tasks = JoinSet::new();
        webhooks.crowd(&mut tasks);
        keyed.crowd(&mut tasks);
        // Every member has been started once `SPREAD` has passed; the stalled ones are all
        // open until a body deadline after that.
        tokio::time::sleep(SPREAD).await;
        phase.crowded.store(true, Ordering::SeqCst);
        join_all(tasks).await;
        phase.done.store(true, Ordering::SeqCst);
    };
    let good = futures_util::future::join(
        futures_util::future::join_all((0..GOOD_WORKERS).map(|w| deliveries(&t, w, &phase))),
        futures_util::future::join_all((0..GOOD_WORKERS).map(|w| orders(&t, w, &phase))),
    );
    let ((), (delivered, ordered)) = tokio::join!(crowd, good);
    let (stripe, github): (Vec<Sent>, Vec<Vec<String>>) = delivered.into_iter().unzip();
    for (front, sent) in [("webhooks", &stripe), ("proxy", &ordered)] {
        let crowded: usize = sent.iter().map(|s| s.crowded_rounds).sum();
        assert!(
            crowded > 0,
            "no good {front} request was answered with the whole crowd on"
        );
    }
    let ids = |sent: Vec<Sent>| -> Vec<String> { sent.into_iter().flat_map(|s| s.ids).collect() };
    let (stripe, github, keys) = (ids(stripe), github.concat(), ids(ordered));

    // The crowd is gone: nothing is being read, admitted or held.
    eventually(
        30,
        "bodies, permits and memory to be given back",
        || async {
            let page = t.metrics().await;
            let value = |name| crate::support::metrics::value(&page, name, &[]);
            value(BODY_READS) == 0.0 && value(IN_FLIGHT) == 0.0 && value(BODY_MEMORY) == 0.0
        },
    )
    .await;

    // Every hostile request is counted under its outcome on its front (the abandoned ones once
    // the daemon has read the end of their connections).
    for (outcome, count) in [
        ("body_timeout", STALLED + TRICKLING),
        ("aborted", ABANDONED),
        ("too_large", OVERSIZE),
    ] {
        let webhook = [("source", "stripe"), ("outcome", outcome)];
        let proxied = [("proxy", PROXY), ("outcome", outcome)];
        eventually(30, &format!("{count} {outcome} on both fronts"), || async {
            t.metric(EVENTS, &webhook).await == count as f64
                && t.metric(PROXY_REQUESTS, &proxied).await == count as f64
        })
        .await;
    }

    // The good load's answers, counted as such, and nobody refused for want of a permit, of
    // memory or of a readable body.
    let t = &t;
    let event = |source, outcome| async move {
        t.metric(EVENTS, &[("source", source), ("outcome", outcome)])
            .await
    };
    for (source, ids) in [("stripe", &stripe), ("github", &github)] {
        let n = ids.len() as f64;
        assert_eq!(event(source, "forwarded").await, n, "{source}");
        assert_eq!(event(source, "duplicate").await, n, "{source}");
        assert_eq!(event(source, "unavailable").await, 0.0, "{source}");
        assert_eq!(event(source, "malformed").await, 0.0, "{source}");
        let labels = [("source", source), ("status", "503")];
        assert_eq!(t.metric(HTTP_REQUESTS, &labels).await, 0.0, "{source}");
    }
    let proxied = |outcome| async move {
        t.metric(PROXY_REQUESTS, &[("proxy", PROXY), ("outcome", outcome)])
            .await
    };
    assert_eq!(proxied("executed").await, keys.len() as f64);
    assert_eq!(proxied("replayed").await, keys.len() as f64);
    for outcome in ["unavailable", "malformed", "in_flight"] {
        assert_eq!(proxied(outcome).await, 0.0, "{outcome}");
    }

    // Each unique event is in its stream exactly once, in no particular order across workers.
    for (source, ids) in [("stripe", &stripe), ("github", &github)] {
        let mut streamed: Vec<String> = t.entries(source).into_iter().map(|(id, _)| id).collect();
        streamed.sort();
        let mut ids = ids.clone();
        ids.sort();
        assert_eq!(
            streamed, ids,
            "the {source} stream holds each unique event once"
        );
    }
    // The upstream executed each good key once and saw nothing of the crowd.
    for key in &keys {
        assert_eq!(upstream.executions(key, ORDERS), 1, "{key}");
    }
    assert_eq!(
        upstream.seen().len(),
        keys.len(),
        "a hostile request reached the upstream"
    );
    // Redis holds the good requests' records only: one per event, one per key, and the two
    // streams.
    let redis = t.redis.as_ref().expect("the Redis backend");
    assert_eq!(
        redis.dbsize() as usize,
        stripe.len() + github.len() + keys.len() + 2
    );
}
