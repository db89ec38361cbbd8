//! Unit tests of the Adyen classic provider (kept apart so that adyen.rs stays readable).

use hmac::Mac;
use serde_json::json;

use super::super::adyen::*;
use super::super::signatures::base64;
use super::super::signing::{tag, HmacSha256};
use super::super::{Provider, SignError, SignOptions, Verified, VerifyError};
use super::support::{config_error, events, headers, one, settings, verify};

// Adyen/adyen-python-api-library test/UtilTest.py.
const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const VECTOR_SIGNATURE: &str = "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=";
const OTHER_KEY: &str = "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF";

fn adyen(keys: &[&str]) -> Adyen {
    Adyen::from_settings("ady", &settings("adyen", keys, json!({}))).unwrap()
}

fn sign_fields(key: &str, fields: &str) -> String {
    let mac = HmacSha256::new_from_slice(&hex::decode(key).unwrap()).unwrap();
    base64(&tag(&mac, &[fields.as_bytes()]))
}

/// An item as Adyen writes it, signed with `key` unless `signature` is given.
fn item(psp: &str, reference: &str, success: serde_json::Value, key: &str) -> serde_json::Value {
    let success_text = match &success {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let fields = format!("{psp}::TestMerchant:{reference}:1130:EUR:AUTHORISATION:{success_text}");
    json!({
        "additionalData": { "hmacSignature": sign_fields(key, &fields), "authCode": "12345" },
        "amount": { "currency": "EUR", "value": 1130 },
        "eventCode": "AUTHORISATION",
        "eventDate": "2024-01-01T12:00:00+01:00",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": reference,
        "pspReference": psp,
        "success": success,
    })
}

fn batch(items: &[serde_json::Value]) -> String {
    let wrapped: Vec<_> = items
        .iter()
        .map(|item| json!({ "NotificationRequestItem": item }))
        .collect();
    serde_json::to_string(&json!({ "live": "false", "notificationItems": wrapped })).unwrap()
}

fn check(keys: &[&str], body: &str) -> Result<Verified, VerifyError> {
    verify(&adyen(keys), &headers(&[]), body.as_bytes(), 0)
}

const VECTOR_BODY: &str = r#"{
  "live": "false",
  "notificationItems": [
    {
      "NotificationRequestItem": {"additionalData":{"hmacSignature":"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="},"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant","merchantReference":"TestPayment-1407325143704","pspReference":"7914073381342284","success":"true"}
    }
  ]
}"#;

#[test]
fn accepts_the_sdk_vector_and_forwards_the_item_byte_for_byte() {
    assert!(VECTOR_BODY.contains(VECTOR_SIGNATURE));
    let result = check(&[KEY], VECTOR_BODY).unwrap();
    let Verified::Events(events) = result else {
        panic!("expected events")
    };
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].event_id(),
        "TestMerchant:7914073381342284:AUTHORISATION:true"
    );
    assert_eq!(events[0].event_type(), "AUTHORISATION");
    let start = VECTOR_BODY.find("{\"additionalData\"").unwrap();
    let end = VECTOR_BODY.find("\"success\":\"true\"}").unwrap() + 17;
    let expected = format!(
        "{{\"live\":\"false\",\"notificationItems\":[{{\"NotificationRequestItem\":{}}}]}}",
        &VECTOR_BODY[start..end]
    );
    assert_eq!(events[0].body().as_ref(), expected.as_bytes());
    // The forwarded body is itself a valid one-item notification that still verifies.
    let again = check(&[KEY], &expected).unwrap();
    assert_eq!(again, Verified::Events(events));
}

#[test]
fn a_batch_gives_one_event_per_item() {
    let body = batch(&[
        item("8815", "order-1", json!("true"), KEY),
        item("8816", "order-2", json!("false"), KEY),
        item("8815", "order-1", json!("false"), KEY),
    ]);
    assert_eq!(
        events(check(&[KEY], &body)),
        vec![
            (
                "TestMerchant:8815:AUTHORISATION:true".to_owned(),
                "AUTHORISATION".to_owned()
            ),
            (
                "TestMerchant:8816:AUTHORISATION:false".to_owned(),
                "AUTHORISATION".to_owned()
            ),
            (
                "TestMerchant:8815:AUTHORISATION:false".to_owned(),
                "AUTHORISATION".to_owned()
            ),
        ]
    );
}

