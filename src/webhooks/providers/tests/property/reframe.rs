//! Property tests of the signed strings that join fields: no re-framing yields a new event.
//!
//! Where a scheme signs several values joined together, a captured delivery can be re-split into
//! other values under the same signature unless the join is unambiguous. These properties build
//! every other split of a genuinely signed string, send each, and require that whatever `verify`
//! accepts carries the original event ID and body. They also bound what an Adyen batch forwards.
//!
//! Each catches one known weakness while it is open: Adyen's eight fields joined by `:` (only
//! `merchantReference` may contain one, or the split is not unique); generic templates whose
//! placeholders touch (`{id}{body}`) or that accept a zero-padded timestamp (`{body}{timestamp}`
//! re-split as `…0` + `0<ts>`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use sha2::Sha256;

use super::super::fixtures::{provider_for, Case};
use super::{verify_as, Seed};
use crate::property::check;
use crate::webhooks::providers::Verified;

const NOW: i64 = 1_700_000_000;
const ADYEN_KEY: &[u8] = b"hookonce property test key 32 b.";

fn hmac256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// A seed for `provider` with `settings`, to verify requests built here.
fn seed(provider: &str, secret: &str, settings: serde_json::Value) -> Result<Seed, String> {
    let case: Case = serde_json::from_value(json!({
        "name": provider, "secrets": [secret], "settings": settings, "now_unix": NOW,
        "headers": [], "body": "", "expect": { "error": "" },
    }))
    .map_err(|e| e.to_string())?;
    Ok(Seed {
        provider: provider_for(provider, &case, None)?,
        name: provider.to_owned(),
        headers: Vec::new(),
        body: Vec::new(),
        now_unix: NOW,
    })
}

/// The event IDs and bodies of an accepted request.
fn events(verified: Option<Verified>) -> Option<Vec<(String, Vec<u8>)>> {
    match verified? {
        Verified::Events(events) => Some(
            events
                .iter()
                .map(|e| (e.event_id().to_owned(), e.body().to_vec()))
                .collect(),
        ),
        Verified::Handshake(_) => None,
    }
}

/// One Adyen item with its eight signed fields (`amount.value` sent as a string when it is not
/// an integer) and its signature over them, as Adyen computes it.
fn adyen_item(fields: &[String; 8]) -> serde_json::Value {
    let signature = STANDARD.encode(hmac256(ADYEN_KEY, fields.join(":").as_bytes()));
    let value = match fields[4].parse::<i64>() {
        Ok(number) => json!(number),
        Err(_) => json!(fields[4]),
    };
    json!({
        "pspReference": fields[0], "originalReference": fields[1],
        "merchantAccountCode": fields[2], "merchantReference": fields[3],
        "amount": { "value": value, "currency": fields[5] },
        "eventCode": fields[6], "success": fields[7],
        "additionalData": { "hmacSignature": signature },
    })
}

fn adyen_batch(items: &[serde_json::Value], live: Option<&str>) -> Vec<u8> {
    let wrapped: Vec<_> = items
        .iter()
        .map(|item| json!({ "NotificationRequestItem": item }))
        .collect();
    let mut batch = json!({ "notificationItems": wrapped });
    if let Some(live) = live {
        batch["live"] = json!(live);
    }
    serde_json::to_vec(&batch).expect("JSON serializes")
}

/// Every way of cutting `joined` at seven of its colons into eight fields.
fn splits(joined: &str) -> Vec<[String; 8]> {
    let colons: Vec<usize> = joined.match_indices(':').map(|(at, _)| at).collect();
    let mut out = Vec::new();
    let mut chosen = Vec::with_capacity(7);
    choose(&colons, 0, &mut chosen, &mut |cuts: &[usize]| {
        let mut fields: [String; 8] = Default::default();
        let mut start = 0;
        for (field, &cut) in fields.iter_mut().zip(cuts) {
            *field = joined[start..cut].to_owned();
            start = cut + 1;
        }
        fields[7] = joined[start..].to_owned();
        out.push(fields);
    });
    out
}

