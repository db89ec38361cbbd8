//! The checks on TLS to Redis: which URLs speak it, the `store.tls_*` files (they must exist and
//! parse, so `check-config` refuses what `serve` would fail on at its first connection), and the
//! explicit acknowledgement that an unverified connection needs.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::{ConfigError, ServiceUrl, StoreBackend, StoreSettings, StoreTopology};

impl StoreSettings {
    /// Every URL the configured topology dials.
    pub fn dialled_urls(&self) -> Vec<(String, &ServiceUrl)> {
        match self.topology {
            StoreTopology::Standalone => vec![("store.redis_url".to_owned(), &self.redis_url)],
            StoreTopology::Cluster => indexed("store.cluster_nodes", &self.cluster_nodes),
            StoreTopology::Sentinel => indexed("store.sentinels", &self.sentinels),
        }
    }

    /// Whether the store is reached over TLS: every URL of the topology is `rediss://` (the
    /// checks below refuse a mix).
    pub fn uses_tls(&self) -> bool {
        self.backend == StoreBackend::Redis
            && self
                .dialled_urls()
                .iter()
                .all(|(_, url)| url.0.starts_with("rediss://"))
    }

    pub(super) fn validate_tls(&self) -> Result<(), ConfigError> {
        if self.backend == StoreBackend::Memory {
            return refuse_set(self, "applies to store.backend = \"redis\" only");
        }
        let urls = self.dialled_urls();
        let tls = urls.iter().filter(|(_, url)| is_tls(url)).count();
        if tls != 0 && tls != urls.len() {
            let (key, _) = urls
                .iter()
                .find(|(_, url)| !is_tls(url))
                .expect("a URL without TLS");
            return Err(ConfigError::invalid(
                key.clone(),
                "uses redis:// while other store URLs use rediss://; every server of the store \
                 is reached the same way",
            ));
        }
        if tls == 0 {
            return refuse_set(self, "is read only when the store URLs use rediss://");
        }
        for (key, url) in &urls {
            if url.0.ends_with("#insecure") && !self.tls_insecure {
                return Err(ConfigError::invalid(
                    key.clone(),
                    format!(
                        "{} turns certificate verification off (#insecure); set \
                         store.tls_insecure = true to accept that anyone on the network can \
                         impersonate Redis, or remove #insecure",
                        url.redacted()
                    ),
                ));
            }
        }
        if self.tls_insecure && self.tls_ca_file.is_some() {
            return Err(ConfigError::invalid(
                "store.tls_ca_file",
                "has no effect with store.tls_insecure = true, which checks no certificate; \
                 remove one of them",
            ));
        }
        if let Some(path) = &self.tls_ca_file {
            let count = read_certificates("store.tls_ca_file", path)?;
            if count == 0 {
                return Err(ConfigError::invalid(
                    "store.tls_ca_file",
                    format!("{} holds no PEM certificate", path.display()),
                ));
            }
        }
        check_client_pair(
            "store",
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        )
    }
}

/// `{section}.tls_cert_file` and `{section}.tls_key_file`: both or neither, a readable PEM
/// certificate and a readable PEM private key.
pub(super) fn check_client_pair(
    section: &str,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<(), ConfigError> {
    let (cert_key, key_key) = (
        format!("{section}.tls_cert_file"),
        format!("{section}.tls_key_file"),
    );
    match (cert, key) {
        (None, None) => {}
        (Some(_), None) => {
            return Err(ConfigError::invalid(
                key_key,
                format!("must be set with {cert_key} (a client certificate needs its key)"),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                cert_key,
                format!("must be set with {key_key} (a client key needs its certificate)"),
            ))
        }
        (Some(cert), Some(key)) => {
            if read_certificates(&cert_key, cert)? == 0 {
                return Err(ConfigError::invalid(
                    cert_key,
                    format!("{} holds no PEM certificate", cert.display()),
                ));
            }
            read_file(&key_key, key)?;
            PrivateKeyDer::from_pem_file(key).map_err(|error| {
                ConfigError::invalid(
                    key_key,
                    format!(
                        "{} holds no readable PEM private key: {error}",
                        key.display()
                    ),
                )
            })?;
        }
    }
    Ok(())
}

fn indexed<'a>(key: &str, urls: &'a [ServiceUrl]) -> Vec<(String, &'a ServiceUrl)> {
    urls.iter()
        .enumerate()
        .map(|(i, url)| (format!("{key}[{i}]"), url))
        .collect()
}

fn is_tls(url: &ServiceUrl) -> bool {
    url.0.starts_with("rediss://")
}

/// Refuses the first `store.tls_*` key that is set, with `problem`.
fn refuse_set(settings: &StoreSettings, problem: &str) -> Result<(), ConfigError> {
    let set = [
        ("store.tls_ca_file", settings.tls_ca_file.is_some()),
        ("store.tls_cert_file", settings.tls_cert_file.is_some()),
        ("store.tls_key_file", settings.tls_key_file.is_some()),
        ("store.tls_insecure", settings.tls_insecure),
    ];
    match set.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(ConfigError::invalid(*key, problem)),
        None => Ok(()),
    }
}

fn read_file(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|error| {
        ConfigError::invalid(key, format!("cannot read {}: {error}", path.display()))
    })
}

/// How many PEM certificates the file holds; an error when it cannot be read or one of them
/// does not parse.
pub(super) fn read_certificates(key: &str, path: &Path) -> Result<usize, ConfigError> {
    let text = read_file(key, path)?;
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(&text) {
        certificate.map_err(|error| {
            ConfigError::invalid(
                key,
                format!(
                    "{} holds an unreadable PEM certificate: {error}",
                    path.display()
                ),
            )
        })?;
        count += 1;
    }
    Ok(count)
}
