//! Property tests of the providers' shared parsers (`key=value` headers, splices, JSON pointers)
//! and of building a provider from any source settings.
//!
//! Each parser must survive any input, and read back exactly what a well-formed input says: the
//! header's timestamp and every signature, the member a splice set with every other byte kept,
//! the value a pointer names however its keys are escaped.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::property::check;
use crate::webhooks::providers::extract::Pointer;
use crate::webhooks::providers::params::ParamsShape;
use crate::webhooks::providers::signatures::Candidates;
use crate::webhooks::providers::splice::{Edits, Members};
use crate::webhooks::providers::Named;

static STRIPE: ParamsShape = ParamsShape {
    header: Named::new("stripe-signature"),
    separator: ',',
    timestamp: "t",
    signature: "v1",
    joiner: b".",
};

#[test]
fn property_a_params_header_never_panics_and_is_read_as_written() {
    check(1024, "[ -~]{0,120}", |text| {
        let _ = STRIPE.parse(&text, 32);
        Ok(())
    });
    let item = prop_oneof![
        "[0-9a-f]{64}".prop_map(|hex| ("v1".to_owned(), hex)),
        "[0-9a-f]{0,64}".prop_map(|hex| ("v0".to_owned(), hex)),
        ("[a-suw-z][0-9]?", "[!-+\\--~]{0,20}"),
    ];
    let strategy = (0..=999_999_999_999i64, vec(item, 0..8), any::<bool>());
    check(512, strategy, |(unix, items, spaced)| {
        let pad = if spaced { " " } else { "" };
        let mut text = format!("{pad}t{pad}={pad}{unix}{pad}");
        for (key, value) in &items {
            text.push_str(&format!(",{pad}{key}{pad}={pad}{value}{pad}"));
        }
        let parsed = STRIPE.parse(&text, 32);
        let v1: Vec<&String> = items
            .iter()
            .filter(|(k, _)| k == "v1")
            .map(|(_, v)| v)
            .collect();
        let Ok(parsed) = parsed else {
            // Only more signatures than anyone sends make a well-formed header garbled.
            prop_assert!(v1.len() > 16, "{text:?} refused");
            return Ok(());
        };
        prop_assert_eq!(parsed.timestamp, unix.to_string());
        prop_assert_eq!(parsed.unix, unix);
        let read: Vec<String> = parsed.signatures.iter().map(hex::encode).collect();
        prop_assert_eq!(read.iter().collect::<Vec<_>>(), v1);
        Ok(())
    });
}

#[test]
fn property_signature_candidates_never_panic_on_any_text() {
    check(1024, ("[ -~]{0,200}", 1..=64usize), |(text, tag_len)| {
        let mut candidates = Candidates::new(tag_len);
        let _ = candidates.push_hex(&text);
        let _ = candidates.push_base64(&text);
        Ok(())
    });
}

/// A JSON object with a few members of every kind, written compactly or pretty-printed.
fn document() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(".{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (btree_map(".{0,6}", value, 0..6), any::<bool>()).prop_map(|(members, pretty)| {
        let object = Value::Object(members.into_iter().collect());
        match pretty {
            true => serde_json::to_string_pretty(&object),
            false => serde_json::to_string(&object),
        }
        .expect("JSON serializes")
    })
}

/// How many leading and trailing bytes `a` and `b` share, without overlapping.
fn kept(a: &[u8], b: &[u8]) -> usize {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let room = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(room)
        .take_while(|(x, y)| x == y)
        .count();
    prefix + suffix
}

#[test]
fn property_a_splice_sets_one_member_and_keeps_every_other_byte() {
    let strategy = (document(), ".{0,6}", any::<i64>());
    check(512, strategy, |(doc, key, number)| {
        let object: &RawValue = serde_json::from_str(&doc).expect("a document parses");
        let old = Members::of(object)
            .and_then(|m| m.get(&key))
            .expect("a generated object has each key once")
            .map(|value| value.get().len());
        let mut edits = Edits::new(&doc);
        edits
            .set(object, &key, number.to_string())
            .expect("setting a member of an object succeeds");
        let out = edits.apply();
        let mut expected: serde_json::Map<String, Value> = serde_json::from_str(&doc).unwrap();
        expected.insert(key.clone(), json!(number));
        let got: serde_json::Map<String, Value> =
            serde_json::from_slice(&out).expect("the edited document parses");
        prop_assert_eq!(got, expected);
        // Every byte but the old value's is kept, in place, before or after the edit.
        prop_assert!(kept(doc.as_bytes(), &out) >= doc.len() - old.unwrap_or(0));
        Ok(())
    });
}

#[test]
fn property_members_never_panic_on_any_text() {
    check(1024, "[{}\\[\\]\":,0-9a-z \\\\]{0,80}", |text| {
        if let Ok(value) = serde_json::from_str::<&RawValue>(&text) {
            if let Ok(members) = Members::of(value) {
                let _ = members.get("a");
            }
        }
        Ok(())
    });
}

/// `key` escaped as one JSON-pointer segment (RFC 6901: `~` → `~0`, `/` → `~1`).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[test]
fn property_a_pointer_finds_the_value_whatever_its_keys_hold() {
    check(1024, ".{0,40}", |text| {
        if let Ok(pointer) = Pointer::parse("s", "id_pointer", &text) {
            let _ = pointer.text(&json!({ "a": [1, { "b": "c" }] }));
        }
        Ok(())
    });
    let strategy = (vec("[a-z/~0-9 ]{0,5}", 1..5), "[ -~]{1,20}", any::<bool>());
    check(512, strategy, |(path, leaf, as_number)| {
        let leaf_value = if as_number {
            json!(leaf.len())
        } else {
            json!(leaf)
        };
        let document = path.iter().rev().fold(leaf_value.clone(), |inner, key| {
            let mut object = serde_json::Map::new();
            object.insert(key.clone(), inner);
            Value::Object(object)
        });
        let text: String = path.iter().map(|key| format!("/{}", escape(key))).collect();
        let pointer = Pointer::parse("s", "id_pointer", &text)
            .map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let expected = match leaf_value {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let found = pointer.text(&document);
        prop_assert_eq!(found.as_deref(), Some(expected.as_str()));
        Ok(())
    });
}

#[test]
fn property_every_provider_builds_or_refuses_any_source_settings() {
    let key = prop::sample::select(crate::webhooks::providers::generic::KEYS.to_vec());
    let text = prop_oneof![
        "[ -~]{0,16}",
        prop::sample::select(vec!["{body}", "{id}{body}", "/id", "sha512", "hex", "5m"])
            .prop_map(str::to_owned),
    ];
    let names: Vec<&str> = crate::webhooks::providers::names().collect();
    let strategy = (
        prop::sample::select(names),
        vec("[ -~]{1,20}", 0..3),
        vec((key, text), 0..5),
    );
    check(512, strategy, |(provider, secrets, keys)| {
        let mut settings = json!({ "provider": provider, "secrets": secrets });
        for (key, value) in keys {
            settings[key] = json!(value);
        }
        // Secrets written `env:…` or `file:…` are resolved while deserializing; any other text
        // is a literal.
        if let Ok(settings) = serde_json::from_value(settings) {
            let _ = crate::webhooks::providers::build("s", &settings);
        }
        Ok(())
    });
}
