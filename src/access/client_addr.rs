//! Who the client of a request is: the socket's peer, or — only when that peer is a trusted
//! proxy (`server.trusted_proxies`) — the rightmost untrusted hop of `X-Forwarded-For` or
//! `Forwarded` (RFC 7239).
//!
//! A forwarding header is a list that every proxy appends to, so only its right end is written
//! by proxies we trust; everything to the left of the first untrusted hop is whatever the client
//! sent. So the list is walked from the right, skipping trusted hops, and the first untrusted one
//! is the client; nothing to its left is read. An untrusted peer's headers are not read at all.
//!
//! What cannot be read is never taken as an address: a hop reached by the walk that does not
//! parse (`unknown`, an obfuscated `_name`, garbage, a `Forwarded` element without `for=`), and
//! two headers that name different clients (one of them passed through from the client by a
//! proxy that sets only the other), make the client [`ClientAddr::Unresolved`], which no
//! allowlist admits. A trusted peer that sends neither header is itself the client.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};

use super::networks::Networks;
use crate::util::with_ip_text;

/// The client a request is from, as far as the trusted hops tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientAddr {
    /// The peer's address, or the hop a trusted peer named (IPv4-mapped IPv6 as IPv4).
    Known(IpAddr),
    /// A trusted peer forwarded the request, but which client sent it cannot be read; `via` is
    /// the last trusted hop before the unreadable one.
    Unresolved { via: IpAddr },
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientAddr::Known(address) => write!(f, "{address}"),
            ClientAddr::Unresolved { via } => write!(f, "unresolved (forwarded by {via})"),
        }
    }
}

impl ClientAddr {
    /// Calls `f` with the address as `Display` writes it; a known IPv4 client, the common case,
    /// without an allocation or `fmt`'s machinery (each request's log line names it).
    pub fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match *self {
            ClientAddr::Known(address) => with_ip_text(address, f),
            ClientAddr::Unresolved { .. } => f(&self.to_string()),
        }
    }
}

/// The client of a request from `peer` with these `headers`.
pub fn resolve(peer: IpAddr, headers: &HeaderMap, trusted: &Networks) -> ClientAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return ClientAddr::Known(peer);
    }
    let by_xff = walk(&x_forwarded_for(headers), peer, trusted);
    let by_forwarded = walk(&forwarded(headers), peer, trusted);
    match (by_xff, by_forwarded) {
        (None, None) => ClientAddr::Known(peer),
        (Some(client), None) | (None, Some(client)) => client,
        (Some(a), Some(b)) if a == b => a,
        _ => ClientAddr::Unresolved { via: peer },
    }
}

/// One entry of a forwarding list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    Address(IpAddr),
    Unreadable,
}

/// The client a list names, walking from its right end past trusted hops; `None` for an empty
/// list. When every hop is trusted, the leftmost is the client (a caller inside the network).
fn walk(hops: &[Hop], peer: IpAddr, trusted: &Networks) -> Option<ClientAddr> {
    if hops.is_empty() {
        return None;
    }
    let mut last_trusted = peer;
    for hop in hops.iter().rev() {
        match *hop {
            Hop::Unreadable => return Some(ClientAddr::Unresolved { via: last_trusted }),
            Hop::Address(address) if trusted.contains(address) => last_trusted = address,
            Hop::Address(address) => return Some(ClientAddr::Known(address)),
        }
    }
    Some(ClientAddr::Known(last_trusted))
}

/// `X-Forwarded-For`, as a name made once: given as text, a header map parses it at every lookup.
/// The proxy appends to the same header (`proxy::upstream`).
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Every `X-Forwarded-For` line's entries, in order: `192.0.2.1`, `2001:db8::1`,
/// `[2001:db8::1]`, and with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`), as some load
/// balancers write them. A line that is not visible ASCII is one unreadable hop.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for line in headers.get_all(X_FORWARDED_FOR) {
        let Ok(text) = line.to_str() else {
            hops.push(Hop::Unreadable);
            continue;
        };
        hops.extend(
            text.split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(|entry| node(entry, false)),
        );
    }
    hops
}

/// Every `Forwarded` line's elements, in order, each as its `for=` node.
fn forwarded(headers: &HeaderMap) -> Vec<Hop> {
    headers
        .get_all(header::FORWARDED)
        .iter()
        .flat_map(forwarded_line)
        .collect()
}

fn forwarded_line(line: &HeaderValue) -> Vec<Hop> {
    let Ok(text) = line.to_str() else {
        return vec![Hop::Unreadable];
    };
    split_outside_quotes(text, ',')
        .into_iter()
        .map(str::trim)
        .filter(|element| !element.is_empty())
        .map(forwarded_element)
        .collect()
}

/// One element (`for=192.0.2.60;proto=https;by=203.0.113.43`) as its `for=` node; an element
/// without one, or with two, is unreadable.
fn forwarded_element(element: &str) -> Hop {
    let mut found = None;
    for pair in split_outside_quotes(element, ';') {
        let Some((name, value)) = pair.split_once('=') else {
            return Hop::Unreadable;
        };
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return Hop::Unreadable;
        }
        found = Some(unquote(value.trim()).map_or(Hop::Unreadable, |v| node(&v, true)));
    }
    found.unwrap_or(Hop::Unreadable)
}

/// A parameter value: a token as it is, or a quoted string with its escapes undone.
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        let token = !value.is_empty() && !value.contains(['"', '\\', ' ', '\t']);
        return token.then(|| value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// `text` split at `separator` where it is outside a quoted string (which may hold it).
fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A node: an IPv4 or IPv6 address, optionally with a port (`[v6]:port`, `v4:port`; in
/// `Forwarded`, an obfuscated `_port` too). Anything else — `unknown`, an obfuscated `_name`, a
/// host name, a zone index — is unreadable: it names no address that could be judged.
fn node(text: &str, obfuscated_port: bool) -> Hop {
    let port_ok = |port: &str| {
        port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
            || obfuscated_port
                && port.len() > 1
                && port.starts_with('_')
                && port[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    let address = if let Some(rest) = text.strip_prefix('[') {
        rest.split_once(']').and_then(|(v6, after)| {
            let port_fine = after.is_empty() || after.strip_prefix(':').is_some_and(port_ok);
            port_fine
                .then(|| v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6))
                .flatten()
        })
    } else if let Ok(address) = text.parse::<IpAddr>() {
        Some(address)
    } else {
        text.rsplit_once(':')
            .filter(|(_, port)| port_ok(port))
            .and_then(|(v4, _)| v4.parse::<Ipv4Addr>().ok().map(IpAddr::V4))
    };
    address.map_or(Hop::Unreadable, |a| Hop::Address(a.to_canonical()))
}

#[cfg(test)]
#[path = "client_addr_tests.rs"]
mod tests;
