//! Property tests of every provider's `verify`, seeded from the SDK-signed fixtures.
//!
//! Two properties hold for every provider: arbitrary headers and bytes never make `verify` panic,
//! and a mutant of a signed request that `verify` still accepts carries the same events as the
//! original: the same IDs and the same forwarded bytes. A mutant is the fixture with a few edits
//! an attacker (or a careless proxy) could make: flipped, inserted or dropped bytes, truncation,
//! whitespace, header-name case, duplicated, dropped or extra headers, reordered or extra
//! signature parameters (`mutations`). `schemes` checks the same against an
//! independent HMAC; `reframe` tries the re-framings of ambiguous signed strings.
//!
//! Three exceptions follow from the schemes themselves, not from hookonce:
//! - Where the event ID is an unsigned header (GitHub, Shopify, Linear, GitLab), a mutant that
//!   changes that header may change the ID; only the body is held to the original. The payload
//!   fingerprint (`body_dedup`) is what catches such a replay downstream.
//! - Adyen signs eight fields of each item, not its bytes, so only the IDs are compared.
//! - GitLab signs nothing (the token is the secret itself), so only an unchanged ID header holds
//!   the ID to the original's.

mod mutations;
mod parsers;
mod reframe;
mod schemes;

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sha2::Digest as _;

use self::mutations::{apply, mutation};
use super::fixtures::{body_of, provider_for, Case, Expect, FixtureFile, FIXTURES};
use crate::property::check;
use crate::webhooks::providers::{Provider, RawRequest, Verified};

/// One signed request of a fixture, ready to be mutated.
pub(super) struct Seed {
    pub provider: std::sync::Arc<dyn Provider>,
    pub name: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub now_unix: i64,
}

/// Every fixture case that the provider accepts (the mutants' originals).
pub(super) fn accepted_seeds() -> Vec<Seed> {
    let mut seeds = Vec::new();
    for (name, text) in FIXTURES {
        let file: FixtureFile = serde_json::from_str(text).expect("fixture parses");
        for case in file.cases.iter().filter(|case| accepted(case)) {
            seeds.push(Seed {
                provider: provider_for(&file.provider, case, None).expect("fixture builds"),
                name: format!("{name}/{}", case.name),
                headers: case
                    .headers
                    .iter()
                    .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
                    .collect(),
                body: body_of(case).expect("fixture body").to_vec(),
                now_unix: case.now_unix,
            });
        }
    }
    seeds
}

fn accepted(case: &Case) -> bool {
    matches!(case.expect, Expect::Events(_) | Expect::Handshake(_))
}

/// The headers whose value is an unsigned event ID, per provider (lowercase).
fn unsigned_id_headers(provider: &str) -> &'static [&'static str] {
    match provider {
        "github" => &["x-github-delivery"],
        "shopify" => &[
            "x-shopify-event-id",
            "shopify-event-id",
            "x-shopify-webhook-id",
            "shopify-webhook-id",
        ],
        "linear" => &["linear-delivery"],
        "gitlab" => &["idempotency-key"],
        _ => &[],
    }
}

/// A header map from pairs, leaving out names or values that HTTP cannot carry (hyper would have
/// refused the request before any provider saw it).
pub(super) fn header_map(pairs: &[(String, Vec<u8>)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
}

/// What downstream sees of a verdict: per event, its ID, forwarded bytes and fingerprint input.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    Events(Vec<(String, Bytes, Vec<u8>)>),
    Handshake(Bytes),
}

pub(super) fn seen(verified: &Verified) -> Seen {
    match verified {
        Verified::Events(events) => Seen::Events(
            events
                .iter()
                .map(|e| {
                    // A digest the signature's check computed on its way must be the SHA-256 of
                    // exactly what the fingerprint covers.
                    if let Some(digest) = e.payload_digest() {
                        let fresh = sha2::Sha256::digest(e.fingerprint_input());
                        assert_eq!(digest[..], fresh[..16], "{}", e.event_id());
                    }
                    let id = e.event_id().to_owned();
                    (id, e.body().clone(), e.fingerprint_input().to_vec())
                })
                .collect(),
        ),
        Verified::Handshake(answer) => Seen::Handshake(answer.clone()),
    }
}