fn choose(from: &[usize], at: usize, chosen: &mut Vec<usize>, emit: &mut dyn FnMut(&[usize])) {
    if chosen.len() == 7 {
        return emit(chosen);
    }
    for i in at..from.len() {
        chosen.push(from[i]);
        choose(from, i + 1, chosen, emit);
        chosen.pop();
    }
}

fn adyen_fields() -> impl Strategy<Value = [String; 8]> {
    (
        "[0-9A-Z]{16}",
        prop_oneof![Just(String::new()), "[0-9A-Z]{16}"],
        "[A-Za-z]{4,12}",
        "[a-z0-9:]{0,12}",
        (0..100_000i64).prop_map(|v| v.to_string()),
        "EUR|USD|JPY",
        "AUTHORISATION|REFUND|CAPTURE",
        "true|false",
    )
        .prop_map(
            |(psp, original, merchant, reference, value, currency, code, ok)| {
                [
                    psp, original, merchant, reference, value, currency, code, ok,
                ]
            },
        )
}

#[test]
fn property_an_adyen_item_re_split_at_other_colons_is_never_a_new_event() {
    let adyen = seed("adyen", &hex::encode(ADYEN_KEY), json!({})).expect("adyen builds");
    check(256, adyen_fields(), |fields| {
        let body = adyen_batch(&[adyen_item(&fields)], Some("false"));
        let original = events(verify_as(&adyen, &[], &body))
            .ok_or_else(|| TestCaseError::fail("the signed item is refused"))?;
        for split in splits(&fields.join(":")) {
            let body = adyen_batch(&[adyen_item(&split)], Some("false"));
            if let Some(mutant) = events(verify_as(&adyen, &[], &body)) {
                prop_assert_eq!(
                    &mutant[0].0,
                    &original[0].0,
                    "re-split {:?} of {:?} is accepted as another event",
                    split,
                    fields
                );
            }
        }
        Ok(())
    });
}

#[test]
fn property_an_adyen_batch_forwards_its_items_bytes_and_little_more() {
    let adyen = seed("adyen", &hex::encode(ADYEN_KEY), json!({})).expect("adyen builds");
    let live = prop_oneof![
        Just(None),
        Just(Some("true".to_owned())),
        Just(Some("false".to_owned())),
        "[a-z]{0,300}".prop_map(Some),
    ];
    let strategy = (proptest::collection::vec(adyen_fields(), 1..6), live);
    check(256, strategy, |(items, live)| {
        let items: Vec<_> = items.iter().map(adyen_item).collect();
        let body = adyen_batch(&items, live.as_deref());
        let Some(forwarded) = events(verify_as(&adyen, &[], &body)) else {
            return Ok(()); // Refused: nothing forwarded, nothing to bound.
        };
        prop_assert_eq!(forwarded.len(), items.len());
        for ((_, bytes), item) in forwarded.iter().zip(&items) {
            // Each item is forwarded as it was sent (serde_json writes one form, so the item's
            // own serialization is the substring sent).
            let sent = serde_json::to_vec(item).expect("JSON serializes");
            prop_assert!(bytes.windows(sent.len()).any(|w| w == sent.as_slice()));
        }
        // Amplification: the batch-level fields copied into each item's wrapper must stay small.
        let total: usize = forwarded.iter().map(|(_, bytes)| bytes.len()).sum();
        prop_assert!(
            total <= body.len() + 128 * items.len(),
            "{} items forwarded as {total} bytes from a {}-byte request (live {:?})",
            items.len(),
            body.len(),
            live.map(|l| l.len())
        );
        Ok(())
    });
}

