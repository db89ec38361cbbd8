//! The deliveries of the provider suites: the extra sources, one signed case per provider, and
//! Adyen's notification batches.

use std::collections::BTreeMap;

use crate::support::settings::{source, SourceSettings};
use crate::support::{Backend, SignOptions, TestApp};

pub const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const GITLAB_TOKEN: &str = "gitlab-e2e-token-0123";

/// The sources of these suites, on top of the harness's stripe, github and standard.
pub fn sources() -> BTreeMap<String, SourceSettings> {
    let pointer = |p: &str| Some(p.to_owned());
    let sources = [
        ("adyen", source("adyen", ADYEN_KEY)),
        (
            "adyen_platform",
            SourceSettings {
                id_pointer: pointer("/data/id"),
                ..source("adyen_platform", ADYEN_KEY)
            },
        ),
        ("shopify", source("shopify", "shpss_e2e_client_secret")),
        ("slack", source("slack", "8f742231b10e8888abcd99yyyzzz85a5")),
        (
            "paddle",
            source("paddle", "pdl_ntfset_01e2e_hookonce_secret"),
        ),
        (
            "square",
            SourceSettings {
                notification_url: Some("https://hooks.example.com/webhooks/square".to_owned()),
                ..source("square", "square-e2e-signature-key")
            },
        ),
        ("linear", source("linear", "lin_wh_e2e_hookonce_secret")),
        ("gitlab", source("gitlab", GITLAB_TOKEN)),
        (
            "generic",
            SourceSettings {
                signature_header: Some("X-Acme-Signature".to_owned()),
                signature_prefix: Some("v1=".to_owned()),
                algorithm: Some("sha512".to_owned()),
                encoding: Some("base64".to_owned()),
                signed_content: Some("{timestamp}.{body}".to_owned()),
                timestamp_header: Some("X-Acme-Timestamp".to_owned()),
                id_pointer: pointer("/id"),
                type_header: Some("X-Acme-Event".to_owned()),
                ..source("generic", "generic-e2e-secret")
            },
        ),
    ];
    sources
        .into_iter()
        .map(|(name, source)| (name.to_owned(), source))
        .collect()
}

/// A daemon on Redis with every source of [`sources`].
pub async fn start() -> TestApp {
    sources()
        .into_iter()
        .fold(TestApp::builder(Backend::Redis), |app, (name, settings)| {
            app.source(&name, settings)
        })
        .start()
        .await
}

/// Every body carries this marker in a signed field; changing it breaks the signature.
pub const MARKER: &str = "e2e-marker";

/// One provider's delivery: the body before signing, what `sign` needs, and the event expected.
pub struct Case {
    pub source: &'static str,
    pub body: String,
    pub event_id: String,
    pub event_type: &'static str,
    /// For schemes that carry the ID or type in a header.
    pub header_id: Option<&'static str>,
    pub header_type: Option<&'static str>,
}

pub fn case(source: &'static str) -> Case {
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

pub fn options(case: &Case, now_unix: i64) -> SignOptions {
    SignOptions {
        event_id: case.header_id.map(str::to_owned),
        event_type: case.header_type.map(str::to_owned),
        now_unix,
    }
}

/// An unsigned Adyen item whose merchantReference carries the marker.
pub fn adyen_item(psp: &str, code: &str) -> String {
    format!(
        r#"{{"amount":{{"currency":"EUR","value":1130}},"eventCode":"{code}","merchantAccountCode":"TestMerchant","merchantReference":"{MARKER}:{psp}","pspReference":"{psp}","success":"true"}}"#
    )
}

pub const ADYEN_PREFIX: &str = r#"{"live":"false","notificationItems":["#;

pub fn adyen_batch(items: &[String]) -> String {
    let wrapped: Vec<String> = items
        .iter()
        .map(|item| format!(r#"{{"NotificationRequestItem":{item}}}"#))
        .collect();
    format!("{ADYEN_PREFIX}{}]}}", wrapped.join(","))
}
