//! Every provider end to end: signed by the provider's own `sign_body`/`sign` (and by the
//! `hookonce sign` binary), verified by the daemon, deduplicated in a real Redis and counted.
//!
//! Per provider: a signed delivery is forwarded once with the right `event_id`, `event_type` and
//! body; the same delivery again (re-signed a second later where the scheme signs a timestamp)
//! is a duplicate with `Idempotency-Replayed: true`; a bad signature is 401 and writes nothing;
//! every outcome shows in `/metrics`. Then Adyen batches, Slack's handshake, the `sign` binary,
//! and the example configurations.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::daemon::BIN;
use common::{now_unix, Backend, Extra, TestApp};
use hookonce::providers::{self, SignOptions};

const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const GITLAB_TOKEN: &str = "gitlab-e2e-token-0123";

/// The sources of this suite, on top of the harness's stripe, github and standard.
fn sources() -> String {
    format!(
        r#"
[sources.adyen]
provider = "adyen"
secrets = ["{ADYEN_KEY}"]

[sources.adyen_platform]
provider = "adyen_platform"
secrets = ["{ADYEN_KEY}"]
id_pointer = "/data/id"

[sources.shopify]
provider = "shopify"
secrets = ["shpss_e2e_client_secret"]

[sources.slack]
provider = "slack"
secrets = ["8f742231b10e8888abcd99yyyzzz85a5"]

[sources.paddle]
provider = "paddle"
secrets = ["pdl_ntfset_01e2e_hookonce_secret"]

[sources.square]
provider = "square"
secrets = ["square-e2e-signature-key"]
notification_url = "https://hooks.example.com/webhooks/square"

[sources.linear]
provider = "linear"
secrets = ["lin_wh_e2e_hookonce_secret"]

[sources.gitlab]
provider = "gitlab"
secrets = ["{GITLAB_TOKEN}"]

[sources.generic]
provider = "generic"
secrets = ["generic-e2e-secret"]
signature_header = "X-Acme-Signature"
signature_prefix = "v1="
algorithm = "sha512"
encoding = "base64"
signed_content = "{{timestamp}}.{{body}}"
timestamp_header = "X-Acme-Timestamp"
id_pointer = "/id"
type_header = "X-Acme-Event"
"#
    )
}

async fn start() -> TestApp {
    TestApp::start_with(
        Backend::Redis,
        Extra {
            sources: sources(),
            ..Extra::default()
        },
    )
    .await
}

/// Every body carries this marker in a signed field; changing it breaks the signature.
const MARKER: &str = "e2e-marker";

/// One provider's delivery: the body before signing, what `sign` needs, and the event expected.
struct Case {
    source: &'static str,
    body: String,
    event_id: String,
    event_type: &'static str,
    /// For schemes that carry the ID or type in a header.
    header_id: Option<&'static str>,
    header_type: Option<&'static str>,
}

