//! The checks on `store.topology` (how Redis is reached — one server, a Redis Cluster, or a master
//! found through Sentinel) and on the keys each topology reads. `StoreTopology` itself sits in
//! `sections.rs` beside `StoreSettings`, so that this file imports that one and not the reverse.
//!
//! Every key that belongs to another topology than the configured one is refused rather than
//! ignored: a `cluster_nodes` list left in a standalone configuration is a deployment that meant
//! something else, and would otherwise run against the wrong Redis without a word.

use super::endpoints::check_redis_url;
use super::{redact_url, ConfigError, ServiceUrl, StoreBackend, StoreSettings, StoreTopology};

/// Schemes a standalone `redis_url` may use (a cluster node or a sentinel is a TCP address).
const STANDALONE_SCHEMES: &[&str] = &["redis://", "rediss://", "redis+unix://", "unix://"];
const TCP_SCHEMES: &[&str] = &["redis://", "rediss://"];

impl StoreSettings {
    pub(super) fn validate_topology(&self) -> Result<(), ConfigError> {
        if self.backend == StoreBackend::Memory {
            if self.topology != StoreTopology::Standalone {
                return Err(ConfigError::invalid(
                    "store.topology",
                    "applies to store.backend = \"redis\" only",
                ));
            }
            return Ok(());
        }
        let (cluster, sentinel) = match self.topology {
            StoreTopology::Standalone => (false, false),
            StoreTopology::Cluster => (true, false),
            StoreTopology::Sentinel => (false, true),
        };
        self.refuse_foreign_keys(cluster, sentinel)?;
        match self.topology {
            StoreTopology::Standalone => {
                if !STANDALONE_SCHEMES
                    .iter()
                    .any(|scheme| self.redis_url.0.starts_with(scheme))
                {
                    return Err(ConfigError::invalid(
                        "store.redis_url",
                        "must start with redis://, rediss://, redis+unix:// or unix://",
                    ));
                }
                check_redis_url("store.redis_url", &self.redis_url.0)?;
            }
            StoreTopology::Cluster => check_nodes("store.cluster_nodes", &self.cluster_nodes)?,
            StoreTopology::Sentinel => {
                check_nodes("store.sentinels", &self.sentinels)?;
                let name = self.sentinel_master.as_deref().unwrap_or_default();
                if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ConfigError::invalid(
                        "store.sentinel_master",
                        "must name the master the sentinels monitor (non-empty, no spaces)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses the keys of the topologies not configured.
    fn refuse_foreign_keys(&self, cluster: bool, sentinel: bool) -> Result<(), ConfigError> {
        let foreign = [
            (
                "store.cluster_nodes",
                !cluster && !self.cluster_nodes.is_empty(),
                "cluster",
            ),
            (
                "store.sentinels",
                !sentinel && !self.sentinels.is_empty(),
                "sentinel",
            ),
            (
                "store.sentinel_master",
                !sentinel && self.sentinel_master.is_some(),
                "sentinel",
            ),
            (
                "store.sentinel_username",
                !sentinel && self.sentinel_username.is_some(),
                "sentinel",
            ),
            (
                "store.sentinel_password",
                !sentinel && self.sentinel_password.is_some(),
                "sentinel",
            ),
        ];
        for (key, set, topology) in foreign {
            if set {
                return Err(ConfigError::invalid(
                    key,
                    format!("is read only when store.topology = \"{topology}\""),
                ));
            }
        }
        Ok(())
    }
}

/// A non-empty list of `redis://host:port` addresses, each with an explicit port (a sentinel's
/// is not Redis's default, and a guessed port would connect to the wrong thing).
fn check_nodes(key: &str, nodes: &[ServiceUrl]) -> Result<(), ConfigError> {
    if nodes.is_empty() {
        return Err(ConfigError::invalid(key, "must list at least one address"));
    }
    for (i, node) in nodes.iter().enumerate() {
        let entry = format!("{key}[{i}]");
        if !TCP_SCHEMES.iter().any(|scheme| node.0.starts_with(scheme)) {
            return Err(ConfigError::invalid(
                entry,
                format!("{} must start with redis:// or rediss://", node.redacted()),
            ));
        }
        check_redis_url(&entry, &node.0)?;
        let parsed = url::Url::parse(&node.0).ok();
        let has_host = parsed
            .as_ref()
            .is_some_and(|url| url.host_str().is_some_and(|h| !h.is_empty()));
        if !has_host || parsed.and_then(|url| url.port()).is_none() {
            return Err(ConfigError::invalid(
                entry,
                format!("{} must be host:port", redact_url(&node.0)),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(toml: &str) -> Result<(), String> {
        let settings: StoreSettings = toml::from_str(toml).map_err(|e| e.to_string())?;
        settings.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn each_topology_reads_its_own_keys() {
        store(
            r#"topology = "cluster"
cluster_nodes = ["redis://:pw@10.0.0.1:6379", "redis://10.0.0.2:6379"]"#,
        )
        .unwrap();
        store(
            r#"topology = "sentinel"
sentinels = ["redis://10.0.0.5:26379"]
sentinel_master = "hookonce"
sentinel_password = "s3"
password = "m4""#,
        )
        .unwrap();
        store(r#"redis_url = "redis://127.0.0.1:6379""#).unwrap();
    }

    #[test]
    fn errors_name_the_key_and_hide_credentials() {
        let cases = [
            (r#"topology = "cluster""#, "store.cluster_nodes: must list"),
            (
                r#"topology = "cluster"
cluster_nodes = ["http://u:hunter2@h:1"]"#,
                "store.cluster_nodes[0]: http://[redacted]@h:1/ must start",
            ),
            (
                r#"topology = "cluster"
cluster_nodes = ["redis://u:hunter2@h"]"#,
                "store.cluster_nodes[0]: redis://[redacted]@h must be host:port",
            ),
            (
                r#"topology = "sentinel"
sentinels = ["redis://h:26379"]"#,
                "store.sentinel_master: must name",
            ),
            (
                r#"cluster_nodes = ["redis://h:1"]"#,
                "store.cluster_nodes: is read only when store.topology = \"cluster\"",
            ),
            (
                r#"topology = "cluster"
cluster_nodes = ["redis://h:1"]
sentinel_password = "x""#,
                "store.sentinel_password: is read only when",
            ),
            (
                r#"backend = "memory"
topology = "sentinel""#,
                "store.topology: applies to store.backend = \"redis\" only",
            ),
        ];
        for (toml, expected) in cases {
            let error = store(toml).unwrap_err();
            assert!(error.starts_with(expected), "{toml}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
