//! `hookonce check-config` refuses every bad "who may call" key, naming it and the problem, and
//! accepts their good neighbours (the environment's single-value list form included).

use crate::support::binary::{assert_refused, hookonce, output_text, write};

/// A valid configuration (memory store, stdout sink, the source `demo`) with `server` added to
/// `[server]` and `source` to `[sources.demo]`.
fn config(server: &str, source: &str) -> String {
    format!(
        "[server]\n{server}\n[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
         [sources.demo]\nprovider = \"github\"\nsecrets = [\"s\"]\n{source}\n"
    )
}

#[test]
fn check_config_refuses_each_bad_access_key_by_name() {
    let cases = [
        (
            "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\"]",
            "",
            "server.trusted_proxies[1]: ",
            "prefix length outside 0-32",
        ),
        (
            "trusted_proxies = [\"proxy.internal\"]",
            "",
            "server.trusted_proxies[0]: ",
            "is not an IP address or range",
        ),
        (
            "trusted_proxies = [\"10.0.0.1/8\"]",
            "",
            "server.trusted_proxies[0]: ",
            "write \"10.0.0.0/8\"",
        ),
        (
            "rejected_limit = \"ten/s\"",
            "",
            "server.rejected_limit: ",
            "is not a rate",
        ),
        (
            "rejected_limit = \"10/h\"",
            "",
            "server.rejected_limit: ",
            "unknown unit",
        ),
        (
            "rejected_limit = \"10/s\"\nrejected_limit_burst = 0",
            "",
            "server.rejected_limit_burst: ",
            "must be from 1",
        ),
        (
            "rejected_limit_burst = 50",
            "",
            "server.rejected_limit_burst: ",
            "is read only with server.rejected_limit",
        ),
        (
            "",
            "allowed_ips = [\"2001:db8::/129\"]",
            "sources.demo.allowed_ips[0]: ",
            "prefix length outside 0-128",
        ),
        (
            "",
            "allowed_ips = [\"*\"]",
            "sources.demo.allowed_ips[0]: ",
            "is not an IP address or range",
        ),
        (
            "",
            "rate_limit = \"0/s\"",
            "sources.demo.rate_limit: ",
            "must be a positive rate",
        ),
        (
            "",
            "rate_limit = \"-1/s\"",
            "sources.demo.rate_limit: ",
            "is not a rate",
        ),
        (
            "",
            "rate_limit = 200",
            "sources.demo.rate_limit: ",
            "\"200\" is not a rate",
        ),
        (
            "",
            "rate_limit = \"200/s\"\nrate_limit_burst = 0",
            "sources.demo.rate_limit_burst: ",
            "must be from 1",
        ),
        (
            "",
            "rate_limit_burst = 400",
            "sources.demo.rate_limit_burst: ",
            "is read only with sources.demo.rate_limit",
        ),
    ];
    assert_refused(
        cases.into_iter().map(|(server, source, key, problem)| {
            (config(server, source), key.to_owned(), problem.to_owned())
        }),
        "",
    );
}

#[test]
fn check_config_accepts_good_access_keys() {
    let dir = tempfile::tempdir().unwrap();
    let text = config(
        "trusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\n\
         rejected_limit = \"10/s\"\nrejected_limit_burst = 50",
        "allowed_ips = [\"192.0.2.0/24\", \"::ffff:198.51.100.0/120\"]\n\
         rate_limit = \"200/s\"\nrate_limit_burst = 400",
    );
    let path = write(dir.path(), "access.toml", &text);
    let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &[]);
    let shown = output_text(&output);
    assert!(output.status.success(), "{text}\n{shown}");
    assert!(
        shown.contains("\"198.51.100.0/24\""),
        "a mapped range shown as IPv4: {shown}"
    );
    assert!(shown.contains("rate_limit = \"200/s\""), "{shown}");
    // One range in the environment is a list of one; a rate there too.
    let path = write(dir.path(), "plain.toml", &config("", ""));
    let env = [
        ("HOOKONCE__SERVER__TRUSTED_PROXIES", "10.0.0.0/8"),
        ("HOOKONCE__SOURCES__DEMO__RATE_LIMIT", "30/m"),
    ];
    let output = hookonce(&["check-config", "--config", path.to_str().unwrap()], &env);
    let shown = output_text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("\"10.0.0.0/8\"") && shown.contains("\"30/m\""),
        "{shown}"
    );
}
