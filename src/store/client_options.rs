//! What every Redis client of the store is opened with: its retries and their delay, the
//! data-node credentials, and TLS (`store.tls_*`). `connection.rs` (standalone, cluster) and `sentinel.rs` (the master it
//! finds) both use it, so this sits below both and neither imports the other for it.

use std::path::Path;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::{
    Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult,
    TlsCertificates,
};

use crate::config::{Secret, StoreSettings};

/// Retries of one call inside the client: few, because the caller's deadline (`store.timeout`)
/// is what bounds a request, and the provider retries what got 503.
pub(super) const CLIENT_RETRIES: u32 = 2;
pub(super) const MAX_RETRY_WAIT: Duration = Duration::from_millis(200);

/// The reconnect policy of every single-server connection (standalone, sentinel's master).
pub(super) fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(CLIENT_RETRIES as usize)
        .set_max_delay(MAX_RETRY_WAIT)
}

/// `info` with the data-node credentials of `store.username` / `store.password`, when set.
pub(super) fn with_credentials(
    mut redis: redis::RedisConnectionInfo,
    username: Option<&Secret>,
    password: Option<&Secret>,
) -> redis::RedisConnectionInfo {
    if let Some(username) = username {
        redis = redis.set_username(username.expose());
    }
    if let Some(password) = password {
        redis = redis.set_password(password.expose());
    }
    redis
}

/// The CA and client certificate of `store.tls_ca_file`, `store.tls_cert_file` and
/// `store.tls_key_file`, read from their files; `None` when none is set, so that a `rediss://`
/// connection checks the server against the public CAs built in.
pub(super) fn tls_certificates(settings: &StoreSettings) -> RedisResult<Option<TlsCertificates>> {
    let read = |key: &str, path: &Path| {
        std::fs::read(path).map_err(|error| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "cannot read a TLS file",
                format!("{key} = {}: {error}", path.display()),
            ))
        })
    };
    let root_cert = match &settings.tls_ca_file {
        Some(path) => Some(read("store.tls_ca_file", path)?),
        None => None,
    };
    let client_tls = match (&settings.tls_cert_file, &settings.tls_key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("store.tls_cert_file", cert)?,
            client_key: read("store.tls_key_file", key)?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// `info` without certificate verification when `store.tls_insecure` is set (check-config
/// refuses it otherwise); unchanged for a plain TCP or Unix address.
pub(super) fn with_tls_mode(info: ConnectionInfo, settings: &StoreSettings) -> ConnectionInfo {
    match info.addr().clone() {
        ConnectionAddr::TcpTls { host, port, .. } if settings.tls_insecure => {
            info.set_addr(ConnectionAddr::TcpTls {
                host,
                port,
                insecure: true,
                tls_params: None,
            })
        }
        _ => info,
    }
}

/// A client for one server at `info`, with the configured certificates when it is a TLS one.
pub(super) fn client(info: ConnectionInfo, settings: &StoreSettings) -> RedisResult<Client> {
    let info = with_tls_mode(info, settings);
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    match tls_certificates(settings)? {
        Some(certificates) if tls => Client::build_with_tls(info, certificates),
        _ => Client::open(info),
    }
}

/// How the store's TLS is set up, for the connection error to name (a certificate the server
/// refuses, or a server certificate the CA does not sign, shows up only as a TLS error).
pub(super) fn describe_tls(settings: &StoreSettings) -> Option<String> {
    if !settings.uses_tls() {
        return None;
    }
    let mut text = match &settings.tls_ca_file {
        _ if settings.tls_insecure => {
            "TLS without certificate verification (store.tls_insecure)".to_owned()
        }
        Some(path) => format!(
            "TLS, server certificate checked against the CA of store.tls_ca_file = {}",
            path.display()
        ),
        None => "TLS, server certificate checked against the public CAs (no store.tls_ca_file)"
            .to_owned(),
    };
    match &settings.tls_cert_file {
        Some(path) => text.push_str(&format!(
            ", client certificate store.tls_cert_file = {}",
            path.display()
        )),
        None => text.push_str(", no client certificate (store.tls_cert_file)"),
    }
    Some(text)
}
