//! What a reload (`SIGHUP`) may change while the daemon runs, and the check that nothing else
//! changed.
//!
//! A reload loads the configuration as a start would (defaults, file, environment; secret files
//! re-read) and compares its layered tree, key by key, with the running one. The keys of
//! [`LIVE_KEYS`] are applied in place; a difference anywhere else (a listener, the store, the
//! sink, a source added or removed, a stream) refuses the whole reload and names those keys:
//! they need a restart. Values are compared, never shown.

use serde_json::Value;

/// The keys a reload applies live, as paths in the layered configuration (`*` is any name). A
/// key's whole subtree is live: `relay.routes.*.headers` covers every header of a route.
pub const LIVE_KEYS: &[&str] = &[
    "sources.*.secrets",
    "sources.*.secrets_files",
    "sources.*.tolerance",
    "sources.*.allowed_ips",
    "sources.*.rate_limit",
    "sources.*.rate_limit_burst",
    "server.trusted_proxies",
    "server.rejected_limit",
    "server.rejected_limit_burst",
    "relay.routes.*.signing_secret",
    "relay.routes.*.headers",
    "console.viewer_tokens",
    "console.operator_tokens",
    "console.operators",
    "console.identity_header",
    "console.trusted_proxies",
];

/// The keys whose values differ between `old` and `new`, as dotted paths (`sources.stripe.stream`,
/// `sources.shop` for a source added or removed), split into those a reload applies
/// ([`LIVE_KEYS`]) and those that need a restart.
pub fn changes(old: &Value, new: &Value) -> Changes {
    let mut changes = Changes::default();
    diff(&mut Vec::new(), old, new, &mut changes);
    changes
}

/// What differs between two layered configurations.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Keys a reload applies in place.
    pub live: Vec<String>,
    /// Keys that cannot change without a restart.
    pub frozen: Vec<String>,
}

fn diff(path: &mut Vec<String>, old: &Value, new: &Value, changes: &mut Changes) {
    if is_live(path) {
        if old != new {
            changes.live.push(path.join("."));
        }
        return;
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                path.push(key.clone());
                match (old.get(key), new.get(key)) {
                    (Some(o), Some(n)) => diff(path, o, n, changes),
                    // A key present on one side only: the whole subtree is added or removed,
                    // live when the key itself is a live one.
                    _ if is_live(path) => changes.live.push(path.join(".")),
                    _ => changes.frozen.push(path.join(".")),
                }
                path.pop();
            }
        }
        _ if old != new => changes.frozen.push(path.join(".")),
        _ => {}
    }
}

fn is_live(path: &[String]) -> bool {
    LIVE_KEYS.iter().any(|pattern| {
        let pattern: Vec<&str> = pattern.split('.').collect();
        pattern.len() == path.len()
            && pattern
                .iter()
                .zip(path)
                .all(|(want, key)| *want == "*" || want == key)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn base() -> Value {
        json!({
            "server": {"listen": "0.0.0.0:8080"},
            "store": {"redis_url": "redis://secret@h:6379"},
            "sources": {"stripe": {"provider": "stripe", "secrets": ["whsec_a"]}},
            "relay": {"routes": {"w": {"url": "http://w", "headers": {"authorization": "t1"}}}},
        })
    }

    #[test]
    fn secrets_and_access_keys_are_live() {
        let mut new = base();
        new["sources"]["stripe"]["secrets"] = json!(["whsec_a", "whsec_b"]);
        new["sources"]["stripe"]["secrets_files"] = json!(["/run/s"]);
        new["server"]["trusted_proxies"] = json!(["10.0.0.0/8"]);
        new["relay"]["routes"]["w"]["headers"]["authorization"] = json!("t2");
        let changes = changes(&base(), &new);
        assert!(changes.frozen.is_empty(), "{changes:?}");
        assert_eq!(
            changes.live,
            [
                "relay.routes.w.headers",
                "server.trusted_proxies",
                "sources.stripe.secrets",
                "sources.stripe.secrets_files",
            ]
        );
    }

    #[test]
    fn everything_else_is_frozen_and_named_without_its_value() {
        let mut new = base();
        new["store"]["redis_url"] = json!("redis://other@h:6379");
        new["server"]["listen"] = json!("0.0.0.0:9090");
        new["sources"]["shop"] = json!({"provider": "shopify", "secrets": ["x"]});
        new["sources"]["stripe"]["stream"] = json!("s:{stripe}");
        let changes = changes(&base(), &new);
        assert_eq!(
            changes.frozen,
            [
                "server.listen",
                "sources.shop",
                "sources.stripe.stream",
                "store.redis_url",
            ]
        );
        assert!(changes.frozen.iter().all(|key| !key.contains("other")));
    }

    #[test]
    fn a_source_removed_is_frozen_and_the_same_tree_has_no_change() {
        let mut new = base();
        new["sources"] = json!({});
        assert_eq!(changes(&base(), &new).frozen, ["sources.stripe"]);
        assert_eq!(changes(&base(), &base()), Changes::default());
    }
}