/// Verifies `headers` and `body` with `seed`'s provider at `seed`'s time.
pub(super) fn verify_as(
    seed: &Seed,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> Option<Verified> {
    let map = header_map(headers);
    let body = Bytes::copy_from_slice(body);
    let request = RawRequest {
        headers: &map,
        body: &body,
        now_unix: seed.now_unix,
    };
    seed.provider.verify(&request).ok()
}

/// The values of the unsigned ID headers of a request, in order.
pub(super) fn unsigned_ids(
    provider: &str,
    headers: &[(String, Vec<u8>)],
) -> Vec<(String, Vec<u8>)> {
    let names = unsigned_id_headers(provider);
    headers
        .iter()
        .filter(|(n, _)| names.contains(&n.to_ascii_lowercase().as_str()))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .collect()
}

/// The property for one accepted mutant; see the module documentation for its three exceptions.
pub(super) fn same_events(provider: &str, mutant: &Seen, original: &Seen, ids_kept: bool) -> bool {
    let (Seen::Events(mutant), Seen::Events(original)) = (mutant, original) else {
        return mutant == original;
    };
    let ids = |events: &[(String, Bytes, Vec<u8>)]| -> Vec<String> {
        events.iter().map(|e| e.0.clone()).collect()
    };
    match provider {
        "adyen" => ids(mutant) == ids(original),
        "gitlab" => !ids_kept || ids(mutant) == ids(original),
        _ if !ids_kept => {
            let rest = |e: &[(String, Bytes, Vec<u8>)]| -> Vec<(Bytes, Vec<u8>)> {
                e.iter().map(|(_, b, f)| (b.clone(), f.clone())).collect()
            };
            rest(mutant) == rest(original)
        }
        _ => mutant == original,
    }
}

#[test]
fn property_an_accepted_mutant_of_a_fixture_keeps_its_event_ids_and_bodies() {
    let seeds = accepted_seeds();
    assert!(seeds.len() >= 50, "too few accepted fixture cases");
    let strategy = (0..seeds.len(), vec(mutation(), 1..4));
    // Mutants that changed the request and were still accepted: if there were none, the
    // property would hold vacuously.
    let changed_and_accepted = AtomicUsize::new(0);
    let cases = check(512, strategy, |(index, mutations)| {
        let seed = &seeds[index];
        let original = verify_as(seed, &seed.headers, &seed.body)
            .ok_or_else(|| TestCaseError::fail(format!("{} is not accepted", seed.name)))?;
        let (mut headers, mut body) = (seed.headers.clone(), seed.body.clone());
        for m in &mutations {
            apply(&mut headers, &mut body, m);
        }
        if let Some(mutant) = verify_as(seed, &headers, &body) {
            if (&headers, &body) != (&seed.headers, &seed.body) {
                changed_and_accepted.fetch_add(1, Ordering::Relaxed);
            }
            let name = seed.provider.name();
            let ids_kept = unsigned_ids(name, &headers) == unsigned_ids(name, &seed.headers);
            prop_assert!(
                same_events(name, &seen(&mutant), &seen(&original), ids_kept),
                "{}: mutant {:?} accepted as {:?}",
                seed.name,
                mutations,
                seen(&mutant)
            );
        }
        Ok(())
    });
    let changed_and_accepted = changed_and_accepted.into_inner();
    assert!(
        cases < 100 || changed_and_accepted * 50 > cases as usize,
        "only {changed_and_accepted} of {cases} mutants were accepted"
    );
}

/// A header name a provider reads, or any token.
fn header_name() -> impl Strategy<Value = String> {
    let known: Vec<String> = accepted_seeds()
        .iter()
        .flat_map(|seed| seed.headers.iter().map(|(n, _)| n.clone()))
        .collect();
    prop_oneof![prop::sample::select(known), "[a-zA-Z0-9-]{1,24}"]
}

#[test]
fn property_arbitrary_headers_and_bodies_never_panic_any_provider() {
    let seeds = accepted_seeds();
    let value = prop_oneof![
        vec(any::<u8>(), 0..80),
        "[ -~]{0,80}".prop_map(String::into_bytes),
    ];
    let body = prop_oneof![
        vec(any::<u8>(), 0..300),
        "[{}\\[\\]\":,0-9a-z \\\\]{0,300}".prop_map(String::into_bytes),
    ];
    let strategy = (
        0..seeds.len(),
        vec((header_name(), value), 0..8),
        body,
        any::<i64>(),
    );
    check(512, strategy, |(index, headers, body, now_unix)| {
        let seed = &seeds[index];
        let map = header_map(&headers);
        let body = Bytes::from(body);
        let request = RawRequest {
            headers: &map,
            body: &body,
            now_unix,
        };
        // The property is that this returns at all; what it returns is the other tests' concern.
        let _ = seed.provider.verify(&request);
        Ok(())
    });
}
