//! The per-client bucket of rejected requests (`server.rejected_limit`), in a table bounded in
//! memory.
//!
//! A client is keyed by its IPv4 address, or by the /64 of its IPv6 address: a host is usually
//! given a whole /64, and rotating addresses inside it must not give it a fresh bucket each time.
//! A client forwarded through a trusted proxy that named no readable address is keyed by that
//! proxy, apart from the proxy's own requests.
//!
//! The table holds at most [`MAX_CLIENTS`] buckets (about 4 MiB). A bucket that has filled up
//! again is the same as no bucket, so it is dropped whenever room is needed; when that is not
//! enough (more clients than that were refused within one refill), the buckets nearest to full
//! are dropped first, down to seven eighths of the bound, so that the clients refused most
//! recently and most often stay throttled and the sweep runs once per eighth of the table.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::bucket::{nanos_since, Pace};
use super::client_addr::ClientAddr;
use crate::config::Limit;

/// The most clients the table tracks at once.
pub const MAX_CLIENTS: usize = 65_536;

/// What one client's bucket is kept under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ClientKey {
    V4(u32),
    /// The upper 64 bits of an IPv6 address.
    V6Net(u64),
    /// Forwarded by this trusted proxy (its own key), which named no readable client.
    Unresolved(IpAddr),
}

impl ClientKey {
    fn of(client: &ClientAddr) -> Self {
        match *client {
            ClientAddr::Known(IpAddr::V4(v4)) => ClientKey::V4(v4.into()),
            ClientAddr::Known(IpAddr::V6(v6)) => ClientKey::V6Net((u128::from(v6) >> 64) as u64),
            ClientAddr::Unresolved { via } => ClientKey::Unresolved(via),
        }
    }
}

/// Every client's bucket of rejected requests.
#[derive(Debug)]
pub struct ClientTable {
    pace: Pace,
    base: Instant,
    capacity: usize,
    /// Each client's theoretical arrival time (see [`Pace`]), in nanoseconds since `base`.
    buckets: Mutex<HashMap<ClientKey, u64>>,
}

impl ClientTable {
    pub fn new(limit: Limit) -> Self {
        Self::with_capacity(limit, MAX_CLIENTS)
    }

    fn with_capacity(limit: Limit, capacity: usize) -> Self {
        Self {
            pace: Pace::of(limit),
            base: Instant::now(),
            capacity,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(wait)` while `client`'s bucket is empty: how long until it holds a token again.
    pub fn check(&self, client: &ClientAddr) -> Result<(), Duration> {
        self.check_at(client, nanos_since(self.base))
    }

    /// Charges one rejected request to `client`.
    pub fn charge(&self, client: &ClientAddr) {
        self.charge_at(client, nanos_since(self.base));
    }

    fn check_at(&self, client: &ClientAddr, now: u64) -> Result<(), Duration> {
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        match buckets.get(&ClientKey::of(client)) {
            Some(&tat) => self.pace.wait(tat, now).map_or(Ok(()), Err),
            None => Ok(()),
        }
    }

    fn charge_at(&self, client: &ClientAddr, now: u64) {
        let key = ClientKey::of(client);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(&key) && buckets.len() >= self.capacity {
            self.make_room(&mut buckets, now);
        }
        let tat = buckets.entry(key).or_insert(0);
        *tat = self.pace.after_charge(*tat, now);
    }

    /// Drops every bucket that is full again; if that leaves more than seven eighths of the
    /// capacity, also the buckets nearest to full, down to that.
    fn make_room(&self, buckets: &mut HashMap<ClientKey, u64>, now: u64) {
        buckets.retain(|_, tat| *tat > now);
        let keep = self.capacity - self.capacity.div_ceil(8);
        if buckets.len() <= keep {
            return;
        }
        let mut tats: Vec<u64> = buckets.values().copied().collect();
        let cut = tats.len() - keep;
        let (_, threshold, _) = tats.select_nth_unstable(cut - 1);
        let threshold = *threshold;
        // Ties at the threshold may keep a few more than `keep`; the bound still holds, since
        // at least one bucket (the threshold's) goes.
        buckets.retain(|_, tat| *tat > threshold);
    }

    /// How many clients are tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn client(text: &str) -> ClientAddr {
        ClientAddr::Known(text.parse().unwrap())
    }

    fn table(capacity: usize) -> ClientTable {
        ClientTable::with_capacity(
            Limit {
                per_second: 10.0,
                burst: 3,
            },
            capacity,
        )
    }

    #[test]
    fn a_client_is_throttled_after_its_burst_of_rejections_and_recovers() {
        let table = table(16);
        let a = client("198.51.100.1");
        for _ in 0..3 {
            assert!(table.check_at(&a, 0).is_ok());
            table.charge_at(&a, 0);
        }
        assert_eq!(table.check_at(&a, 0), Err(Duration::from_millis(100)));
        assert!(
            table.check_at(&client("198.51.100.2"), 0).is_ok(),
            "others are not"
        );
        assert!(
            table.check_at(&a, 100 * MS).is_ok(),
            "one token after one interval"
        );
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let table = table(16);
        for i in 0..3 {
            table.charge_at(&client(&format!("2001:db8:1:2::{i:x}")), 0);
        }
        assert!(table.check_at(&client("2001:db8:1:2:ffff::9"), 0).is_err());
        assert!(table.check_at(&client("2001:db8:1:3::1"), 0).is_ok());
        let unresolved = ClientAddr::Unresolved {
            via: "10.0.0.5".parse().unwrap(),
        };
        assert!(table.check_at(&unresolved, 0).is_ok());
        for _ in 0..3 {
            table.charge_at(&unresolved, 0);
        }
        assert!(table.check_at(&unresolved, 0).is_err());
        assert!(
            table.check_at(&client("10.0.0.5"), 0).is_ok(),
            "the proxy itself is apart"
        );
    }

    #[test]
    fn the_table_stays_within_its_bound_and_keeps_the_worst_offenders() {
        let table = table(64);
        let worst = client("203.0.113.1");
        for _ in 0..50 {
            table.charge_at(&worst, 0);
        }
        // A flood of fresh addresses, each refused once, all at the same instant.
        for i in 0..10_000u32 {
            let other = ClientAddr::Known(IpAddr::V4((0x0a00_0000 + i).into()));
            table.charge_at(&other, 0);
            assert!(table.len() <= 64);
        }
        assert!(table.check_at(&worst, 0).is_err(), "still throttled");
        // Once every bucket refilled, the next sweep drops them all.
        for i in 0..64u32 {
            let later = ClientAddr::Known(IpAddr::V4((0xc633_6400 + i).into()));
            table.charge_at(&later, 10_000 * MS);
        }
        assert!(table.len() <= 64);
        assert!(table.check_at(&worst, 10_000 * MS).is_ok());
        assert!(!table
            .buckets
            .lock()
            .unwrap()
            .contains_key(&ClientKey::of(&worst)));
    }
}
