//! Tests of URL redaction: each form a credential takes, and a property test that whatever
//! redis-rs, async-nats or the daemon's HTTP client would send as a credential never survives
//! redaction.

use std::str::FromStr;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::property::check;

#[test]
fn userinfo_is_redacted_whole_in_every_scheme() {
    for (url, shown) in [
        (
            "redis://default:hunter2@cache:6379/0",
            "redis://[redacted]@cache:6379/0",
        ),
        ("redis://:hunter2@cache", "redis://[redacted]@cache"),
        (
            "rediss://u:hunter2@cache:6380#insecure",
            "rediss://[redacted]@cache:6380#insecure",
        ),
        ("nats://s3cr3ttoken@bus:4222", "nats://[redacted]@bus:4222"),
        ("tls://u:hunter2@bus:4222", "tls://[redacted]@bus:4222"),
        (
            "https://u:hunter2@worker.local/hook",
            "https://[redacted]@worker.local/hook",
        ),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn credential_query_parameters_are_redacted_by_their_decoded_name() {
    for (url, shown) in [
        (
            "unix:///run/redis.sock?db=1&pass=hunter2&user=bob",
            "unix:///run/redis.sock?db=1&pass=[redacted]&[redacted]",
        ),
        (
            "redis+unix:///run/redis.sock?password=hunter2",
            "redis+unix:///run/redis.sock?password=[redacted]",
        ),
        // redis-rs decodes the name before it looks for `pass`: so must the redaction.
        (
            "unix:///s.sock?pa%73s=hunter2",
            "unix:///s.sock?pa%73s=[redacted]",
        ),
        (
            "https://worker/hook?x=1&token=abc&y=2",
            "https://worker/hook?x=1&token=[redacted]&[redacted]",
        ),
        (
            "https://worker/hook#auth=abc",
            "https://worker/hook#[redacted]",
        ),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
}

#[test]
fn a_misplaced_or_unparsable_userinfo_shows_nothing_of_it() {
    // An unescaped '/', '?' or '#' ends the authority early, or makes the port invalid: the
    // rest of the password lands in the host, the path or the query. Only the scheme is shown.
    for url in [
        "redis://u:/hun@ter2@cache",
        "redis://hun/ter2@cache",
        "redis://:hun#ter2@cache",
        "nats://u:hun?ter2@bus",
        "nats://hun?ter2@bus",
        "not a url hunter2",
    ] {
        let shown = redact_url(url);
        assert!(!shown.contains("hun") && !shown.contains("ter2"), "{shown}");
        assert!(shown.contains("[redacted] ("), "{shown}");
    }
    for name in [
        "Access_Token",
        "api_key",
        "X-Signature",
        "sig",
        "AUTH",
        "Password",
        "user",
    ] {
        assert!(is_credential_name(name), "{name}");
    }
    for name in ["db", "protocol", "x"] {
        assert!(!is_credential_name(name), "{name}");
    }
}

/// Every secret is built from chunks that start with this marker, so that any piece of it
/// between two separators that might leak still contains the marker.
const MARKER: &str = "Zq7";

fn secret() -> impl Strategy<Value = String> {
    let chunk = prop::sample::select(vec![
        "", "/", "?", "#", "@", ":", "&", "=", "+", "%", " ", ";", ",", "[", "]", "%40", "%2F", "é",
    ]);
    prop::collection::vec(chunk, 1..6)
        .prop_map(|chunks| chunks.iter().map(|c| format!("{MARKER}{c}")).collect())
}

/// How a secret is written into the URL: as typed, percent-encoded, or form-encoded.
fn encode(secret: &str, how: u8) -> String {
    match how {
        0 => secret.to_owned(),
        1 => secret
            .bytes()
            .map(|b| match b {
                b if b.is_ascii_alphanumeric() => char::from(b).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect(),
        _ => url::form_urlencoded::byte_serialize(secret.as_bytes()).collect(),
    }
}

fn with_secret(form: usize, secret: &str) -> String {
    match form {
        0 => format!("redis://default:{secret}@cache:6379/0"),
        1 => format!("redis://{secret}@cache"),
        2 => format!("rediss://:{secret}@cache:6380"),
        3 => format!("unix:///run/redis.sock?db=0&pass={secret}"),
        4 => format!("redis+unix:///run/redis.sock?user={secret}&db=1"),
        5 => format!("nats://{secret}@bus:4222"),
        6 => format!("nats://u:{secret}@bus:4222"),
        7 => format!("https://worker.local/hook?token={secret}&x=1"),
        8 => format!("http://u:{secret}@worker.local/hook"),
        _ => format!("https://worker.local/hook?x=1&API_KEY={secret}#sig={secret}"),
    }
}

/// The credentials the clients would extract from `url`, decoded as they decode them.
fn credentials_read_by_clients(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(client) = redis::Client::open(url) {
        let info = client.get_connection_info().redis_settings();
        found.extend(info.username().map(str::to_owned));
        found.extend(info.password().map(str::to_owned));
    }
    if let Ok(address) = async_nats::ServerAddr::from_str(url) {
        found.extend(address.username().map(str::to_owned));
        found.extend(address.password().map(str::to_owned));
    }
    if let Ok(parsed) = url::Url::parse(url) {
        found.push(parsed.username().to_owned());
        found.extend(parsed.password().map(str::to_owned));
        found.extend(
            parsed
                .query_pairs()
                .filter(|(name, _)| is_credential_name(name))
                .map(|(_, value)| value.into_owned()),
        );
    }
    found.retain(|credential| credential.len() >= MARKER.len());
    found
}

/// Holds the property below for one case: the secret, written into URL form `form` as `how`
/// says, leaves no piece of itself in the redacted URL, whichever client would read it.
fn no_piece_survives(form: usize, secret: &str, how: u8) -> Result<(), TestCaseError> {
    let url = with_secret(form, &encode(secret, how));
    let shown = redact_url(&url);
    prop_assert!(!shown.contains(MARKER), "{url} → {shown}");
    for credential in credentials_read_by_clients(&url) {
        prop_assert!(!shown.contains(&credential), "{url} → {shown}");
    }
    Ok(())
}

#[test]
fn a_hash_in_a_unix_socket_password_leaves_no_piece_of_it() {
    // A case the property below once found: the '#' in the `pass` query parameter of a unix
    // socket URL starts the fragment, so the secret's second half is no longer in the query.
    no_piece_survives(3, "Zq7#Zq7:", 0).unwrap();
}

#[test]
fn no_piece_of_a_secret_survives_redaction() {
    check(
        512,
        (0usize..10, secret(), 0u8..3),
        |(form, secret, how)| no_piece_survives(form, &secret, how),
    );
}

#[test]
fn redaction_never_panics() {
    check(512, "\\PC{0,64}", |text| {
        let _ = redact_url(&text);
        Ok(())
    });
}
