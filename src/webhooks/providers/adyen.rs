//! Adyen classic notifications: one HMAC per batch item, inside the JSON body.
//!
//! Each `notificationItems[i].NotificationRequestItem` carries `additionalData.hmacSignature`:
//! base64 HMAC-SHA256, keyed with the hex-decoded HMAC key, over eight fields joined by `:`
//! (`pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:
//! amount.currency:eventCode:success`, a missing field being empty). **Every** item is checked,
//! and one bad item rejects the whole request: an attacker who can append an unsigned item to a
//! genuine batch must not get it forwarded. (The Python SDK's helper looks at item 0 only.)
//!
//! The signature is only over those fields, not the rest of the item, so fields such as
//! `additionalData` or `reason` are as trustworthy as the transport that carried them; the ID
//! fields, which drive deduplication, are all signed.
//!
//! Each item becomes one event:
//! - `event_id` = `merchantAccountCode:pspReference:eventCode:success`. pspReference and eventCode
//!   identify the event; `success` keeps a later changed outcome from being dropped as a duplicate.
//! - `event_type` = `eventCode`.
//! - body = a one-item notification in Adyen's own shape, the item copied byte for byte from the
//!   request: `{"live":<live>,"notificationItems":[{"NotificationRequestItem":<item>}]}`, where
//!   `<live>` is the batch's `live` value as sent (`"true"`/`"false"`; the key is left out when the
//!   batch has none). Consumers can parse it with Adyen's models and re-check its `hmacSignature`.
//!
//! The eight fields are joined without escaping, so a colon inside one of them would let a
//! captured item be re-split into other fields under the same signature (`merchantReference =
//! "order:77"` re-read as `merchantAccountCode = "TestMerchant:order"`, `merchantReference =
//! "77"`), changing the event ID. Account codes, PSP references, event codes, amounts and
//! currencies never contain `:`, so an item where any field but `merchantReference` does is
//! malformed: with one field allowed colons, the split of the signed string is unique.
//!
//! Work per request stays within a small multiple of its size. The batch-level `live` is not
//! signed and is copied into every item's forwarded body, so it must be `"true"` or `"false"` (or
//! absent); a batch carries at most `max_batch_items` items ([`DEFAULT_MAX_BATCH_ITEMS`]). Both
//! are checked before any MAC is computed, so an oversized batch costs no HMAC work; they answer
//! 400 (`malformed`).
//!
//! Adyen expects the body `[accepted]` in answer (a legacy requirement it still honours).
//!
//! `sign_body` (for `hookonce sign --out`) writes each item's signature into the body, editing
//! only the bytes of `hmacSignature`, so the items a consumer later receives are the items of the
//! signed file.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::{ConfigError, SourceSettings};

use super::secrets;
use super::signatures::{base64, Candidates, Encoding};
use super::signing::{any_key_matches, keyed_macs, tag, HmacSha256};
use super::splice::{Edits, Members};
use super::{
    Ack, Provider, RawRequest, SignError, SignOptions, Verified, VerifiedEvent, VerifyError,
};

/// Where the signature lives, named in errors in place of a header.
pub(super) const SIGNATURE_FIELD: &str = "additionalData.hmacSignature";

/// Items per batch when `max_batch_items` is not set: far above the batches Adyen sends, and
/// small enough that a batch of copies of one captured item costs little.
pub const DEFAULT_MAX_BATCH_ITEMS: u32 = 100;

pub struct Adyen {
    keys: Vec<HmacSha256>,
    max_items: usize,
}

impl Adyen {
    pub fn from_settings(source: &str, settings: &SourceSettings) -> Result<Self, ConfigError> {
        let max_items = settings.max_batch_items.unwrap_or(DEFAULT_MAX_BATCH_ITEMS);
        if max_items == 0 {
            return Err(ConfigError::invalid(
                format!("sources.{source}.max_batch_items"),
                "must be at least 1",
            ));
        }
        Ok(Self {
            keys: keyed_macs(source, settings, secrets::hex)?,
            max_items: max_items as usize,
        })
    }
}

#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow, default)]
    live: Option<&'a RawValue>,
    #[serde(rename = "notificationItems", borrow)]
    items: Vec<Wrapper<'a>>,
}

#[derive(Deserialize)]
struct Wrapper<'a> {
    #[serde(rename = "NotificationRequestItem", borrow)]
    item: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item<'a> {
    #[serde(borrow, default)]
    psp_reference: Option<Field<'a>>,
    #[serde(borrow, default)]
    original_reference: Option<Field<'a>>,
    #[serde(borrow, default)]
    merchant_account_code: Option<Field<'a>>,
    #[serde(borrow, default)]
    merchant_reference: Option<Field<'a>>,
    #[serde(borrow, default)]
    amount: Option<Amount<'a>>,
    #[serde(borrow, default)]
    event_code: Option<Field<'a>>,
    #[serde(borrow, default)]
    success: Option<Field<'a>>,
    #[serde(borrow, default)]
    additional_data: Option<AdditionalData<'a>>,
}

