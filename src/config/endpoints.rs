//! The addresses the daemon binds and dials, and the headers it sends as configured: the checks
//! that make `check-config` (and start-up, which runs the same validation) refuse what `serve`
//! would fail on or misuse — a TLS URL this build cannot dial, a port no socket can have, two
//! listeners on one address, a static header that changes how a request is framed.
//!
//! Each check is one function that the section owning the key calls with the key's name, so that
//! every error names the key (and a URL only redacted).

use std::net::SocketAddr;

use super::{redact_url, ConfigError};

/// Whether this build can speak TLS to Redis: the redis crate is built with rustls (Cargo.toml),
/// so [`check_redis_url`] lets `rediss://` URLs through; `store_tls.rs` checks the keys TLS reads.
pub const REDIS_TLS: bool = true;

/// Headers that frame an HTTP request or its connection. hookonce's HTTP clients set them from
/// the request they send; a configured value would make the receiver read another message than
/// the one sent (a static `Content-Length = "3"` delivered 3 bytes of a 45-byte body, and the
/// worker's 2xx acknowledged the entry).
pub const FRAMING_HEADERS: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "upgrade",
    "te",
    "trailer",
];

/// Refuses a Redis URL this build cannot dial: `rediss://` without TLS support, a URL fragment
/// other than `#insecure` (the only one the redis crate reads; any other would fail at the first
/// connection), or a port outside 1–65535.
pub fn check_redis_url(key: &str, url: &str) -> Result<(), ConfigError> {
    if !REDIS_TLS && url.starts_with("rediss://") {
        return Err(ConfigError::invalid(
            key,
            format!(
                "{}: TLS to Redis (rediss://) is not supported by this build; use redis:// \
                 (through a TLS tunnel where the network needs one)",
                redact_url(url)
            ),
        ));
    }
    if let Some((_, fragment)) = url.split_once('#') {
        if !(fragment == "insecure" && url.starts_with("rediss://")) {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "{}: the only URL fragment understood is #insecure, on a rediss:// URL",
                    redact_url(url)
                ),
            ));
        }
    }
    check_dial_port(key, url)
}

/// Refuses a URL to dial whose port cannot be connected to: one above 65535 (or not a number),
/// or port 0, which no server listens on. A URL without a port (the scheme's default) or without
/// a host (a Unix socket) passes.
pub fn check_dial_port(key: &str, url: &str) -> Result<(), ConfigError> {
    let dialable = match url::Url::parse(url) {
        Err(url::ParseError::InvalidPort) => false,
        Ok(parsed) => parsed.port() != Some(0),
        // Any other flaw is the key's own check to report, in its own words.
        Err(_) => true,
    };
    if dialable {
        return Ok(());
    }
    Err(ConfigError::invalid(
        key,
        format!(
            "{} has a port outside 1-65535 (port 0 and ports above 65535 cannot be dialled)",
            redact_url(url)
        ),
    ))
}

/// Checks `url` (the value of `key`) as the daemon's HTTP client will send to it
/// (src/http_client.rs): an `http` or `https` URL with a host and a port it can dial, that
/// reads both as a URL and as an HTTP URI.
pub fn check_http_url(key: &str, url: &str) -> Result<(), ConfigError> {
    validate_url(url).map_err(|p| ConfigError::invalid(key, p))?;
    check_dial_port(key, url)?;
    // After the port's own message, which a port past 65535 would otherwise get from here.
    if url::Url::parse(url).is_err() {
        return Err(ConfigError::invalid(key, not_a_url(url)));
    }
    Ok(())
}

fn validate_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() || url.parse::<http::Uri>().is_err() {
        return Err(not_a_url(url));
    }
    Ok(())
}

fn not_a_url(url: &str) -> String {
    format!(
        "{} is not a URL such as \"http://billing:8080/webhooks\"",
        redact_url(url)
    )
}

