//! The client address: unit tests of the header grammars (RFC 7239's own examples among them),
//! and properties (proptest through `crate::property`) of the walk: an untrusted peer's headers
//! never matter, the rightmost untrusted hop decides whatever a client put to its left, and an
//! unreadable hop where the walk needs one never becomes an address.

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use proptest::collection::vec;
use proptest::prelude::*;

use super::{node, resolve, unquote, ClientAddr, Hop};
use crate::access::networks::Networks;
use crate::config::Cidr;
use crate::property::check;

fn trusted() -> Networks {
    let ranges: Vec<Cidr> = ["10.0.0.0/8", "2001:db8:ff::/48", "192.0.2.7"]
        .iter()
        .map(|r| Cidr::parse(r).unwrap())
        .collect();
    Networks::new(&ranges)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn known(text: &str) -> ClientAddr {
    ClientAddr::Known(ip(text))
}

fn headers(lines: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in lines {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        map.append(name, HeaderValue::from_str(value).unwrap());
    }
    map
}

/// The client of a request from the trusted proxy 10.0.0.5 carrying `lines`.
fn via_proxy(lines: &[(&str, &str)]) -> ClientAddr {
    resolve(ip("10.0.0.5"), &headers(lines), &trusted())
}

#[test]
fn an_untrusted_peer_is_the_client_and_its_headers_are_not_read() {
    let spoofed = headers(&[
        ("x-forwarded-for", "10.0.0.1"),
        ("forwarded", "for=10.0.0.1"),
    ]);
    let client = resolve(ip("203.0.113.9"), &spoofed, &trusted());
    assert_eq!(client, known("203.0.113.9"));
    let mapped = resolve(ip("::ffff:203.0.113.9"), &spoofed, &trusted());
    assert_eq!(
        mapped,
        known("203.0.113.9"),
        "an IPv4-mapped peer is its IPv4"
    );
}

#[test]
fn the_rightmost_untrusted_hop_of_x_forwarded_for_is_the_client() {
    assert_eq!(
        via_proxy(&[]),
        known("10.0.0.5"),
        "no header: the peer itself"
    );
    let chain = [("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.1.1.1")];
    assert_eq!(via_proxy(&chain), known("203.0.113.9"));
    let lines = [
        ("x-forwarded-for", "garbage, 198.51.100.1"),
        ("x-forwarded-for", "203.0.113.9:4711,192.0.2.7"),
    ];
    assert_eq!(
        via_proxy(&lines),
        known("203.0.113.9"),
        "lines join in order"
    );
    let v6 = [("x-forwarded-for", "[2001:db8::1]:443, 2001:db8:ff::9")];
    assert_eq!(via_proxy(&v6), known("2001:db8::1"));
    let all_trusted = [("x-forwarded-for", "10.9.9.9, 10.1.1.1")];
    assert_eq!(
        via_proxy(&all_trusted),
        known("10.9.9.9"),
        "leftmost when all trusted"
    );
    let empty = [("x-forwarded-for", " , ")];
    assert_eq!(via_proxy(&empty), known("10.0.0.5"));
}

#[test]
fn an_unreadable_hop_where_the_walk_needs_one_resolves_no_client() {
    let unresolved = ClientAddr::Unresolved {
        via: ip("10.1.1.1"),
    };
    for value in [
        "203.0.113.9, unknown, 10.1.1.1",
        "203.0.113.9, example.com, 10.1.1.1",
        "203.0.113.9, fe80::1%eth0, 10.1.1.1",
        "203.0.113.9, 203.0.113.10:99999, 10.1.1.1",
        "203.0.113.9, \"203.0.113.10\", 10.1.1.1",
    ] {
        assert_eq!(
            via_proxy(&[("x-forwarded-for", value)]),
            unresolved,
            "{value}"
        );
    }
    let mut opaque = HeaderMap::new();
    opaque.append(
        "x-forwarded-for",
        HeaderValue::from_bytes(b"203.0.113.9\xff").unwrap(),
    );
    let client = resolve(ip("10.0.0.5"), &opaque, &trusted());
    assert_eq!(
        client,
        ClientAddr::Unresolved {
            via: ip("10.0.0.5")
        }
    );
}

#[test]
fn forwarded_reads_rfc_7239s_examples() {
    let cases = [
        ("for=\"_gazonk\"", None),
        (
            "For=\"[2001:db8:cafe::17]:4711\"",
            Some("2001:db8:cafe::17"),
        ),
        (
            "for=192.0.2.60;proto=http;by=203.0.113.43",
            Some("192.0.2.60"),
        ),
        ("for=192.0.2.43, for=198.51.100.17", Some("198.51.100.17")),
        ("for=198.51.100.17, for=10.2.2.2", Some("198.51.100.17")),
        ("for=unknown", None),
        ("proto=https;host=example.com", None),
        ("for=198.51.100.17;for=198.51.100.18", None),
        ("for=\"198.51.100.17:_port1\"", Some("198.51.100.17")),
        (
            "for=\"[2001:db8::1]\", for=2001:db8:ff::1",
            Some("2001:db8::1"),
        ),
        ("for=\"x, y\", for=198.51.100.17", Some("198.51.100.17")),
    ];
    for (value, expected) in cases {
        let client = via_proxy(&[("forwarded", value)]);
        match expected {
            Some(address) => assert_eq!(client, known(address), "{value}"),
            None => assert!(
                matches!(client, ClientAddr::Unresolved { .. }),
                "{value}: {client}"
            ),
        }
    }
}

#[test]
fn two_headers_must_name_one_client() {
    let agree = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9;proto=https"),
    ];
    assert_eq!(via_proxy(&agree), known("203.0.113.9"));
    // A proxy that sets only X-Forwarded-For passes a client's own Forwarded through.
    let spoofed = [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=198.51.100.1"),
    ];
    let client = via_proxy(&spoofed);
    assert_eq!(
        client,
        ClientAddr::Unresolved {
            via: ip("10.0.0.5")
        }
    );
    assert_eq!(client.to_string(), "unresolved (forwarded by 10.0.0.5)");
}