#[derive(Deserialize)]
struct Amount<'a> {
    #[serde(borrow, default)]
    value: Option<Field<'a>>,
    #[serde(borrow, default)]
    currency: Option<Field<'a>>,
}

#[derive(Deserialize)]
struct AdditionalData<'a> {
    #[serde(rename = "hmacSignature", borrow, default)]
    hmac_signature: Option<Cow<'a, str>>,
}

/// A signed field as it enters the signed string: strings as they are, integers in decimal and
/// booleans as `true`/`false` (Adyen sends `success` as a string, some integrations as a bool).
struct Field<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl<'de> Visitor<'de> for FieldVisitor {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, an integer or a boolean")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Field(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Field(Cow::Owned(v.to_owned())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Field(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Field(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Field(Cow::Borrowed(if v { "true" } else { "false" })))
            }
        }
        deserializer.deserialize_any(FieldVisitor)
    }
}

fn text<'b>(field: &'b Option<Field<'_>>) -> &'b str {
    field.as_ref().map_or("", |f| &f.0)
}

impl Item<'_> {
    /// Rejects an item whose signed string could be split another way: only `merchantReference`
    /// (the fourth field) may contain `:`.
    fn check_framing(&self) -> Result<(), VerifyError> {
        let fields = self.signed_fields();
        let reframable = fields
            .iter()
            .enumerate()
            .any(|(i, field)| i != 3 && field.contains(':'));
        if reframable {
            return Err(VerifyError::Malformed(
                "Adyen item with ':' in a signed field other than merchantReference",
            ));
        }
        Ok(())
    }

    /// The eight signed fields, in order.
    fn signed_fields(&self) -> [&str; 8] {
        let (value, currency) = self
            .amount
            .as_ref()
            .map_or(("", ""), |a| (text(&a.value), text(&a.currency)));
        [
            text(&self.psp_reference),
            text(&self.original_reference),
            text(&self.merchant_account_code),
            text(&self.merchant_reference),
            value,
            currency,
            text(&self.event_code),
            text(&self.success),
        ]
    }
}

/// The signed string of one item, as parts to feed the MAC: the eight fields joined by `:`.
fn signed_message<'b>(f: &'b [&str; 8]) -> [&'b [u8]; 15] {
    let c: &[u8] = b":";
    [
        f[0].as_bytes(),
        c,
        f[1].as_bytes(),
        c,
        f[2].as_bytes(),
        c,
        f[3].as_bytes(),
        c,
        f[4].as_bytes(),
        c,
        f[5].as_bytes(),
        c,
        f[6].as_bytes(),
        c,
        f[7].as_bytes(),
    ]
}