/// Refuses a static header that would frame the request (see [`FRAMING_HEADERS`]).
pub fn check_static_header(key: &str, name: &str) -> Result<(), ConfigError> {
    if FRAMING_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(ConfigError::invalid(
            key,
            "frames the request (Content-Length, Transfer-Encoding, Host, Connection, Upgrade, TE \
             and Trailer are set by hookonce from the request it sends) and cannot be configured",
        ));
    }
    Ok(())
}

/// Refuses two listeners that cannot both bind: the same address and port, or one port taken on
/// every interface by a wildcard address (`0.0.0.0`, or `[::]`, which takes IPv4 too on a
/// dual-stack host) and on one interface by the other. Port 0 asks the OS for a free port, so
/// two of them never collide. `listeners` are (key, address) in the order they are configured;
/// the error names the later key and the earlier one.
pub fn check_listeners(listeners: &[(String, SocketAddr)]) -> Result<(), ConfigError> {
    for (i, (key, addr)) in listeners.iter().enumerate() {
        if addr.port() == 0 {
            continue;
        }
        if let Some((other, taken)) = listeners[..i].iter().find(|(_, b)| overlap(*addr, *b)) {
            let problem = if taken == addr {
                format!("{addr} is also the address of {other}")
            } else {
                format!(
                    "{addr} and {other} = {taken} take the same port (a wildcard address takes it \
                     on every interface), so one of them could not bind"
                )
            };
            return Err(ConfigError::invalid(key.clone(), problem));
        }
    }
    Ok(())
}

/// Whether binding `a` and `b` (both with a port) at once would fail.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() {
        return false;
    }
    if a.ip() == b.ip() {
        return true;
    }
    // `[::]` takes the port for IPv4 too (IPV6_V6ONLY is off by default on Linux); `0.0.0.0`
    // takes it for every IPv4 address only.
    let covers = |wide: SocketAddr, narrow: SocketAddr| {
        wide.ip().is_unspecified() && (wide.is_ipv6() || narrow.is_ipv4())
    };
    covers(a, b) || covers(b, a)
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod settings_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ports_outside_1_to_65535_are_refused() {
        for url in [
            "http://orders:99999",
            "http://orders:0/v1",
            "redis://h:65536",
            "redis://:hunter2@h:99999",
            "nats://bus:0",
            "https://u:hunter2@w:123456/hook",
        ] {
            let error = check_dial_port("k.url", url).unwrap_err().to_string();
            assert!(error.starts_with("k.url: "), "{url}: {error}");
            assert!(error.contains("outside 1-65535"), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
        for url in [
            "http://orders",
            "http://orders:1",
            "https://w:65535/hook",
            "redis://h:6379",
            "unix:///run/redis.sock",
        ] {
            check_dial_port("k.url", url).unwrap();
        }
    }

    #[test]
    fn listeners_on_one_address_or_port_are_refused_naming_both_keys() {
        let refused = [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
            ("127.0.0.1:8080", "0.0.0.0:8080"),
            ("[::]:8080", "127.0.0.1:8080"),
            ("[::]:8080", "[::1]:8080"),
        ];
        for (a, b) in refused {
            let listeners = [
                ("a.listen".to_owned(), addr(a)),
                ("b.listen".to_owned(), addr(b)),
            ];
            let error = check_listeners(&listeners).unwrap_err().to_string();
            assert!(error.starts_with("b.listen: "), "{a} {b}: {error}");
            assert!(error.contains("a.listen"), "{a} {b}: {error}");
        }
        let accepted = [
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("0.0.0.0:8080", "0.0.0.0:8081"),
            ("127.0.0.1:8080", "127.0.0.2:8080"),
            ("0.0.0.0:8080", "[::1]:8080"),
        ];
        for (a, b) in accepted {
            let listeners = [
                ("a.listen".to_owned(), addr(a)),
                ("b.listen".to_owned(), addr(b)),
            ];
            check_listeners(&listeners).unwrap();
        }
    }
}
