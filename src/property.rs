//! Shared settings of the in-crate property tests (the fuzzing of the trust boundary).
//!
//! The properties live beside the parsers they exercise, because those are crate-private. Each
//! runs a bounded number of cases so that the whole set stays within seconds in a debug build and
//! runs with every `cargo nextest run`; `PROPTEST_CASES` overrides every default, which is how
//! `scripts/soak` runs a longer pass. Failures are not persisted to files: a case worth keeping
//! becomes a named unit test next to the fix.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Runs `test` on `default_cases` values of `strategy` (or `PROPTEST_CASES` of them), panicking
/// with the minimal failing input when one fails; returns how many cases it ran.
pub(crate) fn check<S: Strategy>(
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> u32
where
    S::Value: std::fmt::Debug,
{
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    // `Config::default()` has already read PROPTEST_CASES when it is set.
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = default_cases;
    }
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("{failure}");
    }
    cases
}
