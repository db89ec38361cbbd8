//! Unit tests of the generic provider: configuration checks, and equivalence with the dedicated
//! GitHub, Shopify and Linear providers on the same requests.

use http::HeaderMap;
use serde_json::{json, Value};

use super::super::generic::*;
use super::super::generic_template::{parse_template, Part};
use super::super::{build, Provider, SignOptions, VerifyError};
use super::support::{config_error, events, headers, one, settings, signed, verify};

fn generic(secrets: &[&str], extra: Value) -> Generic {
    Generic::from_settings("gen", &settings("generic", secrets, extra)).unwrap()
}

fn error_for(extra: Value) -> String {
    config_error(super::super::build(
        "gen",
        &settings("generic", &["s"], extra),
    ))
}

fn github_like() -> Value {
    json!({
        "signature_header": "X-Hub-Signature-256", "signature_prefix": "sha256=",
        "algorithm": "sha256", "encoding": "hex",
        "id_header": "X-GitHub-Delivery", "type_header": "X-GitHub-Event",
    })
}

/// Runs both providers on one request and requires the same outcome (errors by kind only: the
/// generic provider names keys where dedicated ones name headers).
fn same_outcome(a: &dyn Provider, b: &dyn Provider, map: &HeaderMap, body: &[u8], now: i64) {
    let (x, y) = (verify(a, map, body, now), verify(b, map, body, now));
    match (&x, &y) {
        (Ok(x), Ok(y)) => assert_eq!(x, y),
        (Err(x), Err(y)) => assert_eq!(
            std::mem::discriminant(x),
            std::mem::discriminant(y),
            "{x:?} vs {y:?}"
        ),
        _ => panic!("{} says {x:?}, {} says {y:?}", a.name(), b.name()),
    }
}

#[test]
fn a_github_configuration_verifies_the_github_vector() {
    let provider = generic(&["It's a Secret to Everybody"], github_like());
    let sig = b"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let map = headers(&[
        ("X-Hub-Signature-256", sig),
        ("X-GitHub-Delivery", b"72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Event", b"issues"),
    ]);
    let result = verify(&provider, &map, b"Hello, World!", 0);
    assert_eq!(
        events(result),
        one("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues")
    );
    let github = build(
        "gh",
        &settings("github", &["It's a Secret to Everybody"], json!({})),
    )
    .unwrap();
    for body in [&b"Hello, World!"[..], b"Hello, World?"] {
        same_outcome(&provider, github.as_ref(), &map, body, 0);
    }
    same_outcome(&provider, github.as_ref(), &headers(&[]), b"x", 0);
}

#[test]
fn a_shopify_configuration_matches_the_shopify_provider() {
    let secret = "shpss_hookonce";
    let config = json!({
        "signature_header": "X-Shopify-Hmac-Sha256", "algorithm": "sha256", "encoding": "base64",
        "id_header": "X-Shopify-Event-Id", "type_header": "X-Shopify-Topic",
    });
    let provider = generic(&[secret], config);
    let shopify = build("shop", &settings("shopify", &[secret], json!({}))).unwrap();
    let body = br#"{"id":1,"note":"Gr\u00fc\u00dfe"}"#;
    let options = SignOptions {
        event_id: Some("ev-1".to_owned()),
        event_type: Some("orders/paid".to_owned()),
        now_unix: 0,
    };
    let sent = signed(&shopify.sign(body, &options));
    assert_eq!(
        events(verify(&provider, &sent, body, 0)),
        one("ev-1", "orders/paid")
    );
    same_outcome(&provider, shopify.as_ref(), &sent, body, 0);
    same_outcome(&provider, shopify.as_ref(), &sent, b"{}", 0);
    let sent = signed(&provider.sign(body, &options));
    same_outcome(&provider, shopify.as_ref(), &sent, body, 0);
}

#[test]
fn a_linear_configuration_matches_the_linear_provider() {
    let secret = "lin_wh_hookonce";
    let config = json!({
        "signature_header": "Linear-Signature", "algorithm": "sha256", "encoding": "hex",
        "id_header": "Linear-Delivery", "type_pointer": "/type",
    });
    let provider = generic(&[secret], config);
    let linear = build("lin", &settings("linear", &[secret], json!({}))).unwrap();
    let body =
        br#"{"action":"update","type":"Comment","data":{},"webhookTimestamp":1700000000000}"#;
    let options = SignOptions {
        event_id: Some("d-1".to_owned()),
        event_type: None,
        now_unix: 1_700_000_000,
    };
    let sent = signed(&linear.sign(body, &options));
    assert_eq!(
        events(verify(&provider, &sent, body, 1_700_000_000)),
        one("d-1", "Comment")
    );
    same_outcome(&provider, linear.as_ref(), &sent, body, 1_700_000_000);
    same_outcome(&provider, linear.as_ref(), &sent, &body[1..], 1_700_000_000);
}

