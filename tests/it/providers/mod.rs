//! The provider suites: every provider end to end, Adyen batches (hostile ones too), handshakes
//! and retries, the `sign` command, and the example configurations, the README and
//! docs/providers.md they are documented by.

mod adyen;
mod adyen_hostile;
pub(crate) mod cases;
mod end_to_end;
mod examples;
mod handshakes_and_retries;
mod sign_command;
