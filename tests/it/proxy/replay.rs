//! Keys and replay: the first request executes, a retry with the same key gets the stored answer
//! byte for byte; the key's grammar, its scope, a changed payload, and the requests that pass
//! through untouched. Every test runs against Redis and the memory store.

use super::{order, outcome, send, start, Answer, ALICE, ORDERS};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{both_backends, Backend};

async fn a_retry_gets_the_first_answer_byte_for_byte(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(
        ORDERS,
        Reply::status(201)
            .header("location", "/v1/orders/1")
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .header("x-request-cost", "7"),
    );
    let t = start(backend, &upstream, |_| {}).await;

    let first = order(&t, "k1", br#"{"sku":42}"#).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed());
    assert!(first.text().contains(r#""execution":1"#), "{first:?}");

    let retry = order(&t, "k1", br#"{"sku":42}"#).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    // Set-Cookie is the first client's session: it gets it, the replay does not.
    assert_eq!(first.headers.get_all("set-cookie").iter().count(), 2);
    assert!(retry.header("set-cookie").is_none(), "{retry:?}");
    let without_cookies: Vec<_> = first
        .stored_headers()
        .into_iter()
        .filter(|(name, _)| name != "set-cookie")
        .collect();
    assert_eq!(retry.stored_headers(), without_cookies);
    assert_eq!(upstream.executions("k1", ORDERS), 1);
    // The upstream got the body as sent.
    assert_eq!(&upstream.last(ORDERS).body[..], br#"{"sku":42}"#);
    assert_eq!(outcome(&t, "executed").await, 1.0);
    assert_eq!(outcome(&t, "replayed").await, 1.0);
}

/// `store_set_cookie = true` stores the upstream's `Set-Cookie` with the answer: the replay
/// repeats every header byte for byte.
async fn set_cookie_is_replayed_only_with_store_set_cookie(backend: Backend) {
    let upstream = Upstream::start().await;
    upstream.answer(
        ORDERS,
        Reply::status(201)
            .header("set-cookie", "session=alice; HttpOnly")
            .header("set-cookie", "b=2"),
    );
    let cookies = |answer: &Answer| -> Vec<String> {
        let values = answer.headers.get_all("set-cookie").iter();
        values.map(|v| v.to_str().unwrap().to_owned()).collect()
    };
    // Off (the default), the first client's cookies stay its own; on, every retry gets them.
    let both: [(bool, &str, &[&str]); 2] = [
        (false, "k-off", &[]),
        (true, "k-on", &["session=alice; HttpOnly", "b=2"]),
    ];
    for (store_set_cookie, key, replayed) in both {
        let t = start(backend, &upstream, |p| {
            p.store_set_cookie = store_set_cookie
        })
        .await;
        let first = order(&t, key, b"{}").await;
        assert_eq!(cookies(&first), ["session=alice; HttpOnly", "b=2"]);
        let retry = order(&t, key, b"{}").await;
        assert!(retry.replayed(), "{retry:?}");
        assert_eq!(
            cookies(&retry),
            replayed,
            "store_set_cookie = {store_set_cookie}"
        );
        assert_eq!(upstream.executions(key, ORDERS), 1);
    }
}

/// The draft writes the key as a Structured Field String, Stripe's clients as a bare token:
/// both name the same key, and the upstream gets the header exactly as the client sent it.
async fn quoted_and_bare_keys_are_one_key(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;

    let quoted = order(&t, "\"k1\"", b"{}").await;
    assert_eq!(quoted.status, 201);
    assert_eq!(upstream.executions("\"k1\"", ORDERS), 1);

    let bare = order(&t, "k1", b"{}").await;
    assert!(bare.replayed(), "{bare:?}");
    assert_eq!(bare.body, quoted.body);
    assert_eq!(upstream.executions("k1", ORDERS), 0);

    // An escape inside the string is part of the key, not an error.
    let escaped = order(&t, r#""k\"2""#, b"{}").await;
    assert_eq!(escaped.status, 201, "{escaped:?}");
    assert!(!escaped.replayed());
    assert!(order(&t, r#""k\"2""#, b"{}").await.replayed());
    assert_eq!(upstream.hits(ORDERS), 2);
}

async fn invalid_keys_are_refused_before_the_upstream(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    let longest = "k".repeat(255);
    let too_long = "k".repeat(256);
    let quoted_too_long = format!("\"{too_long}\"");
    let invalid = [
        "",
        "\"\"",
        "\"unterminated",
        "k 1",
        "k\t1",
        "cl\u{e9}",
        too_long.as_str(),
        quoted_too_long.as_str(),
    ];
    for key in invalid {
        let answer = order(&t, key, b"{}").await;
        answer.assert_problem(400, "Idempotency-Key is invalid");
    }
    assert_eq!(
        upstream.hits(ORDERS),
        0,
        "an invalid key reached the upstream"
    );
    assert_eq!(outcome(&t, "invalid_key").await, invalid.len() as f64);

    // The bounds themselves are keys.
    let quoted_longest = format!("\"{longest}\"");
    for key in ["!", "~", longest.as_str(), quoted_longest.as_str()] {
        assert_eq!(order(&t, key, b"{}").await.status, 201, "{key}");
    }
}

/// A raw control character in the header: sent over a plain socket, as no HTTP client would.
async fn a_key_with_a_control_character_is_refused(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    let addr = t.proxy_addrs[super::PROXY];
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /v1/orders HTTP/1.1\r\nHost: t\r\nIdempotency-Key: k\x011\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        .await
        .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert_eq!(upstream.hits(ORDERS), 0);
}

async fn a_missing_key_passes_through_unless_required(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    for _ in 0..2 {
        let answer = send(&t, "POST", ORDERS, &[("authorization", ALICE)], b"{}").await;
        assert_eq!(answer.status, 201);
        assert!(!answer.replayed());
    }
    assert_eq!(upstream.hits(ORDERS), 2, "no key, no idempotency");
    assert_eq!(outcome(&t, "passed_through").await, 2.0);
    if let Some(redis) = &t.redis {
        assert_eq!(redis.dbsize(), 0, "a pass-through stored something");
    }

    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |p| p.require_key = true).await;
    let answer = send(&t, "POST", ORDERS, &[("authorization", ALICE)], b"{}").await;
    answer.assert_problem(400, "Idempotency-Key is missing");
    assert_eq!(upstream.hits(ORDERS), 0);
    assert_eq!(outcome(&t, "missing_key").await, 1.0);
}

/// Other methods and paths outside `routes` are forwarded as they are, twice if sent twice,
/// even with a key and `require_key`, and leave nothing in the store. (Other spellings of a
/// routed path on a keyed method are refused instead: `edges.rs`.)
async fn other_methods_and_unrouted_paths_pass_through_untouched(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |p| {
        p.routes = vec!["/v1/orders".into(), "/v1/orders/*/refunds".into()];
        p.require_key = true;
    })
    .await;
    let cases = [
        ("GET", "/v1/orders"),
        ("PUT", "/v1/orders"),
        ("DELETE", "/v1/orders"),
        ("POST", "/v1/other"),
        ("GET", "/v1/orders/"),
        ("GET", "/V1/orders"),
        ("POST", "/v1/orders/7/refunds/x"),
        ("POST", "/v1/orders//refunds"),
        ("POST", "/healthz"),
    ];
    for (method, path) in cases {
        for _ in 0..2 {
            let answer = send(
                &t,
                method,
                path,
                &[("idempotency-key", "k1"), ("x-custom", "kept")],
                b"payload",
            )
            .await;
            assert_eq!(answer.status, 201, "{method} {path}: {answer:?}");
            assert!(!answer.replayed(), "{method} {path}");
        }
        let seen = upstream.last(path);
        assert_eq!(seen.method.as_str(), method);
        assert_eq!(seen.header("x-custom"), Some("kept"));
        assert_eq!(seen.header("idempotency-key"), Some("k1"));
        if method != "GET" {
            assert_eq!(&seen.body[..], b"payload", "{method} {path}");
        }
        let executions = upstream
            .seen()
            .iter()
            .filter(|s| s.method.as_str() == method && s.path() == path)
            .count();
        assert_eq!(executions, 2, "{method} {path}");
    }
    // Unrouted without a key is not "missing" either.
    assert_eq!(send(&t, "POST", "/v1/other", &[], b"").await.status, 201);
    assert_eq!(
        outcome(&t, "passed_through").await,
        (cases.len() * 2 + 1) as f64
    );
    if let Some(redis) = &t.redis {
        assert_eq!(redis.dbsize(), 0, "a pass-through stored something");
    }

    // The routed ones are idempotent: a literal segment and a `*` segment.
    for path in ["/v1/orders", "/v1/orders/7/refunds"] {
        let first = send(&t, "POST", path, &[("idempotency-key", "k1")], b"{}").await;
        let retry = send(&t, "POST", path, &[("idempotency-key", "k1")], b"{}").await;
        assert!(!first.replayed() && retry.replayed(), "{path}");
        assert_eq!(retry.body, first.body);
    }
}

/// Same key, other payload: not a retry but a new intent, refused. The query string is part of
/// the fingerprint as sent.
async fn a_changed_payload_gets_422_and_the_first_answer_stays(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |_| {}).await;
    let first = order(&t, "k1", br#"{"sku":42}"#).await;
    assert_eq!(first.status, 201);

    let changed = order(&t, "k1", br#"{"sku":43}"#).await;
    changed.assert_problem(422, "Idempotency-Key is already used");
    let query = send(
        &t,
        "POST",
        "/v1/orders?express=1",
        &[("idempotency-key", "k1"), ("authorization", ALICE)],
        br#"{"sku":42}"#,
    )
    .await;
    query.assert_problem(422, "Idempotency-Key is already used");
    assert_eq!(upstream.hits(ORDERS), 1);
    assert_eq!(outcome(&t, "key_reused").await, 2.0);

    let retry = order(&t, "k1", br#"{"sku":42}"#).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
}

/// A key is unique per principal, method and path: the same key from Bob, from nobody, or on
/// another path is another key, and no answer crosses principals.
async fn scope_isolates_principals_methods_and_paths(backend: Backend) {
    let upstream = Upstream::start().await;
    let t = start(backend, &upstream, |p| {
        p.methods = vec!["POST".into(), "PATCH".into()];
    })
    .await;
    let as_who = |who: Option<&'static str>, method: &'static str, path: &'static str| {
        let t = &t;
        async move {
            let mut headers = vec![("idempotency-key", "shared-key")];
            if let Some(who) = who {
                headers.push(("authorization", who));
            }
            send(t, method, path, &headers, b"{}").await
        }
    };
    let scopes = [
        (Some(ALICE), "POST", ORDERS),
        (Some("Bearer bob"), "POST", ORDERS),
        (None, "POST", ORDERS),
        (Some(ALICE), "PATCH", ORDERS),
        (Some(ALICE), "POST", "/v1/orders/1/refunds"),
    ];
    let mut firsts: Vec<Answer> = Vec::new();
    for (who, method, path) in scopes {
        let first = as_who(who, method, path).await;
        assert_eq!(first.status, 201);
        assert!(
            !first.replayed(),
            "{who:?} {method} {path} got another scope's answer"
        );
        assert!(firsts.iter().all(|other| other.body != first.body));
        firsts.push(first);
    }
    assert_eq!(upstream.seen().len(), scopes.len());
    for ((who, method, path), first) in scopes.into_iter().zip(&firsts) {
        let retry = as_who(who, method, path).await;
        assert!(retry.replayed(), "{who:?} {method} {path}");
        assert_eq!(retry.body, first.body, "{who:?} {method} {path}");
    }
    assert_eq!(upstream.seen().len(), scopes.len());
    // The principal's header is forwarded unchanged, and never stored in clear.
    assert_eq!(
        upstream.seen()[1].header("authorization"),
        Some("Bearer bob")
    );
    if t.redis.is_some() {
        let dump = super::redis_dump(&t);
        assert!(!dump.is_empty());
        assert!(!super::contains(&dump, b"alice") && !super::contains(&dump, b"bob"));
    }
}

both_backends!(
    a_retry_gets_the_first_answer_byte_for_byte,
    set_cookie_is_replayed_only_with_store_set_cookie,
    quoted_and_bare_keys_are_one_key,
    invalid_keys_are_refused_before_the_upstream,
    a_key_with_a_control_character_is_refused,
    a_missing_key_passes_through_unless_required,
    other_methods_and_unrouted_paths_pass_through_untouched,
    a_changed_payload_gets_422_and_the_first_answer_stays,
    scope_isolates_principals_methods_and_paths,
);