#[test]
fn nodes_and_quoted_strings_parse_exactly() {
    assert_eq!(node("192.0.2.1", false), Hop::Address(ip("192.0.2.1")));
    assert_eq!(
        node("::ffff:192.0.2.1", false),
        Hop::Address(ip("192.0.2.1"))
    );
    assert_eq!(node("[::1]:80", false), Hop::Address(ip("::1")));
    assert_eq!(
        node("[::1]:_x", false),
        Hop::Unreadable,
        "obfuscated ports: Forwarded only"
    );
    assert_eq!(node("[::1]:_x", true), Hop::Address(ip("::1")));
    for bad in [
        "",
        "[::1",
        "[::1]x",
        "::1:80x",
        "1.2.3.4:",
        "1.2.3.4:123456",
        "[1.2.3.4]",
    ] {
        assert_eq!(node(bad, true), Hop::Unreadable, "{bad:?}");
    }
    assert_eq!(unquote("\"a\\\"b\"").as_deref(), Some("a\"b"));
    assert_eq!(unquote("\"open"), None);
    assert_eq!(unquote("a b"), None);
}

/// An address outside every trusted range, IPv4 or IPv6.
fn untrusted_address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u16; 8]>().prop_map(IpAddr::from),
    ]
    .prop_map(|a| a.to_canonical())
    .prop_filter("not trusted", |a| !trusted().contains(*a))
}

/// An address in a trusted range.
fn trusted_address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|b| IpAddr::from([10, b[0], b[1], b[2]])),
        any::<[u16; 5]>()
            .prop_map(|s| IpAddr::from([0x2001, 0xdb8, 0xff, s[0], s[1], s[2], s[3], s[4]])),
    ]
}

/// How a node is written in `Forwarded`: IPv6 quoted and bracketed.
fn forwarded_node(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => format!("for={v4}"),
        IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
    }
}

