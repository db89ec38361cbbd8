//! Tests of the `signed_content` rules: adjacent placeholders are refused at configuration, and a
//! value that holds its own separator is refused per request, so no capture can be re-framed.

use serde_json::json;

use super::super::generic::Generic;
use super::super::generic_template::*;
use super::super::{Provider, SignOptions, VerifyError};
use super::support::{config_error, events, headers, one, settings, verify};

fn generic(template: &str) -> Result<Generic, crate::config::ConfigError> {
    let config = json!({
        "signature_header": "X-Sig", "algorithm": "sha256", "encoding": "hex",
        "signed_content": template, "timestamp_header": "X-Ts", "id_header": "X-Id",
    });
    Generic::from_settings("gen", &settings("generic", &["s3cret"], config))
}

#[test]
fn adjacent_placeholders_are_refused_naming_the_key() {
    for template in [
        "{id}{timestamp}{body}",
        "{timestamp}{body}",
        "{body}{id}.{timestamp}",
        "v1:{id}:{timestamp}{body}",
    ] {
        let error = config_error(generic(template));
        assert!(
            error.starts_with("sources.gen.signed_content: has {"),
            "{template}: {error}"
        );
        assert!(error.contains("right before"), "{template}: {error}");
    }
    for template in ["{timestamp}1{body}.{id}", "{id}.{body}:7{timestamp}"] {
        let error = config_error(generic(template));
        assert!(
            error.contains("a digit right next to {timestamp}"),
            "{error}"
        );
    }
    for template in [
        "{id}.{timestamp}.{body}",
        "{body}|{timestamp}|{id}",
        "v0:{timestamp}:{body}:{id}",
    ] {
        assert!(generic(template).is_ok(), "{template}");
    }
}

#[test]
fn each_cut_must_be_at_the_first_occurrence_of_its_separator() {
    let parts = parse_template("{id}.{timestamp}.{body}").unwrap();
    assert_eq!(unambiguous(&parts, b"17", b"evt_1"), Ok(()));
    assert_eq!(unambiguous(&parts, b"17", b"evt.1"), Err("id_header"));
    // Right of the body the cut is at the last occurrence of the separator before the value.
    let parts = parse_template("{body}::{id}").unwrap();
    assert_eq!(unambiguous(&parts, b"", b"a:b"), Ok(()));
    assert_eq!(unambiguous(&parts, b"", b":ab"), Err("id_header"));
    assert_eq!(unambiguous(&parts, b"", b"a::b"), Err("id_header"));
    // A separator that overlaps itself: "a" + "aa" could also be "" + "aa" + "a…".
    let parts = parse_template("{id}aa{body}").unwrap();
    assert_eq!(unambiguous(&parts, b"", b"xa"), Err("id_header"));
    assert_eq!(unambiguous(&parts, b"", b"ax"), Ok(()));
}

#[test]
fn a_captured_delivery_cannot_be_re_split_into_a_new_id_and_body() {
    let provider = generic("{id}.{timestamp}.{body}").unwrap();
    let now = 1_700_000_000;
    // The captured body happens to start with what looks like a timestamp and a dot.
    let body = format!("{now}.{{\"n\":1}}");
    let options = SignOptions {
        event_id: Some("evt".to_owned()),
        event_type: None,
        now_unix: now,
    };
    let sent = provider.sign(body.as_bytes(), &options);
    let signature = sent
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("X-Sig"))
        .unwrap();
    let ts = now.to_string();
    let original = headers(&[
        ("X-Sig", signature.1.as_bytes()),
        ("X-Ts", ts.as_bytes()),
        ("X-Id", b"evt"),
    ]);
    assert_eq!(
        events(verify(&provider, &original, body.as_bytes(), now)),
        one("evt", "")
    );
    // The same signed bytes, read as ID "evt.<now>" and body `{"n":1}`: a new event ID.
    let reframed_id = format!("evt.{now}");
    let reframed = headers(&[
        ("X-Sig", signature.1.as_bytes()),
        ("X-Ts", ts.as_bytes()),
        ("X-Id", reframed_id.as_bytes()),
    ]);
    assert_eq!(
        verify(&provider, &reframed, br#"{"n":1}"#, now),
        Err(VerifyError::GarbledHeader("id_header"))
    );
}

#[test]
fn a_timestamp_with_a_leading_zero_is_refused_though_it_was_signed() {
    let provider = generic("{id}.{timestamp}.{body}").unwrap();
    let now = 1_700_000_000;
    let padded = format!("0{now}");
    let message = format!("evt.{padded}.{{}}");
    let tag = hex::encode(super::super::signing::tag(
        &<super::super::signing::HmacSha256 as hmac::Mac>::new_from_slice(b"s3cret").unwrap(),
        &[message.as_bytes()],
    ));
    let map = headers(&[
        ("X-Sig", tag.as_bytes()),
        ("X-Ts", padded.as_bytes()),
        ("X-Id", b"evt"),
    ]);
    assert_eq!(
        verify(&provider, &map, b"{}", now),
        Err(VerifyError::GarbledHeader("timestamp_header"))
    );
    assert_eq!(provider.name(), "generic");
}