#[test]
fn signed_timestamps_and_ids_are_checked() {
    let config = json!({
        "signature_header": "X-Acme-Signature", "signature_prefix": "v1=", "algorithm": "sha512",
        "encoding": "base64", "signed_content": "{id}:{timestamp}:{body}", "timestamp_header": "X-Acme-Timestamp",
        "tolerance": "2m", "id_header": "X-Acme-Id", "type_pointer": "/kind",
    });
    let provider = generic(&["acme-secret", "acme-old"], config);
    let body = br#"{"kind":"thing.done"}"#;
    let options = SignOptions {
        event_id: Some("a-1".to_owned()),
        event_type: None,
        now_unix: 1000,
    };
    let sent = provider.sign(body, &options);
    let map = signed(&sent);
    assert_eq!(
        events(verify(&provider, &map, body, 1120)),
        one("a-1", "thing.done")
    );
    assert_eq!(
        verify(&provider, &map, body, 1121),
        Err(VerifyError::StaleTimestamp)
    );
    assert_eq!(
        verify(&provider, &map, body, 879),
        Err(VerifyError::StaleTimestamp)
    );
    // The ID is signed: changing it breaks the signature.
    let mut other = map.clone();
    other.insert("x-acme-id", "a-2".parse().unwrap());
    assert_eq!(
        verify(&provider, &other, body, 1000),
        Err(VerifyError::BadSignature)
    );
    let mut no_ts = map.clone();
    no_ts.remove("x-acme-timestamp");
    assert_eq!(
        verify(&provider, &no_ts, body, 1000),
        Err(VerifyError::MissingHeader("timestamp_header"))
    );
    let mut no_prefix = map.clone();
    let bare = sent[0].1.trim_start_matches("v1=").to_owned();
    no_prefix.insert("x-acme-signature", bare.parse().unwrap());
    assert_eq!(
        verify(&provider, &no_prefix, body, 1000),
        Err(VerifyError::GarbledHeader("signature_header"))
    );
}

#[test]
fn sha1_and_json_pointer_ids_work() {
    let config = json!({ "signature_header": "X-Sig", "algorithm": "sha1", "encoding": "hex", "id_pointer": "/meta/id" });
    let provider = generic(&["k"], config);
    let body = br#"{"meta":{"id":"m-9"}}"#;
    let sent = provider.sign(body, &SignOptions::default());
    assert_eq!(sent[0].1.len(), 40);
    assert_eq!(
        events(verify(&provider, &signed(&sent), body, 0)),
        one("m-9", "")
    );
    let body = br#"{"meta":{}}"#;
    let sent = provider.sign(body, &SignOptions::default());
    assert!(matches!(
        verify(&provider, &signed(&sent), body, 0),
        Err(VerifyError::Malformed(_))
    ));
}

#[test]
fn every_configuration_problem_names_its_key() {
    let base = github_like();
    let with = |changes: Value| {
        let mut value = base.clone();
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                value.as_object_mut().unwrap().remove(k);
            } else {
                value[k] = v.clone();
            }
        }
        value
    };
    let cases = [
        (json!({ "signature_header": null }), "signature_header"),
        (
            json!({ "signature_header": "bad header" }),
            "signature_header",
        ),
        (json!({ "algorithm": null }), "algorithm"),
        (json!({ "algorithm": "md5" }), "algorithm"),
        (json!({ "encoding": "base32" }), "encoding"),
        (json!({ "signed_content": "{timestamp}" }), "signed_content"),
        (
            json!({ "signed_content": "{body}{body}" }),
            "signed_content",
        ),
        (json!({ "signed_content": "{bdy}" }), "signed_content"),
        (json!({ "signed_content": "{body}}" }), "signed_content"),
        (json!({ "signed_content": "{body" }), "signed_content"),
        (
            json!({ "signed_content": "{timestamp}.{body}" }),
            "signed_content",
        ),
        (json!({ "timestamp_header": "X-Ts" }), "timestamp_header"),
        (json!({ "tolerance": "5m" }), "tolerance"),
        (json!({ "id_header": null }), "id_header"),
        (json!({ "id_pointer": "/id" }), "id_pointer"),
        (
            json!({ "id_header": null, "id_pointer": "/id", "signed_content": "{id}{body}" }),
            "signed_content",
        ),
        (
            json!({ "id_header": null, "id_pointer": "id" }),
            "id_pointer",
        ),
        (json!({ "type_pointer": "/type" }), "type_pointer"),
        (
            json!({ "notification_url": "https://x" }),
            "notification_url",
        ),
    ];
    for (changes, key) in cases {
        let error = error_for(with(changes.clone()));
        assert!(
            error.starts_with(&format!("sources.gen.{key}:")),
            "{changes} → {error}"
        );
    }
    assert!(Generic::from_settings("gen", &settings("generic", &["s"], base)).is_ok());
}

#[test]
fn templates_split_into_parts() {
    assert_eq!(
        parse_template("v0:{timestamp}:{body}").unwrap(),
        vec![
            Part::Literal(b"v0:".to_vec()),
            Part::Timestamp,
            Part::Literal(b":".to_vec()),
            Part::Body
        ]
    );
    assert!(parse_template("{body}").is_ok());
    assert!(parse_template(&format!("{{body}}{}", "x{id}".repeat(10))).is_err());
}
