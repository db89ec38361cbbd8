//! `hookonce sign`: the headers (and, where the provider signs inside it, the body) a provider
//! would send, for testing a deployment with curl.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use hookonce::config::Settings;
use hookonce::webhooks;
use hookonce::webhooks::providers::SignOptions;

/// `hookonce sign`'s arguments beyond the source.
pub(crate) struct Args {
    pub body: Option<PathBuf>,
    pub id: Option<String>,
    pub event_type: Option<String>,
    pub out: Option<PathBuf>,
}

pub(crate) fn run(settings: &Settings, source: &str, args: Args) -> anyhow::Result<ExitCode> {
    let (provider, _) = webhooks::source(settings, source)?;
    let body = match &args.body {
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => {
            let mut buffer = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buffer)
                .context("cannot read standard input")?;
            buffer
        }
    };
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let options = SignOptions {
        event_id: args.id,
        event_type: args.event_type,
        now_unix,
    };
    let name = provider.name();
    let body = match provider
        .sign_body(&body, &options)
        .with_context(|| format!("cannot sign this body as provider {name:?}"))?
    {
        Some(signed) if signed != body => {
            if args.out.is_none() {
                bail!(
                    "provider {name:?} has to change this body to sign it (Adyen puts each item's signature in the body, Linear a fresh webhookTimestamp): pass --out FILE to write the body to send, then send that file (curl --data-binary @FILE)"
                );
            }
            signed
        }
        _ => body,
    };
    if let Some(path) = &args.out {
        std::fs::write(path, &body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for (name, value) in provider.sign(&body, &options) {
        println!("{name}: {value}");
    }
    Ok(ExitCode::SUCCESS)
}