#[test]
fn one_bad_item_rejects_the_whole_batch() {
    let good = item("8815", "order-1", json!("true"), KEY);
    let forged = item("8816", "order-2", json!("true"), OTHER_KEY);
    assert_eq!(
        check(&[KEY], &batch(&[good.clone(), forged])),
        Err(VerifyError::BadSignature)
    );
    let mut unsigned = item("8817", "order-3", json!("true"), KEY);
    unsigned["additionalData"] = json!({});
    assert_eq!(
        check(&[KEY], &batch(&[good.clone(), unsigned])),
        Err(VerifyError::MissingHeader(SIGNATURE_FIELD))
    );
    let mut tampered = item("8818", "order-4", json!("true"), KEY);
    tampered["amount"]["value"] = json!(1);
    assert_eq!(
        check(&[KEY], &batch(&[good, tampered])),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn wrong_key_garbled_signature_and_unreadable_bodies_are_signature_failures() {
    let body = batch(&[item("8815", "order-1", json!("true"), KEY)]);
    assert_eq!(check(&[OTHER_KEY], &body), Err(VerifyError::BadSignature));
    let mut garbled = item("8815", "order-1", json!("true"), KEY);
    garbled["additionalData"]["hmacSignature"] = json!("not base64!");
    assert_eq!(
        check(&[KEY], &batch(&[garbled])),
        Err(VerifyError::GarbledHeader(SIGNATURE_FIELD))
    );
    let mut wrong_type = item("8815", "order-1", json!("true"), KEY);
    wrong_type["amount"]["value"] = json!(11.30);
    assert_eq!(
        check(&[KEY], &batch(&[wrong_type])),
        Err(VerifyError::GarbledHeader(SIGNATURE_FIELD))
    );
    for body in [
        "",
        "[accepted]",
        "{}",
        r#"{"notificationItems":[]}"#,
        "[1,2]",
    ] {
        assert_eq!(
            check(&[KEY], body),
            Err(VerifyError::MissingHeader(SIGNATURE_FIELD)),
            "{body:?}"
        );
    }
}

#[test]
fn rotation_accepts_any_configured_key() {
    let body = batch(&[
        item("8815", "order-1", json!("true"), KEY),
        item("8816", "order-2", json!("true"), OTHER_KEY),
    ]);
    assert_eq!(events(check(&[OTHER_KEY, KEY], &body)).len(), 2);
    assert_eq!(check(&[KEY], &body), Err(VerifyError::BadSignature));
}

#[test]
fn signed_fields_are_used_verbatim() {
    // Colons and backslashes are not escaped in the signed string.
    let reference = r"order:1\2:\u00e9";
    let body = batch(&[item("8815", reference, json!("true"), KEY)]);
    assert_eq!(
        events(check(&[KEY], &body)),
        one("TestMerchant:8815:AUTHORISATION:true", "AUTHORISATION")
    );
    // `success` as a JSON boolean is signed as `true`/`false`.
    let body = batch(&[item("8815", "order-1", json!(false), KEY)]);
    assert_eq!(
        events(check(&[KEY], &body)),
        one("TestMerchant:8815:AUTHORISATION:false", "AUTHORISATION")
    );
}

#[test]
fn signed_items_without_a_usable_id_are_malformed() {
    for psp in ["", &"p".repeat(256), "88\u{7}15"] {
        let body = batch(&[item(psp, "order-1", json!("true"), KEY)]);
        assert!(
            matches!(check(&[KEY], &body), Err(VerifyError::Malformed(_))),
            "{psp:?}"
        );
    }
}

#[test]
fn answers_accepted_and_validates_keys() {
    let provider = adyen(&[KEY]);
    assert_eq!(provider.ack().body, "[accepted]");
    assert_eq!(provider.ack().content_type, "text/plain");
    let error = config_error(super::super::build(
        "ady",
        &settings("adyen", &[KEY, "not-hex"], json!({})),
    ));
    assert!(error.starts_with("sources.ady.secrets[1]:"), "{error}");
    let error = config_error(super::super::build(
        "ady",
        &settings("adyen", &[KEY], json!({ "tolerance": "5m" })),
    ));
    assert!(error.starts_with("sources.ady.tolerance:"), "{error}");
}

fn sign_body(keys: &[&str], body: &str) -> Result<String, SignError> {
    let signed = adyen(keys)
        .sign_body(body.as_bytes(), &SignOptions::default())?
        .expect("adyen always rewrites the body");
    Ok(String::from_utf8(signed).unwrap())
}

#[test]
fn sign_body_reproduces_the_sdk_vector_and_keeps_every_other_byte() {
    // The vector's item, with its signature replaced by garbage: signing restores it exactly.
    let unsigned = VECTOR_BODY.replace(VECTOR_SIGNATURE, "stale");
    assert_eq!(sign_body(&[KEY], &unsigned).unwrap(), VECTOR_BODY);
    // Re-signing a signed body changes nothing.
    assert_eq!(sign_body(&[KEY], VECTOR_BODY).unwrap(), VECTOR_BODY);
}

#[test]
fn sign_body_signs_every_item_and_adds_missing_signatures() {
    let body = r#"{"live":"false","notificationItems":[
  {"NotificationRequestItem":{"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION","merchantAccountCode":"TestMerchant","merchantReference":"o:1\\x","pspReference":"8815","success":"true"}},
  {"NotificationRequestItem":{"additionalData":{"authCode":"1"},"eventCode":"CAPTURE","merchantAccountCode":"TestMerchant","pspReference":"8816","success":"true"}},
  {"NotificationRequestItem":{"additionalData":null,"eventCode":"REFUND","merchantAccountCode":"TestMerchant","pspReference":"8817","success":"false"}}
]}"#;
    let signed = sign_body(&[KEY, OTHER_KEY], body).unwrap();
    assert_eq!(
        events(check(&[KEY], &signed))
            .into_iter()
            .map(|(_, kind)| kind)
            .collect::<Vec<_>>(),
        ["AUTHORISATION", "CAPTURE", "REFUND"]
    );
    // Signed with the first key only.
    assert_eq!(check(&[OTHER_KEY], &signed), Err(VerifyError::BadSignature));
    // Only signatures were added: removing them gives the original JSON back.
    let strip = |text: &str| {
        let mut value: serde_json::Value = serde_json::from_str(text).unwrap();
        for wrapper in value["notificationItems"].as_array_mut().unwrap() {
            let item = &mut wrapper["NotificationRequestItem"];
            if let Some(data) = item["additionalData"].as_object_mut() {
                data.remove("hmacSignature");
                if data.is_empty() {
                    item.as_object_mut().unwrap().remove("additionalData");
                }
            }
            if item["additionalData"].is_null() {
                item.as_object_mut().unwrap().remove("additionalData");
            }
        }
        value
    };
    assert_eq!(strip(&signed), strip(body));
    assert!(signed.starts_with("{\"live\":\"false\",\"notificationItems\":[\n  {"));
}

