//! Who may call the webhook front (docs/design.md, "Who may call"), end to end against the
//! daemon in this process over a real redis-server: `allowlist` (`allowed_ips`, the client
//! address through `server.trusted_proxies`, spoofed headers, IPv6), `rate_limit` (a source's
//! verified deliveries), `flood` (`server.rejected_limit`: one address guessing signatures while
//! another's deliveries go on), `proxy_headers` (what the Idempotency-Key proxy tells its upstream
//! from trusted and untrusted peers) and `check_config` (each bad key refused by name).
//!
//! Clients on other loopback addresses (127.0.0.2, …) reach the daemon on 127.0.0.1: Linux
//! routes all of 127/8 to the loopback interface, so the daemon sees them as distinct peers.

mod allowlist;
mod check_config;
mod flood;
mod proxy_headers;
mod rate_limit;

use std::net::{IpAddr, SocketAddr};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::settings::{Cidr, Rate};
use crate::support::{http, stripe_body, with_id, TestApp};

/// Address ranges as a configuration file writes them.
pub fn cidrs(ranges: &[&str]) -> Vec<Cidr> {
    ranges.iter().map(|r| Cidr::parse(r).unwrap()).collect()
}

pub fn rate(text: &str) -> Rate {
    Rate::parse(text).unwrap()
}

/// A client whose connections come from `local`.
pub fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// A delivery of event `id` to `source` as its provider signs it: the body and its headers.
pub fn signed(t: &TestApp, source: &str, id: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let body = stripe_body(id, 200);
    let headers = t.sign(source, &body, &with_id(id));
    (body, headers)
}

/// Posts a signed delivery of `id` to `source` from `client`, with `extra` headers.
pub async fn deliver_from(
    t: &TestApp,
    client: &reqwest::Client,
    source: &str,
    id: &str,
    extra: &[(&str, &str)],
) -> reqwest::Response {
    let (body, mut headers) = signed(t, source, id);
    headers.extend(extra.iter().map(|(n, v)| (n.to_string(), v.to_string())));
    let url = t.url(&format!("/webhooks/{source}"));
    http::post(client, &url, &body, &headers).await
}

/// Opens a connection from `local` to `addr`, sends a POST's head declaring `declared` body
/// bytes and not one of them, and returns the answer's head: only an answer made before the body
/// can come back.
pub async fn head_only_from(
    local: IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    declared: usize,
) -> String {
    let mut stream = connect_from(local, addr).await;
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {declared}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    http::read_head(&mut stream)
        .await
        .unwrap_or_else(|e| panic!("an answer before the body to {path}: {e}"))
}

pub async fn connect_from(local: IpAddr, addr: SocketAddr) -> TcpStream {
    let socket = match local {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => TcpSocket::new_v6(),
    }
    .unwrap();
    socket.bind((local, 0).into()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// The value of `Retry-After` in an answer's head.
pub fn retry_after(head: &str) -> Option<u64> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().parse().ok())?
    })
}