/// A `signed_content` template: `{body}`, optionally `{id}` and `{timestamp}`, in any order, with
/// a literal (possibly empty) before, between and after them.
fn template() -> impl Strategy<Value = Vec<String>> {
    let literal = prop::sample::select(vec!["", "", ".", ":", "v0:", "-"]);
    (
        prop::sample::subsequence(vec!["{id}", "{timestamp}"], 0..=2),
        proptest::collection::vec(literal, 4),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(mut placeholders, literals, at, swap)| {
            placeholders.insert(at.index(placeholders.len() + 1), "{body}");
            if swap && placeholders.len() == 3 {
                placeholders.swap(0, 1);
            }
            let mut parts = vec![literals[0].to_owned()];
            for (placeholder, literal) in placeholders.iter().zip(&literals[1..]) {
                parts.push((*placeholder).to_owned());
                parts.push((*literal).to_owned());
            }
            parts
        })
}

/// Values for the placeholders of a template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Values {
    id: String,
    timestamp: String,
    body: String,
}

impl Values {
    fn of(&self, placeholder: &str) -> &str {
        match placeholder {
            "{id}" => &self.id,
            "{timestamp}" => &self.timestamp,
            _ => &self.body,
        }
    }

    fn set(&mut self, placeholder: &str, value: &str) {
        let slot = match placeholder {
            "{id}" => &mut self.id,
            "{timestamp}" => &mut self.timestamp,
            _ => &mut self.body,
        };
        *slot = value.to_owned();
    }
}

fn is_placeholder(part: &str) -> bool {
    part.starts_with('{')
}

/// Every assignment of values to the template's placeholders that produces `message`.
fn parses(parts: &[String], message: &str, values: &mut Values, out: &mut Vec<Values>) {
    let Some((part, rest)) = parts.split_first() else {
        if message.is_empty() {
            out.push(values.clone());
        }
        return;
    };
    if !is_placeholder(part) {
        if let Some(tail) = message.strip_prefix(part.as_str()) {
            parses(rest, tail, values, out);
        }
        return;
    }
    for end in (0..=message.len()).filter(|end| message.is_char_boundary(*end)) {
        values.set(part, &message[..end]);
        parses(rest, &message[end..], values, out);
    }
}

#[test]
fn property_a_generic_signed_string_re_split_is_never_a_new_event() {
    let values = ("[a-z0-9]{1,5}", 0..40i64, "[a-z0-9.:{}]{0,6}");
    check(512, (template(), values), |(parts, (id, age, body))| {
        let uses = |p: &str| parts.iter().any(|part| part == p);
        let mut settings = json!({
            "signature_header": "X-Sig", "algorithm": "sha256", "encoding": "hex",
            "signed_content": parts.concat(), "id_header": "X-Id",
        });
        if uses("{timestamp}") {
            settings["timestamp_header"] = json!("X-Ts");
        }
        // A template the configuration refuses cannot be attacked.
        let Ok(generic) = seed("generic", "s3cret", settings) else {
            return Ok(());
        };
        let original = Values {
            id,
            timestamp: (NOW - age).to_string(),
            body,
        };
        let message: String = parts
            .iter()
            .map(|p| if is_placeholder(p) { original.of(p) } else { p })
            .collect();
        let signature = hex::encode(hmac256(b"s3cret", message.as_bytes()));
        let request = |v: &Values| {
            let headers = vec![
                ("X-Sig".to_owned(), signature.clone().into_bytes()),
                ("X-Id".to_owned(), v.id.clone().into_bytes()),
                ("X-Ts".to_owned(), v.timestamp.clone().into_bytes()),
            ];
            events(verify_as(&generic, &headers, v.body.as_bytes()))
        };
        let accepted = request(&original)
            .ok_or_else(|| TestCaseError::fail("the signed request is refused"))?;
        let mut all = Vec::new();
        parses(&parts, &message, &mut Values::default(), &mut all);
        for other in all.iter().filter(|v| **v != original) {
            if let Some(events) = request(other) {
                prop_assert_eq!(
                    &events,
                    &accepted,
                    "template {:?}: {:?} re-split as {:?}",
                    parts.concat(),
                    original,
                    other
                );
            }
        }
        Ok(())
    });
}
