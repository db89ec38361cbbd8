//! `hookonce sign`: what the binary prints (and writes with `--out`) for every provider is
//! accepted by the daemon, and the bodies it cannot sign as they are are refused with a reason.

use std::path::Path;

use super::cases::{adyen_batch, adyen_item, case, sources, start, Case};
use crate::support::binary::{hookonce, output_text, printed_headers};
use crate::support::now_unix;
use crate::support::settings::{default_sources, sources_toml};
use hookonce::webhooks::providers::names;

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
    let output = hookonce(&args, &[]);
    assert!(
        output.status.success(),
        "{}: {}",
        case.source,
        output_text(&output)
    );
    let headers = printed_headers(&output.stdout);
    (headers, std::fs::read(&out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_sign_command_prints_is_accepted_by_the_daemon() {
    let t = start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookonce.toml");
    let mut all = default_sources();
    all.extend(sources());
    std::fs::write(&config, sources_toml(&all)).unwrap();
    for source in names() {
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
        let output = hookonce(&args, &[]);
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
    let output = hookonce(&args, &[]);
    assert!(output.status.success(), "{}", output_text(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Linear-Signature: "));
    // A body Adyen cannot sign is an error that says why.
    std::fs::write(&body, "[accepted]").unwrap();
    let out = dir.path().join("never.json");
    let output = hookonce(
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
