//! What is sent: provider-realistic bodies, signed exactly as the provider signs them.
//!
//! Signing goes through hookonce's own `Provider::sign` (the code the daemon's `sign` command
//! uses, itself checked against the providers' SDKs), except for Adyen, whose signatures live
//! inside the body: each batch item carries its own HMAC, computed here as Adyen computes it.
//!
//! Cost matters on a 2-core machine shared with the daemon, so a request whose signature does
//! not depend on the clock (GitHub, Adyen) is serialised once per event and reused byte for byte
//! by its duplicates and retries. Timestamped schemes (Stripe, Standard Webhooks) are signed
//! again on every send, as the provider does, into a buffer the caller reuses.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookonce::config::SourceSettings;
use hookonce::webhooks::providers::{self, Provider, SignOptions};
use sha2::Sha256;

use crate::http::request_head;

/// Adyen: the merchant account every generated item names (part of each event ID).
const ADYEN_MERCHANT: &str = "LoadgenMerchant";

enum Kind {
    Stripe,
    GitHub,
    Standard,
    Adyen {
        key: Vec<u8>,
        batch: usize,
    },
    /// Any other provider: the body carries `id`/`event_id`/`type`, and `sign` gets the ID too.
    Other,
}

/// How one source's deliveries are made.
pub struct Workload {
    provider: Arc<dyn Provider>,
    kind: Kind,
    timestamped: bool,
    path: String,
    host: String,
    prefix: String,
    body_size: usize,
    created: i64,
}

/// One event (or, for Adyen, one batch of events) and its signed request where that is fixed.
pub struct Event {
    /// Its number in the run (which server of several gets which copy depends on it).
    pub index: u64,
    /// The event IDs the daemon derives from this request (several for an Adyen batch).
    pub ids: Vec<String>,
    /// The ID passed to `sign` for schemes that carry it in a header.
    header_id: String,
    body: Bytes,
    fixed: Option<Bytes>,
}

impl Workload {
    pub fn new(
        source: &str,
        settings: &SourceSettings,
        path: String,
        host: String,
        prefix: String,
        body_size: usize,
        batch: usize,
    ) -> Result<Self, String> {
        let provider = providers::build(source, settings).map_err(|e| e.to_string())?;
        let kind = match provider.name() {
            "stripe" => Kind::Stripe,
            "github" => Kind::GitHub,
            "standard" => Kind::Standard,
            "adyen" => {
                let secret = settings.secrets.first().ok_or("the source has no secret")?;
                let key = hex::decode(secret.expose().trim())
                    .map_err(|e| format!("the Adyen HMAC key is not hex: {e}"))?;
                Kind::Adyen {
                    key,
                    batch: batch.max(1),
                }
            }
            _ => Kind::Other,
        };
        // A scheme whose headers change with the clock must be signed at every send; asking the
        // provider beats keeping a list that a new provider module would silently fall out of.
        let at = |now_unix| {
            let options = SignOptions {
                event_id: Some("probe".to_owned()),
                event_type: None,
                now_unix,
            };
            provider.sign(b"{}", &options)
        };
        let timestamped = at(1_000_000_000) != at(2_000_000_000);
        Ok(Self {
            provider,
            kind,
            timestamped,
            path,
            host,
            prefix,
            body_size,
            created: crate::unix_now(),
        })
    }

    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    /// Events per request (the Adyen batch size, else 1).
    pub fn events_per_request(&self) -> usize {
        match self.kind {
            Kind::Adyen { batch, .. } => batch,
            _ => 1,
        }
    }

    /// Builds event number `index` of this run.
    pub fn event(&self, index: u64) -> Event {
        let p = &self.prefix;
        let pad = |used: usize| padding(self.body_size.saturating_sub(used));
        let (id, body) = match &self.kind {
            Kind::Stripe => {
                let id = format!("evt_{p}{index:016}");
                let head = format!(
                    r#"{{"id":"{id}","object":"event","api_version":"2024-06-20","created":{},"data":{{"object":{{"id":"pi_{p}{index:016}","object":"payment_intent","amount":2000,"currency":"eur","customer":"cus_{p}{index:06}","description":""#,
                    self.created
                );
                let tail = r#"","metadata":{"order_id":"loadgen"},"status":"succeeded"}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}"#;
                let body = format!("{head}{}{tail}", pad(head.len() + tail.len()));
                (id, body)
            }
            Kind::GitHub => {
                let id = format!("{p}-0000-4000-8000-{index:012x}");
                // Each push names its own commit, as GitHub's do: a source with body_dedup
                // would take events with one body under many delivery IDs for replays.
                let head = format!(
                    r#"{{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"{index:040x}","repository":{{"id":186853002,"full_name":"acme/shop","private":true}},"pusher":{{"name":"loadgen"}},"head_commit":{{"id":"{index:040x}","message":"{p} "#
                );
                let tail = r#""}}"#;
                let body = format!("{head}{}{tail}", pad(head.len() + tail.len()));
                (id, body)
            }
            Kind::Standard => {
                let id = format!("msg_{p}{index:019}");
                let head = format!(
                    r#"{{"type":"invoice.paid","timestamp":"{}","data":{{"id":"inv_{p}{index:016}","description":""#,
                    self.created
                );
                let tail = r#""}}"#;
                let body = format!("{head}{}{tail}", pad(head.len() + tail.len()));
                (id, body)
            }
            Kind::Adyen { key, batch } => return self.adyen(index, key, *batch),
            Kind::Other => {
                let id = format!("{p}-{index:012}");
                let head = format!(
                    r#"{{"id":"{id}","event_id":"{id}","type":"loadgen.test","data":{{"description":""#
                );
                let tail = r#""}}"#;
                let body = format!("{head}{}{tail}", pad(head.len() + tail.len()));
                (id, body)
            }
        };
        self.finish(index, vec![id.clone()], id, Bytes::from(body))
    }

