//! Floods of large bodies against the real binary and the allocator the image ships: bodies
//! refused by `server.body_memory_limit` or cut off by their clients leave their memory to the
//! bodies that go on, so that the process's peak follows what the budget holds at a time, not
//! what all the bodies received together (docs/deploy.md sizes a container from it).

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::Barrier;

use crate::support::binary::write;
use crate::support::daemon::Daemon;
use crate::support::eventually;
use crate::support::http::{read_head, start_request};
use crate::support::metrics::BODY_MEMORY;

const MIB: u64 = 1 << 20;
/// `server.body_memory_limit`.
const BUDGET: u64 = 32 * MIB;
/// Each body: `server.body_limit`.
const BODY: usize = 1 << 20;
const CHUNK: usize = 16 << 10;
/// Every connection sends this much of its body, then waits until the daemon holds all of it:
/// 40 × 816 KiB, all but 128 KiB of the budget. The 208 KiB each body still needs are more than
/// is left, so however the daemon takes the rest, no body can end before another is refused:
/// some bodies are refused when they are most of the way in, and the others go on to their end.
const CONNECTIONS: usize = 40;
const FIRST: usize = 51 * CHUNK;

/// A daemon with a budget of [`BUDGET`] and a GitHub source `gh`, and its directory.
async fn flood_daemon() -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nbody_limit = \"1MiB\"\nbody_memory_limit = \"{}MiB\"\nbody_read_timeout = \"60s\"\nrequest_timeout = \"60s\"\n\
         [store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
         [sources.gh]\nprovider = \"github\"\nsecrets = [\"s3cret\"]\n",
        BUDGET / MIB
    );
    let path = write(dir.path(), "hookonce.toml", &config);
    let daemon = Daemon::spawn(&path, dir.path(), &[("RUST_LOG", "warn")]).await;
    (daemon, dir)
}

/// Opens a request for a 1 MiB body with a signature that does not verify, and sends `first`.
async fn open(daemon_addr: std::net::SocketAddr, n: usize, first: &[u8]) -> tokio::net::TcpStream {
    let headers = [
        ("X-GitHub-Event".to_owned(), "push".to_owned()),
        ("X-GitHub-Delivery".to_owned(), format!("flood-{n}")),
        (
            "X-Hub-Signature-256".to_owned(),
            format!("sha256={}", "0".repeat(64)),
        ),
    ];
    start_request(daemon_addr, "/webhooks/gh", &headers, BODY, first).await
}

/// Sends a 1 MiB body with a signature that does not verify, in chunks, waiting at `held` with
/// the other connections after the first [`FIRST`] bytes until the daemon has read all of them;
/// returns the answer's status line.
async fn send(daemon_addr: std::net::SocketAddr, n: usize, held: Arc<Barrier>) -> String {
    let chunk = vec![b'x'; CHUNK];
    let mut stream = open(daemon_addr, n, &[]).await;
    for sent in (0..BODY).step_by(CHUNK) {
        if sent == FIRST {
            held.wait().await;
        }
        // A body refused for memory is answered at once and the rest of it read and discarded;
        // a write that fails means the answer is already there to read.
        if stream.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let head = read_head(&mut stream).await.unwrap_or_default();
    head.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_large_bodies_holds_less_than_twice_the_budget() {
    let (daemon, _dir) = flood_daemon().await;
    let addr = ([127, 0, 0, 1], daemon.port).into();
    let before = daemon.resident().now;

    let held = Arc::new(Barrier::new(CONNECTIONS + 1));
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|n| tokio::spawn(send(addr, n, Arc::clone(&held))))
        .collect();
    let first_parts = (CONNECTIONS * FIRST) as f64;
    eventually(30, "the daemon to hold every body's first part", || async {
        daemon.metric(BODY_MEMORY, &[]).await == first_parts
    })
    .await;
    held.wait().await;
    let mut statuses = Vec::new();
    for sender in senders {
        statuses.push(sender.await.unwrap());
    }
    let verified = statuses.iter().filter(|s| s.contains(" 401 ")).count();
    let refused = statuses.iter().filter(|s| s.contains(" 503 ")).count();
    assert_eq!(verified + refused, CONNECTIONS, "{statuses:?}");
    assert!(verified > 0 && refused > 0, "{statuses:?}");

    // The peak: the budget's bodies, the whole buffers of the bodies that end (each joined from
    // its pieces), and the connections' own buffers: 44–46 MiB here; 46–47 with one buffer of the
    // declared length per body; 60–72 with buffers grown by doubling, each body leaving those it
    // had outgrown with the allocator.
    assert_peak_within(&daemon, before, BUDGET * 7 / 4);
}

/// Connections whose bodies are cut off most of the way in.
const CUT_OFF: usize = 28;
/// What each of them sends before its client hangs up: 896 KiB.
const CUT_AT: usize = 56 * CHUNK;
/// Connections that wait, one chunk in, while the others are cut off, then send the rest.
const GOING_ON: usize = 30;

/// 28 bodies of 1 MiB are cut off at 896 KiB (their clients hang up) while 30 others, one chunk
/// in, wait; then those 30 send the rest. No body is refused. The memory the cut-off bodies had
/// received (24.5 MiB, freed but kept by the allocator) serves the bodies that go on (30 MiB):
/// the peak is near the larger of the two, not their sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_cut_off_leave_their_memory_to_the_bodies_that_go_on() {
    let (daemon, _dir) = flood_daemon().await;
    let addr = ([127, 0, 0, 1], daemon.port).into();
    let before = daemon.resident().now;
    let chunk = vec![b'x'; CHUNK];

    let mut going_on = Vec::new();
    for n in 0..GOING_ON {
        going_on.push(open(addr, n, &chunk).await);
    }
    let mut cut_off = Vec::new();
    for n in GOING_ON..GOING_ON + CUT_OFF {
        let mut stream = open(addr, n, &[]).await;
        for _ in 0..CUT_AT / CHUNK {
            stream.write_all(&chunk).await.unwrap();
        }
        cut_off.push(stream);
    }
    let all = (GOING_ON * CHUNK + CUT_OFF * CUT_AT) as f64;
    eventually(30, "the daemon to hold every body's first part", || async {
        daemon.metric(BODY_MEMORY, &[]).await == all
    })
    .await;
    drop(cut_off);
    let left = (GOING_ON * CHUNK) as f64;
    eventually(30, "the daemon to let the cut-off bodies go", || async {
        daemon.metric(BODY_MEMORY, &[]).await == left
    })
    .await;

    // One after another, each answered before the next goes on: a body's pieces can take the
    // cut-off bodies' memory, and its whole buffer the one the body before it let go.
    for mut stream in going_on {
        for _ in 1..BODY / CHUNK {
            stream.write_all(&chunk).await.unwrap();
        }
        let head = read_head(&mut stream).await.unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    }

    // 33–34 MiB here. With one buffer of the declared length per body, taken at its first chunk,
    // 52–61 MiB: each body going on wrote into a buffer of its own, taken before the others were
    // cut off, and their memory went unused.
    assert_peak_within(&daemon, before, BUDGET * 11 / 8);
}

/// Asserts that the daemon's peak resident memory is at most `bound` above `before`.
fn assert_peak_within(daemon: &Daemon, before: u64, bound: u64) {
    let over = daemon.resident().peak.saturating_sub(before);
    assert!(
        over <= bound,
        "peak resident memory {} MiB above the start, bound {} MiB (budget {} MiB)",
        over / MIB,
        bound / MIB,
        BUDGET / MIB
    );
}