fn case(source: &'static str) -> Case {
    let header_id = Some("e2e-delivery-0001");
    let (body, event_id, event_type, header_type) = match source {
        "stripe" => (
            format!(
                r#"{{"id":"evt_e2e_1","object":"event","type":"charge.succeeded","data":{{"object":{{"description":"{MARKER}"}}}}}}"#
            ),
            "evt_e2e_1".to_owned(),
            "charge.succeeded",
            None,
        ),
        "standard" => (
            format!(r#"{{"type":"invoice.paid","data":{{"note":"{MARKER}"}}}}"#),
            "e2e-delivery-0001".to_owned(),
            "invoice.paid",
            None,
        ),
        "github" => (
            format!(r#"{{"zen":"{MARKER}","hook_id":1}}"#),
            "e2e-delivery-0001".to_owned(),
            "push",
            Some("push"),
        ),
        // Unsigned: sign_body adds the signature. One minified item, so the entry body (a
        // one-item notification holding the item's bytes) is exactly the body sent.
        "adyen" => (
            adyen_batch(&[adyen_item("8815", "AUTHORISATION")]),
            "TestMerchant:8815:AUTHORISATION:true".to_owned(),
            "AUTHORISATION",
            None,
        ),
        "adyen_platform" => (
            format!(
                r#"{{"type":"balancePlatform.transfer.updated","data":{{"id":"TR_E2E_1","description":"{MARKER}"}}}}"#
            ),
            "TR_E2E_1".to_owned(),
            "balancePlatform.transfer.updated",
            None,
        ),
        "shopify" => (
            format!(r#"{{"id":820982911946154508,"note":"{MARKER}"}}"#),
            "e2e-delivery-0001".to_owned(),
            "orders/paid",
            Some("orders/paid"),
        ),
        "slack" => (
            format!(
                r#"{{"type":"event_callback","event_id":"Ev0E2E01","event":{{"type":"app_mention","text":"{MARKER}"}}}}"#
            ),
            "Ev0E2E01".to_owned(),
            "app_mention",
            None,
        ),
        "paddle" => (
            format!(
                r#"{{"event_id":"evt_01e2e","event_type":"transaction.completed","data":{{"note":"{MARKER}"}}}}"#
            ),
            "evt_01e2e".to_owned(),
            "transaction.completed",
            None,
        ),
        "square" => (
            format!(
                r#"{{"event_id":"6a8f5f28-e2e1","type":"payment.updated","data":{{"note":"{MARKER}"}}}}"#
            ),
            "6a8f5f28-e2e1".to_owned(),
            "payment.updated",
            None,
        ),
        // No webhookTimestamp: sign_body sets a fresh one.
        "linear" => (
            format!(r#"{{"action":"create","type":"Issue","data":{{"title":"{MARKER}"}}}}"#),
            "e2e-delivery-0001".to_owned(),
            "Issue",
            None,
        ),
        "gitlab" => (
            format!(r#"{{"object_kind":"push","note":"{MARKER}"}}"#),
            "e2e-delivery-0001".to_owned(),
            "Push Hook",
            Some("Push Hook"),
        ),
        "generic" => (
            format!(r#"{{"id":"acme_e2e_1","note":"{MARKER}"}}"#),
            "acme_e2e_1".to_owned(),
            "thing.created",
            Some("thing.created"),
        ),
        other => panic!("no case for {other}"),
    };
    Case {
        source,
        body,
        event_id,
        event_type,
        header_id,
        header_type,
    }
}

fn options(case: &Case, now_unix: i64) -> SignOptions {
    SignOptions {
        event_id: case.header_id.map(str::to_owned),
        event_type: case.header_type.map(str::to_owned),
        now_unix,
    }
}

/// An unsigned Adyen item whose merchantReference carries the marker.
fn adyen_item(psp: &str, code: &str) -> String {
    format!(
        r#"{{"amount":{{"currency":"EUR","value":1130}},"eventCode":"{code}","merchantAccountCode":"TestMerchant","merchantReference":"{MARKER}:{psp}","pspReference":"{psp}","success":"true"}}"#
    )
}

const ADYEN_PREFIX: &str = r#"{"live":"false","notificationItems":["#;

fn adyen_batch(items: &[String]) -> String {
    let wrapped: Vec<String> = items
        .iter()
        .map(|item| format!(r#"{{"NotificationRequestItem":{item}}}"#))
        .collect();
    format!("{ADYEN_PREFIX}{}]}}", wrapped.join(","))
}

async fn metric(t: &TestApp, name: &str, source: &str, label: &str) -> f64 {
    let series = if label.is_empty() {
        format!(r#"{name}{{source="{source}"}}"#)
    } else {
        format!(r#"{name}{{source="{source}",{label}}}"#)
    };
    t.metric(&series).await
}

/// The whole per-provider scenario.
async fn forwarded_once_duplicates_absorbed_forgeries_rejected(source: &'static str) {
    let t = start().await;
    let case = case(source);
    let provider = providers::build(source, &t.app.settings.sources[source]).unwrap();
    let now = now_unix();

    // 1. A signed delivery: forwarded, one stream entry.
    let (first, sent) = t
        .deliver_signed(source, case.body.as_bytes(), &options(&case, now))
        .await;
    assert_eq!(first.status(), 200, "{source}: {:?}", first.text().await);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let ack = first.text().await.unwrap();
    assert_eq!(ack, provider.ack().body, "{source}");
    let entries = t.stream_entries(source);
    assert_eq!(entries.len(), 1, "{source}");
    let entry = &entries[0];
    assert_eq!(entry.source, source);
    assert_eq!(entry.provider, provider.name());
    assert_eq!(entry.event_id, case.event_id, "{source}");
    assert_eq!(entry.event_type, case.event_type, "{source}");
    assert_eq!(
        String::from_utf8_lossy(&entry.body),
        String::from_utf8_lossy(&sent),
        "{source}: the entry body is the body sent"
    );
    assert!(entry.received_at.abs_diff(now as u64 * 1000) < 60_000);
    let stored = t.stored();

    // 2. The same delivery again, re-signed a second later: a duplicate, nothing new stored.
    let (again, resent) = t
        .deliver_signed(source, &sent, &options(&case, now + 1))
        .await;
    assert_eq!(resent, sent, "{source}: re-signing kept the body");
    assert_eq!(again.status(), 200, "{source}");
    assert_eq!(again.headers()["idempotency-replayed"], "true", "{source}");
    assert_eq!(again.text().await.unwrap(), ack);
    assert_eq!(t.stream_entries(source).len(), 1, "{source}");
    assert_eq!(t.stored(), stored, "{source}");

    // 3. A bad signature: 401, nothing written.
    let mut headers = t.sign(source, &sent, &options(&case, now));
    let mut forged = String::from_utf8(sent.clone()).unwrap();
    if source == "gitlab" {
        // GitLab signs nothing: the token is the whole proof.
        for (name, value) in &mut headers {
            if name == "X-Gitlab-Token" {
                *value = "not-the-token".to_owned();
            }
        }
    } else {
        assert!(forged.contains(MARKER), "{source}");
        forged = forged.replace(MARKER, "e2e-forged");
    }
    let rejected = t.post(source, forged.as_bytes(), &headers).await;
    assert_eq!(rejected.status(), 401, "{source}");
    assert_eq!(
        rejected.text().await.unwrap(),
        r#"{"error":"invalid_signature"}"#
    );
    assert_eq!(t.stored(), stored, "{source}: a rejection writes nothing");
    assert_eq!(t.stream_entries(source).len(), 1, "{source}");

    // 4. Every outcome counted.
    let events = "hookonce_events_total";
    for (outcome, count) in [
        ("forwarded", 1.0),
        ("duplicate", 1.0),
        ("invalid_signature", 1.0),
    ] {
        assert_eq!(
            metric(&t, events, source, &format!(r#"outcome="{outcome}""#)).await,
            count,
            "{source} {outcome}"
        );
    }
    assert_eq!(
        metric(&t, "hookonce_duplicate_hits_total", source, "").await,
        1.0
    );
    let requests = "hookonce_http_requests_total";
    assert_eq!(metric(&t, requests, source, r#"status="200""#).await, 2.0);
    assert_eq!(metric(&t, requests, source, r#"status="401""#).await, 1.0);
    t.stop().await;
}

macro_rules! every_provider {
    ($($name:ident),* $(,)?) => {
        mod per_provider {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::forwarded_once_duplicates_absorbed_forgeries_rejected(stringify!($name))
                        .await;
                }
            )*

            #[test]
            fn every_known_provider_has_a_case() {
                let covered = [$(stringify!($name)),*];
                for name in hookonce::providers::KNOWN_PROVIDERS {
                    assert!(covered.contains(name), "no end-to-end test for {name}");
                }
            }
        }
    };
}

every_provider!(
    stripe,
    standard,
    github,
    adyen,
    adyen_platform,
    shopify,
    slack,
    paddle,
    square,
    linear,
    gitlab,
    generic,
);

/// Signs each item as a one-item batch; returns the signed items' bytes and those one-item
/// notifications, which are what the stream entries hold.
fn signed_adyen_items(t: &TestApp, psps: &[&str]) -> (Vec<String>, Vec<String>) {
    let now = SignOptions {
        now_unix: now_unix(),
        ..SignOptions::default()
    };
    psps.iter()
        .map(|psp| {
            let single = adyen_batch(&[adyen_item(psp, "CAPTURE")]);
            let signed = String::from_utf8(t.sign_body("adyen", single.as_bytes(), &now)).unwrap();
            let item = signed[ADYEN_PREFIX.len() + r#"{"NotificationRequestItem":"#.len()
                ..signed.len() - "}]}".len()]
                .to_owned();
            (item, signed)
        })
        .unzip()
}

/// Posts a batch of signed items (Adyen has no signature header; `sign` gives the content type).
async fn post_batch(t: &TestApp, items: &[String]) -> reqwest::Response {
    let body = adyen_batch(items);
    let headers = t.sign("adyen", body.as_bytes(), &common::now());
    t.post("adyen", body.as_bytes(), &headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adyen_batches_are_deduplicated_per_item_and_verified_whole() {
    let t = start().await;
    let ids = |psps: &[&str]| -> Vec<String> {
        psps.iter()
            .map(|psp| format!("TestMerchant:{psp}:CAPTURE:true"))
            .collect()
    };
    let entry_ids = |t: &TestApp| -> Vec<String> {
        t.stream_entries("adyen")
            .into_iter()
            .map(|e| e.event_id)
            .collect()
    };

    // A batch of three new items: 200 [accepted], three entries, each its own item.
    let (items, singles) = signed_adyen_items(&t, &["9001", "9002", "9003"]);
    // Signing the whole batch gives the same bytes as signing its items one by one.
    let unsigned = adyen_batch(&["9001", "9002", "9003"].map(|psp| adyen_item(psp, "CAPTURE")));
    assert_eq!(
        t.sign_body("adyen", unsigned.as_bytes(), &common::now()),
        adyen_batch(&items).into_bytes()
    );
    let first = post_batch(&t, &items).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotency-replayed").is_none());
    assert_eq!(first.text().await.unwrap(), "[accepted]");
    let entries = t.stream_entries("adyen");
    assert_eq!(entry_ids(&t), ids(&["9001", "9002", "9003"]));
    for (entry, single) in entries.iter().zip(&singles) {
        assert_eq!(entry.event_type, "CAPTURE");
        assert_eq!(String::from_utf8_lossy(&entry.body), *single);
    }
    let stored = t.stored();

    // One bad item among new ones: 401 and nothing stored, not even the good items.
    let (mut fresh, _) = signed_adyen_items(&t, &["9004", "9005", "9006"]);
    fresh[2] = fresh[2].replace(MARKER, "e2e-forged");
    let rejected = post_batch(&t, &fresh).await;
    assert_eq!(rejected.status(), 401);
    assert_eq!(t.stored(), stored);
    assert_eq!(entry_ids(&t).len(), 3);

    // The first batch again: every item a duplicate, the same answer, replayed.
    let again = post_batch(&t, &items).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), "[accepted]");
    assert_eq!(t.stored(), stored);

    // One new item between two seen ones: 200, one new entry, not a replay.
    let (new, new_single) = signed_adyen_items(&t, &["9007"]);
    let mixed = [items[1].clone(), new[0].clone(), items[2].clone()];
    let response = post_batch(&t, &mixed).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("idempotency-replayed").is_none());
    assert_eq!(response.text().await.unwrap(), "[accepted]");
    assert_eq!(entry_ids(&t), ids(&["9001", "9002", "9003", "9007"]));
    let last = t.stream_entries("adyen").pop().unwrap();
    assert_eq!(String::from_utf8_lossy(&last.body), new_single[0]);

    let count = |outcome: &'static str| {
        let t = &t;
        async move {
            metric(
                t,
                "hookonce_events_total",
                "adyen",
                &format!(r#"outcome="{outcome}""#),
            )
            .await
        }
    };
    assert_eq!(count("forwarded").await, 4.0);
    assert_eq!(count("duplicate").await, 5.0);
    assert_eq!(count("invalid_signature").await, 1.0);
    assert_eq!(
        metric(&t, "hookonce_duplicate_hits_total", "adyen", "").await,
        5.0
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_url_verification_echoes_the_challenge_and_stores_nothing() {
    let t = start().await;
    let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    let body = format!(
        r#"{{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"{challenge}","type":"url_verification"}}"#
    );
    let (response, _) = t
        .deliver_signed("slack", body.as_bytes(), &common::now())
        .await;
    assert_eq!(response.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(answer, serde_json::json!({ "challenge": challenge }));
    assert_eq!(t.stored(), 0);
    assert!(t.stream_entries("slack").is_empty());
    // An unsigned handshake is not answered.
    let forged = t.post("slack", body.as_bytes(), &[]).await;
    assert_eq!(forged.status(), 401);
    assert_eq!(t.stored(), 0);
    t.stop().await;
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("HOOKONCE_CONFIG");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn output_text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `hookonce sign --out`: the binary's headers and body, as a provider would send them.
fn cli_sign(config: &Path, dir: &Path, case: &Case) -> (Vec<(String, String)>, Vec<u8>) {
    let input = dir.join(format!("{}.json", case.source));
    let out = dir.join(format!("{}.signed.json", case.source));
    std::fs::write(&input, &case.body).unwrap();
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "sign",
        "--source",
        case.source,
        "--body",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(id) = case.header_id {
        args.extend(["--id", id]);
    }
    if let Some(kind) = case.header_type {
        args.extend(["--type", kind]);
    }
    let output = run(&args, &[]);
    assert!(
        output.status.success(),
        "{}: {}",
        case.source,
        output_text(&output)
    );
    let headers = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(": ").expect("Name: value");
            (name.to_owned(), value.to_owned())
        })
        .collect();
    (headers, std::fs::read(&out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_sign_command_prints_is_accepted_by_the_daemon() {
    let t = start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookonce.toml");
    std::fs::write(&config, format!("{}{}", common::sources_toml(), sources())).unwrap();
    for source in providers::KNOWN_PROVIDERS {
        let case = case(source);
        let (headers, body) = cli_sign(&config, dir.path(), &case);
        let response = t.post(source, &body, &headers).await;
        assert_eq!(
            response.status(),
            200,
            "{source}: {:?}",
            response.text().await
        );
        let entries = t.stream_entries(source);
        assert_eq!(entries.len(), 1, "{source}");
        assert_eq!(entries[0].event_id, case.event_id, "{source}");
        assert_eq!(entries[0].body, body, "{source}");
    }

    // Where the body must change, --out is required and the error names it.
    let body = dir.path().join("unsigned.json");
    for (source, text) in [
        ("adyen", adyen_batch(&[adyen_item("9101", "AUTHORISATION")])),
        (
            "linear",
            r#"{"type":"Issue","webhookTimestamp":1}"#.to_owned(),
        ),
    ] {
        std::fs::write(&body, text).unwrap();
        let args = [
            "--config",
            config.to_str().unwrap(),
            "sign",
            "--source",
            source,
            "--body",
            body.to_str().unwrap(),
        ];
        let output = run(&args, &[]);
        assert!(!output.status.success(), "{source}");
        assert!(output.stdout.is_empty(), "{source}: no headers printed");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--out FILE"),
            "{source}: {}",
            output_text(&output)
        );
    }
    // A Linear body with a fresh timestamp is signed as it is, without --out.
    let fresh = format!(
        r#"{{"type":"Issue","webhookTimestamp":{}}}"#,
        now_unix() * 1000
    );
    std::fs::write(&body, &fresh).unwrap();
    let args = [
        "--config",
        config.to_str().unwrap(),
        "sign",
        "--source",
        "linear",
        "--body",
        body.to_str().unwrap(),
    ];
    let output = run(&args, &[]);
    assert!(output.status.success(), "{}", output_text(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Linear-Signature: "));
    // A body Adyen cannot sign is an error that says why.
    std::fs::write(&body, "[accepted]").unwrap();
    let out = dir.path().join("never.json");
    let output = run(
        &[
            "--config",
            config.to_str().unwrap(),
            "sign",
            "--source",
            "adyen",
            "--body",
            body.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!output.status.success());
    assert!(output_text(&output).contains("not an Adyen notification"));
    assert!(!out.exists());
    t.stop().await;
}

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
        let output = run(
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
    for provider in providers::KNOWN_PROVIDERS {
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

/// The README's Providers section: every provider in its table and its configuration block (which
/// passes check-config), and the generic GitHub/Shopify/Linear sources exactly as in
/// config/examples/generic.toml, whose configurations the fixture replays test.
#[test]
fn the_readme_lists_every_provider_and_shows_the_tested_generic_configurations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme
        .find("\n## Providers\n")
        .expect("a Providers section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    for provider in providers::KNOWN_PROVIDERS {
        assert!(
            section.contains(&format!("| `{provider}` |")),
            "{provider} is not in the README's provider table"
        );
        assert!(
            section.contains(&format!("provider = \"{provider}\"")),
            "the README has no configuration example for {provider}"
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
            "the README does not show [sources.{source}] as in config/examples/generic.toml:\n{block}"
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
    let config = dir.path().join("readme.toml");
    std::fs::write(
        &config,
        block.replace(
            "file:/run/secrets/svix",
            &format!("file:{}", secret_file.display()),
        ),
    )
    .unwrap();
    let output = run(
        &["--config", config.to_str().unwrap(), "check-config"],
        EXAMPLE_ENV,
    );
    assert!(output.status.success(), "{}", output_text(&output));
}

/// Linear stamps every attempt with a fresh `webhookTimestamp`: a retry must be a duplicate,
/// not a payload mismatch. A different payload under the same delivery ID still is one.
#[tokio::test]
async fn a_linear_retry_with_a_fresh_timestamp_is_a_duplicate() {
    let t = TestApp::start_with(
        Backend::Redis,
        Extra {
            sources: sources(),
            ..Extra::default()
        },
    )
    .await;
    let options = SignOptions {
        event_id: Some("linear-retry-1".into()),
        now_unix: now_unix(),
        ..SignOptions::default()
    };
    let body = |stamp_ms: i64, title: &str| {
        format!(
            r#"{{"action":"create","type":"Issue","data":{{"title":"{title}"}},"webhookTimestamp":{stamp_ms}}}"#
        )
    };
    let now_ms = now_unix() * 1000;
    let first = t
        .deliver("linear", body(now_ms - 20_000, "a").as_bytes(), &options)
        .await;
    assert_eq!(first.status(), 200);
    let retry = t
        .deliver("linear", body(now_ms, "a").as_bytes(), &options)
        .await;
    assert_eq!(retry.status(), 200);
    assert_eq!(retry.headers()["idempotency-replayed"], "true");
    let other = t
        .deliver("linear", body(now_ms, "b").as_bytes(), &options)
        .await;
    assert_eq!(other.status(), 422);
    assert_eq!(t.stream_entries("linear").len(), 1);
}