/// Whatever a client may put in a header: visible ASCII and spaces.
fn client_text() -> impl Strategy<Value = String> {
    vec(0x20u8..=0x7e, 0..40).prop_map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn whatever_an_untrusted_peer_sends_it_is_the_client() {
    let bytes = || vec(any::<u8>(), 0..60);
    check(
        256,
        (untrusted_address(), bytes(), bytes()),
        |(peer, xff, fwd)| {
            let mut map = HeaderMap::new();
            for (name, value) in [("x-forwarded-for", xff), ("forwarded", fwd)] {
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    map.append(name, value);
                }
            }
            prop_assert_eq!(resolve(peer, &map, &trusted()), ClientAddr::Known(peer));
            Ok(())
        },
    );
}

#[test]
fn the_rightmost_untrusted_hop_decides_whatever_the_client_prepended() {
    let chain = (
        client_text(),
        untrusted_address(),
        vec(trusted_address(), 0..4),
        trusted_address(),
    );
    check(256, chain, |(prefix, client, hops, peer)| {
        let hops_text: Vec<String> = hops.iter().map(ToString::to_string).collect();
        let xff = std::iter::once(prefix.clone())
            .chain(std::iter::once(client.to_string()))
            .chain(hops_text)
            .collect::<Vec<_>>()
            .join(", ");
        let map = headers(&[("x-forwarded-for", &xff)]);
        prop_assert_eq!(resolve(peer, &map, &trusted()), ClientAddr::Known(client));
        // Forwarded, with what the client sent on a line of its own (a quote it left open
        // cannot swallow the proxies' elements), and on the same line (then it may make the
        // client unresolved, but never another address).
        let ours: Vec<String> = std::iter::once(client)
            .chain(hops.iter().copied())
            .map(forwarded_node)
            .collect();
        let ours = ours.join(", ");
        let apart = headers(&[("forwarded", &prefix), ("forwarded", &ours)]);
        prop_assert_eq!(resolve(peer, &apart, &trusted()), ClientAddr::Known(client));
        let joined = headers(&[("forwarded", &format!("{prefix}, {ours}"))]);
        let got = resolve(peer, &joined, &trusted());
        prop_assert!(
            got == ClientAddr::Known(client) || matches!(got, ClientAddr::Unresolved { .. }),
            "{got:?}"
        );
        Ok(())
    });
}

#[test]
fn an_unreadable_hop_before_the_trusted_ones_is_never_an_address() {
    let garbage = client_text().prop_filter("not an address", |t| {
        let entry = t.trim();
        !entry.is_empty() && !entry.contains(',') && node(entry, false) == Hop::Unreadable
    });
    let chain = (
        client_text(),
        garbage,
        vec(trusted_address(), 0..4),
        trusted_address(),
    );
    check(256, chain, |(prefix, garbage, hops, peer)| {
        let mut entries = vec![prefix, garbage];
        entries.extend(hops.iter().map(ToString::to_string));
        let map = headers(&[("x-forwarded-for", &entries.join(","))]);
        let got = resolve(peer, &map, &trusted());
        prop_assert!(matches!(got, ClientAddr::Unresolved { .. }), "{got:?}");
        Ok(())
    });
}

#[test]
fn the_text_of_a_client_is_what_display_writes() {
    let addresses = [
        "0.0.0.0",
        "127.0.0.1",
        "9.10.99.100",
        "255.255.255.255",
        "::1",
        "2001:db8::7",
    ];
    for text in addresses {
        let client = known(text);
        assert_eq!(
            client.with_text(str::to_owned),
            client.to_string(),
            "{text}"
        );
    }
    let unresolved = ClientAddr::Unresolved {
        via: ip("10.1.2.3"),
    };
    assert_eq!(unresolved.with_text(str::to_owned), unresolved.to_string());
    check(1024, any::<[u8; 4]>(), |octets| {
        let client = ClientAddr::Known(IpAddr::from(octets));
        prop_assert_eq!(client.with_text(str::to_owned), client.to_string());
        Ok(())
    });
}