/// Checks one item's signature against every key.
fn verify_item(keys: &[HmacSha256], item: &Item<'_>) -> Result<(), VerifyError> {
    let signature = item
        .additional_data
        .as_ref()
        .and_then(|data| data.hmac_signature.as_deref())
        .filter(|signature| !signature.is_empty())
        .ok_or(VerifyError::MissingHeader(SIGNATURE_FIELD))?;
    let candidates = Candidates::single(Encoding::Base64, signature, 32, SIGNATURE_FIELD)?;
    let fields = item.signed_fields();
    if any_key_matches(keys, &signed_message(&fields), &candidates) {
        Ok(())
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// The forwarded body of one item (see the module documentation for the shape).
fn item_body(live: Option<&RawValue>, item: &RawValue) -> Bytes {
    const WRAPPER_LEN: usize = 64;
    let mut out = Vec::with_capacity(item.get().len() + WRAPPER_LEN);
    out.push(b'{');
    if let Some(live) = live {
        out.extend_from_slice(b"\"live\":");
        out.extend_from_slice(live.get().as_bytes());
        out.push(b',');
    }
    out.extend_from_slice(b"\"notificationItems\":[{\"NotificationRequestItem\":");
    out.extend_from_slice(item.get().as_bytes());
    out.extend_from_slice(b"}]}");
    Bytes::from(out)
}

impl Adyen {
    /// The checks on the unsigned batch itself, made before any MAC is computed: the number of
    /// items, and a `live` that is `"true"` or `"false"` (it is copied into every item's body).
    fn check_shape(&self, batch: &Batch<'_>) -> Result<(), VerifyError> {
        if batch.items.len() > self.max_items {
            return Err(VerifyError::Malformed(
                "Adyen batch with more items than max_batch_items",
            ));
        }
        match batch.live.map(RawValue::get) {
            None | Some(r#""true""# | r#""false""#) => Ok(()),
            Some(_) => Err(VerifyError::Malformed(
                "Adyen batch whose live is not \"true\" or \"false\"",
            )),
        }
    }
}

impl Provider for Adyen {
    fn name(&self) -> &'static str {
        "adyen"
    }

    fn verify(&self, request: &RawRequest<'_>) -> Result<Verified, VerifyError> {
        // The signatures live in the body, so it has to be parsed before anything is verified. A
        // body we cannot read carries no signature we can check: that is a signature failure
        // (401), never `Malformed` (400), which is reserved for authenticated requests.
        let batch: Batch<'_> = serde_json::from_slice(request.body)
            .map_err(|_| VerifyError::MissingHeader(SIGNATURE_FIELD))?;
        if batch.items.is_empty() {
            return Err(VerifyError::MissingHeader(SIGNATURE_FIELD));
        }
        self.check_shape(&batch)?;
        let mut items = Vec::with_capacity(batch.items.len());
        for wrapper in &batch.items {
            let item: Item<'_> = serde_json::from_str(wrapper.item.get())
                .map_err(|_| VerifyError::GarbledHeader(SIGNATURE_FIELD))?;
            verify_item(&self.keys, &item)?;
            item.check_framing()?;
            items.push(item);
        }

        let mut events = Vec::with_capacity(items.len());
        for (item, wrapper) in items.iter().zip(&batch.items) {
            let [psp, _, merchant, _, _, _, code, success] = item.signed_fields();
            if psp.is_empty() || merchant.is_empty() || code.is_empty() {
                return Err(VerifyError::Malformed(
                    "Adyen item without pspReference, merchantAccountCode or eventCode",
                ));
            }
            let id = format!("{merchant}:{psp}:{code}:{success}");
            let body = item_body(batch.live, wrapper.item);
            events.push(VerifiedEvent::new(id, code, body)?);
        }
        Ok(Verified::Events(events))
    }

    fn ack(&self) -> Ack {
        Ack {
            content_type: "text/plain",
            body: "[accepted]",
        }
    }

    /// Adyen signs inside the body, so there is no signature header: [`Provider::sign_body`]
    /// puts the signatures into the body.
    fn sign(&self, _body: &[u8], _options: &SignOptions) -> Vec<(String, String)> {
        vec![("Content-Type".to_owned(), "application/json".to_owned())]
    }

    /// Sets `additionalData.hmacSignature` of every item (replacing any signature already there,
    /// adding `additionalData` where an item has none) and keeps every other byte of the body.
    fn sign_body(&self, body: &[u8], _options: &SignOptions) -> Result<Option<Vec<u8>>, SignError> {
        let not_a_batch = |e: &dyn std::fmt::Display| {
            SignError(format!(
                "the body is not an Adyen notification (a JSON object with \"notificationItems\": [{{\"NotificationRequestItem\": {{…}}}}, …]): {e}"
            ))
        };
        let text = std::str::from_utf8(body).map_err(|e| not_a_batch(&e))?;
        let batch: Batch<'_> = serde_json::from_str(text).map_err(|e| not_a_batch(&e))?;
        if batch.items.is_empty() {
            return Err(not_a_batch(&"notificationItems is empty"));
        }
        let mut edits = Edits::new(text);
        for (i, wrapper) in batch.items.iter().enumerate() {
            let in_item = |e: &dyn std::fmt::Display| {
                SignError(format!(
                    "notificationItems[{i}].NotificationRequestItem: {e}"
                ))
            };
            let item: Item<'_> =
                serde_json::from_str(wrapper.item.get()).map_err(|e| in_item(&e))?;
            let fields = item.signed_fields();
            let signature = base64(&tag(&self.keys[0], &signed_message(&fields)));
            let signature = serde_json::to_string(&signature).expect("a string serializes");
            let members = Members::of(wrapper.item).map_err(|e| in_item(&e))?;
            match members.get("additionalData").map_err(|e| in_item(&e))? {
                Some(data) if data.get().starts_with('{') => edits
                    .set(data, "hmacSignature", signature)
                    .map_err(|e| in_item(&e))?,
                // `"additionalData": null`
                Some(data) => edits.replace(data, format!("{{\"hmacSignature\":{signature}}}")),
                None => edits
                    .set(
                        wrapper.item,
                        "additionalData",
                        format!("{{\"hmacSignature\":{signature}}}"),
                    )
                    .map_err(|e| in_item(&e))?,
            }
        }
        Ok(Some(edits.apply()))
    }
}
