//! The example configurations, the README's provider table and docs/providers.md: every
//! provider shown, and every configuration shown passes `hookonce check-config`.

use std::path::Path;

use super::cases::ADYEN_KEY;
use crate::support::binary::{hookonce, output_text};
use hookonce::webhooks::providers::names;

/// Values for the `env:` secrets of config/examples/*.toml (each must decode for its provider).
const EXAMPLE_ENV: &[(&str, &str)] = &[
    ("STRIPE_WEBHOOK_SECRET", "whsec_example0123456789"),
    (
        "SVIX_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody"),
    ("ADYEN_HMAC_KEY", ADYEN_KEY),
    ("ADYEN_PLATFORM_HMAC_KEY", ADYEN_KEY),
    ("SHOPIFY_CLIENT_SECRET", "shpss_example"),
    ("SLACK_SIGNING_SECRET", "8f742231b10e8888abcd99yyyzzz85a5"),
    ("PADDLE_WEBHOOK_SECRET", "pdl_ntfset_example"),
    ("SQUARE_SIGNATURE_KEY", "square-example-key"),
    ("LINEAR_WEBHOOK_SECRET", "lin_wh_example"),
    ("GITLAB_WEBHOOK_TOKEN", "gitlab-example-token"),
    ("ACME_WEBHOOK_SECRET", "acme-example-secret"),
];

#[test]
fn every_example_configuration_passes_check_config() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for name in text.split("env:").skip(1).map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        }) {
            assert!(
                EXAMPLE_ENV.iter().any(|(n, _)| *n == name),
                "{}: add a value for env:{name} to EXAMPLE_ENV",
                path.display()
            );
        }
        let output = hookonce(
            &["--config", path.to_str().unwrap(), "check-config"],
            EXAMPLE_ENV,
        );
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            output_text(&output)
        );
    }
    for provider in names() {
        let file = dir.join(format!("{provider}.toml"));
        assert!(
            file.exists(),
            "no example for {provider}: {}",
            file.display()
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains(&format!("provider = \"{provider}\"")),
            "{} does not configure provider {provider}",
            file.display()
        );
    }
}

/// The README's Providers section lists every provider in its table, and docs/providers.md shows
/// a configuration block with every provider (which passes check-config) and the generic
/// GitHub/Shopify/Linear sources exactly as in config/examples/generic.toml, whose
/// configurations the fixture replays test.
#[test]
fn the_readme_lists_every_provider_and_the_provider_doc_shows_the_tested_configurations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme
        .find("\n## Providers\n")
        .expect("a Providers section");
    let table = &readme[start + 1..];
    let table = &table[..table[1..].find("\n## ").map_or(table.len(), |i| i + 1)];
    let section = std::fs::read_to_string(root.join("docs/providers.md")).unwrap();
    for provider in names() {
        assert!(
            table.contains(&format!("| `{provider}` |")),
            "{provider} is not in the README's provider table"
        );
        assert!(
            section.contains(&format!("provider = \"{provider}\"")),
            "docs/providers.md has no configuration example for {provider}"
        );
    }

    let generic = std::fs::read_to_string(root.join("config/examples/generic.toml")).unwrap();
    for source in ["github_generic", "shopify_generic", "linear_generic"] {
        let at = generic
            .find(&format!("[sources.{source}]"))
            .unwrap_or_else(|| panic!("generic.toml has no [sources.{source}]"));
        let block = generic[at..].split("\n\n").next().unwrap().trim_end();
        assert!(
            section.contains(block),
            "docs/providers.md does not show [sources.{source}] as in config/examples/generic.toml:\n{block}"
        );
    }

    // The block with every provider is a valid configuration.
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("svix");
    std::fs::write(&secret_file, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a TOML block");
    let config = dir.path().join("providers.toml");
    std::fs::write(
        &config,
        block.replace(
            "file:/run/secrets/svix",
            &format!("file:{}", secret_file.display()),
        ),
    )
    .unwrap();
    let output = hookonce(
        &["--config", config.to_str().unwrap(), "check-config"],
        EXAMPLE_ENV,
    );
    assert!(output.status.success(), "{}", output_text(&output));
}
