//! The address and rate values of "who may call": parsing, matching, the burst checks, and each
//! key through the whole loader with the error naming it.

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn ranges_parse_and_match_both_families() {
    let net = Cidr::parse("10.0.0.0/8").unwrap();
    assert!(net.contains(ip("10.255.1.2")) && !net.contains(ip("11.0.0.1")));
    assert!(
        net.contains(ip("::ffff:10.1.2.3")),
        "a mapped address is its IPv4"
    );
    let v6 = Cidr::parse("2001:db8::/32").unwrap();
    assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
    assert!(!v6.contains(ip("10.0.0.1")));
    let host = Cidr::parse("192.0.2.7").unwrap();
    assert_eq!(host.to_string(), "192.0.2.7/32");
    assert!(host.contains(ip("192.0.2.7")) && !host.contains(ip("192.0.2.8")));
    assert_eq!(Cidr::parse("::1").unwrap().to_string(), "::1/128");
    let all = Cidr::parse("0.0.0.0/0").unwrap();
    assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("::1")));
    assert!(Cidr::parse("::/0").unwrap().contains(ip("2001:db8::1")));
    let mapped = Cidr::parse("::ffff:10.0.0.0/104").unwrap();
    assert_eq!(mapped.to_string(), "10.0.0.0/8");
}

#[test]
fn bad_ranges_are_refused_with_the_reason() {
    for (text, says) in [
        ("10.0.0.300/8", "is not an IP address"),
        ("example.com", "is not an IP address"),
        ("10.0.0.0/33", "prefix length outside 0-32"),
        ("2001:db8::/129", "prefix length outside 0-128"),
        ("10.0.0.0/+8", "prefix length"),
        ("10.0.0.0/", "prefix length"),
        ("10.0.0.1/8", "write \"10.0.0.0/8\""),
        ("fe80::1%eth0", "is not an IP address"),
        ("::ffff:10.0.0.0/64", "at least 96"),
    ] {
        let error = Cidr::parse(text).unwrap_err();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn rates_parse_per_second_and_per_minute() {
    let rate = Rate::parse("200/s").unwrap();
    assert_eq!(rate.per_second(), 200.0);
    assert_eq!(rate.default_burst(), 200);
    let slow = Rate::parse("30/m").unwrap();
    assert_eq!(slow.per_second(), 0.5);
    assert_eq!(slow.default_burst(), 1, "at least one token");
    assert_eq!(Rate::parse("2.5/s").unwrap().default_burst(), 3);
    for (text, says) in [
        ("200", "is not a rate"),
        ("0/s", "positive rate"),
        ("-5/s", "is not a rate"),
        ("1e3/s", "is not a rate"),
        ("inf/s", "is not a rate"),
        ("NaN/s", "is not a rate"),
        ("10/h", "unknown unit"),
        ("/s", "is not a rate"),
        ("2000000000/s", "positive rate"),
    ] {
        let error = Rate::parse(text).unwrap_err();
        assert!(error.contains(says), "{text}: {error}");
    }
}

#[test]
fn a_burst_needs_its_rate_and_is_above_zero() {
    let rate = Rate::parse("10/s").unwrap();
    let key = "sources.x.rate_limit";
    assert_eq!(check_limit(key, None, None).unwrap(), None);
    let limit = check_limit(key, Some(&rate), None).unwrap().unwrap();
    assert_eq!((limit.per_second, limit.burst), (10.0, 10));
    assert_eq!(
        check_limit(key, Some(&rate), Some(40))
            .unwrap()
            .unwrap()
            .burst,
        40
    );
    let zero = check_limit(key, Some(&rate), Some(0))
        .unwrap_err()
        .to_string();
    assert_eq!(
        zero,
        "sources.x.rate_limit_burst: must be from 1 to 1000000000, got 0"
    );
    let alone = check_limit(key, None, Some(5)).unwrap_err().to_string();
    assert!(
        alone.starts_with("sources.x.rate_limit_burst: is read only with"),
        "{alone}"
    );
}

/// Each key through the whole loader, as a file configures it: the error names the key.
#[test]
fn loading_names_each_bad_key() {
    let base = "[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n";
    let source = "[sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n";
    for (extra_server, extra_source, says) in [
        (
            "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/99\"]",
            "",
            "server.trusted_proxies[1]: \"10.0.0.0/99\" has a prefix length outside 0-32",
        ),
        (
            "trusted_proxies = \"nope\"",
            "",
            "server.trusted_proxies: \"nope\" is not an IP address",
        ),
        (
            "rejected_limit = \"10\"",
            "",
            "server.rejected_limit: \"10\" is not a rate",
        ),
        (
            "rejected_limit = \"10/s\"\nrejected_limit_burst = 0",
            "",
            "server.rejected_limit_burst: must be from 1",
        ),
        (
            "rejected_limit_burst = 5",
            "",
            "server.rejected_limit_burst: is read only with server.rejected_limit",
        ),
        (
            "",
            "allowed_ips = [\"192.0.2.1/24\"]",
            "sources.demo.allowed_ips[0]: \"192.0.2.1/24\" has address bits set",
        ),
        (
            "",
            "rate_limit = \"0/m\"",
            "sources.demo.rate_limit: \"0/m\" must be a positive rate",
        ),
        (
            "",
            "rate_limit = \"5/s\"\nrate_limit_burst = 0",
            "sources.demo.rate_limit_burst: must be from 1",
        ),
        (
            "",
            "rate_limit_burst = 3",
            "sources.demo.rate_limit_burst: is read only with sources.demo.rate_limit",
        ),
    ] {
        let text = format!("{base}[server]\n{extra_server}\n{source}{extra_source}\n");
        let error = super::super::from_toml(&text).unwrap_err().to_string();
        assert!(error.starts_with(says), "{text}\n→ {error}");
    }
    let good = format!(
        "{base}[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\n\
         rejected_limit = \"10/s\"\nrejected_limit_burst = 50\n{source}\
         allowed_ips = [\"203.0.113.0/24\"]\nrate_limit = \"200/s\"\nrate_limit_burst = 400\n"
    );
    let settings = super::super::from_toml(&good).unwrap();
    assert_eq!(settings.server.trusted_proxies.len(), 3);
    let limit = settings.sources["demo"]
        .delivery_limit("demo")
        .unwrap()
        .unwrap();
    assert_eq!((limit.per_second, limit.burst), (200.0, 400));
    let shown = settings.to_redacted_toml();
    assert!(
        shown.contains("rate_limit = \"200/s\"") && shown.contains("\"192.0.2.7/32\""),
        "{shown}"
    );
}