#[test]
fn sign_body_refuses_what_is_not_a_notification() {
    for body in [
        "",
        "[accepted]",
        "{}",
        r#"{"notificationItems":[]}"#,
        r#"{"notificationItems":[{"NotificationRequestItem":[1]}]}"#,
        r#"{"notificationItems":[{"NotificationRequestItem":{"additionalData":{},"additionalData":{}}}]}"#,
    ] {
        let error = sign_body(&[KEY], body).unwrap_err();
        assert!(!error.0.is_empty(), "{body:?}");
    }
}

#[test]
fn live_is_true_false_or_absent() {
    let items = vec![json!({ "NotificationRequestItem": item("8815", "o", json!("true"), KEY) })];
    for live in [json!("true"), json!("false")] {
        let body = json!({ "live": live, "notificationItems": items }).to_string();
        assert!(check(&[KEY], &body).is_ok(), "{live}");
    }
    assert!(check(&[KEY], &json!({ "notificationItems": items }).to_string()).is_ok());
    let huge = "t".repeat(4096);
    // `null` reads as absent; anything else but the two strings is refused.
    for live in [json!(true), json!("yes"), json!(huge), json!({ "a": 1 })] {
        let body = json!({ "live": live, "notificationItems": items }).to_string();
        assert!(
            matches!(check(&[KEY], &body), Err(VerifyError::Malformed(_))),
            "{live}"
        );
    }
}

#[test]
fn a_batch_over_max_batch_items_is_malformed_before_any_mac() {
    let capped = |n: u32| {
        let settings = settings("adyen", &[KEY], json!({ "max_batch_items": n }));
        Adyen::from_settings("ady", &settings).unwrap()
    };
    let signed = item("8815", "o", json!("true"), KEY);
    let verify_with = |adyen: &Adyen, items: &[serde_json::Value]| {
        verify(adyen, &headers(&[]), batch(items).as_bytes(), 0)
    };
    assert!(verify_with(&capped(2), &[signed.clone(), signed.clone()]).is_ok());
    // Unsigned items: the count is refused before any signature is looked at.
    let unsigned = json!({ "pspReference": "1" });
    assert!(matches!(
        verify_with(&capped(2), &[unsigned.clone(), unsigned.clone(), unsigned]),
        Err(VerifyError::Malformed(_))
    ));
    let over_default = vec![signed; DEFAULT_MAX_BATCH_ITEMS as usize + 1];
    assert!(matches!(
        verify_with(&adyen(&[KEY]), &over_default),
        Err(VerifyError::Malformed(_))
    ));
    let zero = settings("adyen", &[KEY], json!({ "max_batch_items": 0 }));
    let error = Adyen::from_settings("ady", &zero).err().unwrap();
    assert!(
        error.to_string().contains("sources.ady.max_batch_items"),
        "{error}"
    );
}

#[test]
fn only_merchant_reference_may_contain_a_colon() {
    let captured = item("8815", "order:77", json!("true"), KEY);
    assert!(check(&[KEY], &batch(std::slice::from_ref(&captured))).is_ok());
    // The same signed string, re-split at the reference's colon: same signature, new event ID.
    let mut reframed = captured;
    reframed["merchantAccountCode"] = json!("TestMerchant:order");
    reframed["merchantReference"] = json!("77");
    assert!(matches!(
        check(&[KEY], &batch(&[reframed])),
        Err(VerifyError::Malformed(_))
    ));
    // A colon in any other signed field, even correctly signed, is refused.
    let mut psp = item("88:15", "o", json!("true"), KEY);
    psp["pspReference"] = json!("88:15");
    assert!(matches!(
        check(&[KEY], &batch(&[psp])),
        Err(VerifyError::Malformed(_))
    ));
}
