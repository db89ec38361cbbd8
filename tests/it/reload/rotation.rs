//! A Stripe signing secret rotated under load through `secrets_files` and `SIGHUP`: while four
//! senders keep delivering, the file goes from the old secret to both and then to the new one.
//! Every delivery, signed with whichever secret its phase allows, is accepted and forwarded
//! once; a broken file is refused and changes nothing.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use super::{config_file, hangup, log_with, post_signed, replace, LAST_RELOAD_OK, RELOADS};
use crate::support::app::provider;
use crate::support::daemon::Daemon;
use crate::support::settings::source;
use crate::support::{eventually, stripe_body, RedisServer};

const SENDERS: usize = 4;
/// The phases of the rotation, as the senders sign: the old secret only, either (alternating),
/// the new one only.
const OLD: u8 = 0;
const EITHER: u8 = 1;
const NEW: u8 = 2;

struct Load {
    phase: AtomicU8,
    stop: AtomicBool,
    accepted: AtomicUsize,
    accepted_new: AtomicUsize,
    /// Each sender's phase at its last finished delivery.
    seen: [AtomicU8; SENDERS],
    refused: std::sync::Mutex<Vec<(String, u16)>>,
}

impl Load {
    async fn accepted_at_least(&self, more: usize) {
        let target = self.accepted.load(Ordering::SeqCst) + more;
        eventually(30, &format!("{target} accepted deliveries"), || async {
            self.accepted.load(Ordering::SeqCst) >= target
        })
        .await;
    }

    /// Moves the senders to `phase` and waits until each has finished a delivery in it, so
    /// that no delivery signed in the previous phase is still on its way.
    async fn enter(&self, phase: u8) {
        self.phase.store(phase, Ordering::SeqCst);
        eventually(30, &format!("every sender in phase {phase}"), || async {
            self.seen.iter().all(|s| s.load(Ordering::SeqCst) == phase)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_secret_rotated_under_load_loses_and_refuses_nothing() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("stripe-secrets");
    std::fs::write(&secret_file, "whsec_old_rotation\n").unwrap();
    // Every delivery of the senders must be accepted: a store timeout that a loaded machine's
    // slow moment stays within (what is tested is the rotation, not Redis's latency).
    let config = config_file(
        dir.path(),
        &format!(
            "[store]\nbackend = \"redis\"\nredis_url = \"{}\"\ntimeout = \"5s\"\n\
             [sources.pay]\nprovider = \"stripe\"\nsecrets_files = [\"{}\"]\n",
            redis.url(),
            secret_file.display()
        ),
    );
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let old = provider("pay", &source("stripe", "whsec_old_rotation"));
    let new = provider("pay", &source("stripe", "whsec_new_rotation"));

    let load = Arc::new(Load {
        phase: AtomicU8::new(OLD),
        stop: AtomicBool::new(false),
        accepted: AtomicUsize::new(0),
        accepted_new: AtomicUsize::new(0),
        seen: std::array::from_fn(|_| AtomicU8::new(OLD)),
        refused: std::sync::Mutex::new(Vec::new()),
    });
    let url = daemon.url("/webhooks/pay");
    let mut senders = Vec::new();
    for sender in 0..SENDERS {
        let (load, url, old, new) = (
            Arc::clone(&load),
            url.clone(),
            Arc::clone(&old),
            Arc::clone(&new),
        );
        senders.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut sent = 0usize;
            while !load.stop.load(Ordering::SeqCst) {
                let phase = load.phase.load(Ordering::SeqCst);
                let with_new = phase == NEW || (phase == EITHER && sent % 2 == 1);
                let id = format!("evt_rot_{sender}_{sent}");
                let body = stripe_body(&id, 600);
                let signer = if with_new { &new } else { &old };
                let status = post_signed(&client, &url, signer, (&id, &body), &[]).await;
                if status == 200 {
                    load.accepted.fetch_add(1, Ordering::SeqCst);
                    if with_new {
                        load.accepted_new.fetch_add(1, Ordering::SeqCst);
                    }
                } else {
                    load.refused.lock().unwrap().push((id, status));
                }
                load.seen[sender].store(phase, Ordering::SeqCst);
                sent += 1;
            }
            sent
        }));
    }

    load.accepted_at_least(100).await;
    // The new secret beside the old: from the reload on, either verifies.
    replace(&secret_file, "whsec_old_rotation\nwhsec_new_rotation\n");
    hangup(&daemon, "applied", 1.0).await;
    load.enter(EITHER).await;
    load.accepted_at_least(200).await;
    // The provider has rolled over: the senders sign with the new secret only, then the old one
    // is removed.
    load.enter(NEW).await;
    replace(&secret_file, "whsec_new_rotation\n");
    hangup(&daemon, "applied", 2.0).await;
    load.accepted_at_least(100).await;
    // A broken file (every line blank) is refused: the running secret stays, nothing stops.
    replace(&secret_file, "\n\n");
    hangup(&daemon, "refused", 1.0).await;
    assert_eq!(daemon.metric(LAST_RELOAD_OK, &[]).await, 0.0);
    load.accepted_at_least(100).await;
    load.stop.store(true, Ordering::SeqCst);
    let mut sent = 0;
    for sender in senders {
        sent += sender.await.unwrap();
    }

    eprintln!(
        "rotation: {sent} deliveries by {SENDERS} senders, {} signed with the new secret",
        load.accepted_new.load(Ordering::SeqCst)
    );
    let refused = load.refused.lock().unwrap().clone();
    assert!(
        refused.is_empty(),
        "refused during the rotation: {refused:?}"
    );
    let accepted = load.accepted.load(Ordering::SeqCst);
    assert_eq!(accepted, sent);
    assert!(load.accepted_new.load(Ordering::SeqCst) > 100);
    let entries: usize = redis::cmd("XLEN")
        .arg("hookonce:{pay}:events")
        .query(&mut redis.connection())
        .unwrap();
    assert_eq!(entries, accepted, "every accepted delivery forwarded once");
    assert_eq!(daemon.metric(RELOADS, &[("result", "applied")]).await, 2.0);

    // The old secret is gone for good.
    let late = ("evt_rot_late", &stripe_body("evt_rot_late", 200)[..]);
    let status = post_signed(&reqwest::Client::new(), &url, &old, late, &[]).await;
    assert_eq!(status, 401);

    // The overlap's two secrets counted, and the broken file's refusal.
    let logs = log_with(&daemon, &["pay=2", "holds no secret"]).await;
    assert_eq!(logs.matches("Configuration reloaded.").count(), 2, "{logs}");
    assert!(!logs.contains("whsec_old_rotation") && !logs.contains("whsec_new_rotation"));
}
