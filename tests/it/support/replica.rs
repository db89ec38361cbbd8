//! A replica of a standalone test Redis: a second `redis-server --replicaof` that can be paused
//! (SIGSTOP: its link stays open, so the master cannot tell, but it acknowledges nothing) and
//! resumed, to show what `store.wait_replicas` confirms and refuses.

use std::process::Command;

use super::cluster::wait_for;
use super::redis::RedisServer;

/// A replica of one master; killed when dropped (a paused one too).
pub struct Replica {
    server: RedisServer,
    paused: bool,
}

impl Replica {
    /// Starts a replica of `master` and waits until its link is up and the first sync done.
    pub fn of(master: &RedisServer) -> Self {
        let port = master.port.to_string();
        let server = RedisServer::start_with(&[
            "--replicaof",
            "127.0.0.1",
            &port,
            // The first sync starts at once instead of after the default 5 s.
            "--repl-diskless-sync-delay",
            "0",
        ]);
        let replica = Self {
            server,
            paused: false,
        };
        replica.wait_until_synced();
        replica
    }

    fn wait_until_synced(&self) {
        wait_for(10, "the replica to sync", || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.server.connection())
                .unwrap_or_default();
            info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
        });
    }

    /// SIGSTOPs the replica: from now on it confirms nothing, though its connection stays up.
    pub fn pause(&mut self) {
        signal("-STOP", self.server.pid());
        self.paused = true;
    }

    /// SIGCONTs a paused replica and waits until it answers again with its link up.
    pub fn resume(&mut self) {
        signal("-CONT", self.server.pid());
        self.paused = false;
        self.wait_until_synced();
    }

    /// Kills the replica (SIGKILL, which also ends a paused one): the master has none from now on.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// A connection to the replica, for reading what it holds.
    pub fn connection(&self) -> redis::Connection {
        assert!(!self.paused, "a paused replica does not answer");
        self.server.connection()
    }
}

fn signal(which: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid}");
}
