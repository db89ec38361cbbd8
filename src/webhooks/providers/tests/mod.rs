//! The providers' tests that are not one provider's own unit tests, in one place (the unit tests
//! of each scheme stay at the bottom of its file, with the official vectors).
//!
//! - `support`: settings, requests and expectations in one line each, for every provider's tests.
//! - `adyen`, `generic`, `generic_template`, `registry`: the longer test sets of those modules,
//!   kept here so that each module stays readable.
//! - `fixtures`: replays tests/fixtures/*.json, signed by the providers' own SDKs.
//! - `property`: the property tests of this trust boundary, seeded from those fixtures; every one
//!   runs through `crate::property::check`, which persists no failures (a case worth keeping
//!   becomes a named unit test).

mod adyen;
mod fixtures;
mod generic;
mod generic_template;
mod property;
mod registry;
pub(super) mod support;

use super::validate_event_id;

#[test]
fn event_ids_are_checked_for_length_and_control_characters() {
    assert!(validate_event_id(&"a".repeat(255)).is_ok());
    assert!(validate_event_id(&"a".repeat(256)).is_err());
    assert!(validate_event_id("").is_err());
    assert!(validate_event_id("a\u{7f}b").is_err());
    assert!(validate_event_id("évt_ü_東京").is_ok());
}
