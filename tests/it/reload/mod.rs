//! Reloading configuration and secret files on `SIGHUP`, with the real binary: a Stripe secret
//! rotated under load, and the reloads that are refused and change nothing.

mod console;
mod refusals;
mod rotation;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hookonce::webhooks::providers::Provider;

use crate::support::daemon::Daemon;
use crate::support::{eventually, with_id};

pub const RELOADS: &str = "hookonce_config_reloads_total";
pub const LAST_RELOAD_OK: &str = "hookonce_config_last_reload_successful";

/// Replaces `path`'s content at once, as Kubernetes updates a mounted Secret (a new file renamed
/// over the old link): a reader sees the old content or the new, never a half-written file.
pub fn replace(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Sends SIGHUP and waits until the reload with `result` has been counted `count` times.
pub async fn hangup(daemon: &Daemon, result: &str, count: f64) {
    daemon.signal("HUP");
    eventually(
        10,
        &format!("reload number {count} to be {result}"),
        || async { daemon.metric(RELOADS, &[("result", result)]).await >= count },
    )
    .await;
}

/// The daemon's log once it holds every one of `lines` (the log writer is buffered: a line
/// counted in `/metrics` may not be written yet).
pub async fn log_with(daemon: &Daemon, lines: &[&str]) -> String {
    eventually(10, &format!("the log to hold {lines:?}"), || async {
        let logs = daemon.logs();
        lines.iter().all(|line| logs.contains(line))
    })
    .await;
    daemon.logs()
}

/// A config file in `dir` with `text`, returned with its path.
pub fn config_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("hookonce.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Posts `body` to `url` signed by `signer` under the event ID `id`, with `extra` headers; the
/// answer's status.
pub async fn post_signed(
    client: &reqwest::Client,
    url: &str,
    signer: &Arc<dyn Provider>,
    (id, body): (&str, &[u8]),
    extra: &[(&str, &str)],
) -> u16 {
    let mut request = client.post(url).body(body.to_vec());
    for (name, value) in signer.sign(body, &with_id(id)).into_iter() {
        request = request.header(name, value);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status().as_u16()
}