    /// An Adyen batch: `batch` items, each signed over its eight fields with the hex-decoded key.
    fn adyen(&self, index: u64, key: &[u8], batch: usize) -> Event {
        let per_item = self.body_size / batch;
        let mut ids = Vec::with_capacity(batch);
        let mut items = Vec::with_capacity(batch);
        for item in 0..batch {
            let psp = format!("{}{:08}", self.prefix, index * batch as u64 + item as u64);
            let reference = format!("order-{index}-{item}");
            let signed = format!("{psp}::{ADYEN_MERCHANT}:{reference}:1000:EUR:AUTHORISATION:true");
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
            mac.update(signed.as_bytes());
            let signature =
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            let head = format!(
                r#"{{"NotificationRequestItem":{{"additionalData":{{"hmacSignature":"{signature}"}},"amount":{{"currency":"EUR","value":1000}},"eventCode":"AUTHORISATION","eventDate":"2026-01-01T00:00:00+01:00","merchantAccountCode":"{ADYEN_MERCHANT}","merchantReference":"{reference}","operations":["CANCEL","CAPTURE","REFUND"],"paymentMethod":"visa","pspReference":"{psp}","reason":""#
            );
            let tail = r#"","success":"true"}}"#;
            let used = head.len() + tail.len() + 2;
            items.push(format!(
                "{head}{}{tail}",
                padding(per_item.saturating_sub(used))
            ));
            ids.push(format!("{ADYEN_MERCHANT}:{psp}:AUTHORISATION:true"));
        }
        let body = format!(
            r#"{{"live":"false","notificationItems":[{}]}}"#,
            items.join(",")
        );
        let header_id = ids[0].clone();
        self.finish(index, ids, header_id, Bytes::from(body))
    }

    fn finish(&self, index: u64, ids: Vec<String>, header_id: String, body: Bytes) -> Event {
        let mut event = Event {
            index,
            ids,
            header_id,
            body,
            fixed: None,
        };
        if !self.timestamped {
            let mut out = Vec::with_capacity(event.body.len() + 512);
            self.serialise(&event, crate::unix_now(), &mut out);
            event.fixed = Some(Bytes::from(out));
        }
        event
    }

    /// The request bytes to send now: the fixed request, or a fresh signature into `scratch`.
    pub fn request<'a>(&self, event: &'a Event, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        self.request_at(event, crate::unix_now(), scratch)
    }

    /// The request as it would be sent at `now_unix` (Unix seconds): the fixed request, or a
    /// signature for that instant into `scratch` (`requests` signs a whole file for one instant).
    pub fn request_at<'a>(
        &self,
        event: &'a Event,
        now_unix: i64,
        scratch: &'a mut Vec<u8>,
    ) -> &'a [u8] {
        if let Some(fixed) = &event.fixed {
            return fixed;
        }
        scratch.clear();
        self.serialise(event, now_unix, scratch);
        scratch
    }

    fn serialise(&self, event: &Event, now_unix: i64, out: &mut Vec<u8>) {
        let event_type = match self.kind {
            Kind::GitHub => Some("push".to_owned()),
            _ => None,
        };
        let options = SignOptions {
            event_id: Some(event.header_id.clone()),
            event_type,
            now_unix,
        };
        request_head(out, &self.path, &self.host, event.body.len());
        for (name, value) in self.provider.sign(&event.body, &options) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&event.body);
    }
}

/// Filler text of exactly `len` bytes: JSON-safe prose, as a description field would hold.
fn padding(len: usize) -> String {
    const TEXT: &str =
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. ";
    TEXT.chars().cycle().take(len).collect()
}
