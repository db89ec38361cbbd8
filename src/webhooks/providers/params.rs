//! Signature headers written as `key=value` items: a signed timestamp and one or more hex MACs.
//!
//! Stripe sends `t=<unix>,v1=<hex>[,v1=…]` over `"<t>.<raw body>"`, and Paddle
//! `ts=<unix>;h1=<hex>[;h1=…]` over `"<ts>:<raw body>"`: one scheme with other names, another
//! separator and another joiner, so [`ParamsShape`] reads, checks and writes both. Parsing rules:
//! - every item must be `key=value` (spaces around either side are ignored);
//! - exactly one timestamp item, plain unix-seconds digits; a second one would make "the" signed
//!   string ambiguous;
//! - every signature item must be hex of the MAC's length (at most `MAX_SIGNATURES` of them);
//! - items with any other key (Stripe's `v0`, a future scheme) are skipped, so a header with no
//!   signature we accept is well formed, and the caller answers it as a bad signature.
//!
//! Every violation is the same `GarbledHeader` naming the header.

use super::signatures::Candidates;
use super::signing::{parse_unix, Keyed};
use super::{header, Named, RawRequest, VerifyError};

/// How one provider writes its header.
pub(crate) struct ParamsShape {
    /// The header, named once (its text, as it appears in errors, lowercase: `stripe-signature`).
    pub header: Named,
    /// What separates the items (`,` for Stripe, `;` for Paddle).
    pub separator: char,
    /// The key of the timestamp item (`t`, `ts`).
    pub timestamp: &'static str,
    /// The key of the signature items (`v1`, `h1`).
    pub signature: &'static str,
    /// What the signed string puts between the timestamp and the raw body (`.`, `:`).
    pub joiner: &'static [u8],
}

/// A parsed header: the timestamp exactly as sent (it is part of the signed bytes), its value, and
/// the signatures.
pub(crate) struct SignedParams<'a> {
    pub timestamp: &'a str,
    pub unix: i64,
    pub signatures: Candidates,
}

impl ParamsShape {
    /// Checks a request's header against `keyed`: some signature must be the HMAC-SHA256 of
    /// `<timestamp><joiner><raw body>` under some key, and only then must the timestamp be within
    /// the tolerance. A header with no signature item we accept is a bad signature. Gives the
    /// SHA-256 of the concatenated `payload` parts (what the payload's fingerprint covers: the raw
    /// body, or the body with a field zeroed) from the same pass.
    pub(crate) fn verify_digesting(
        &self,
        keyed: &Keyed,
        request: &RawRequest<'_>,
        payload: &[&[u8]],
    ) -> Result<[u8; 32], VerifyError> {
        let parsed = self.parse(header(request.headers, &self.header)?, 32)?;
        let message: [&[u8]; 3] = [parsed.timestamp.as_bytes(), self.joiner, request.body];
        keyed.verify_digesting(&message, payload, &parsed.signatures, parsed.unix, request)
    }

    /// The header value that signs `body` at `now_unix` with the first secret, as the provider
    /// writes it (`t=<unix>,v1=<hex>`).
    pub(crate) fn sign(&self, keyed: &Keyed, body: &[u8], now_unix: i64) -> String {
        let timestamp = now_unix.to_string();
        let mac = keyed.sign(&[timestamp.as_bytes(), self.joiner, body]);
        format!(
            "{}={timestamp}{}{}={}",
            self.timestamp,
            self.separator,
            self.signature,
            hex::encode(mac)
        )
    }

    /// Parses `value` for tags of `tag_len` bytes (32 for HMAC-SHA256).
    pub(crate) fn parse<'a>(
        &self,
        value: &'a str,
        tag_len: usize,
    ) -> Result<SignedParams<'a>, VerifyError> {
        let garbled = || VerifyError::GarbledHeader(self.header.text);
        let mut timestamp = None;
        let mut signatures = Candidates::new(tag_len);
        for item in value.split(self.separator) {
            let (key, value) = item.split_once('=').ok_or_else(garbled)?;
            let (key, value) = (key.trim(), value.trim());
            if key == self.timestamp {
                if timestamp.replace(value).is_some() {
                    return Err(garbled());
                }
            } else if key == self.signature {
                signatures.push_hex(value).map_err(|_| garbled())?;
            }
        }
        let timestamp = timestamp.ok_or_else(garbled)?;
        let unix = parse_unix(timestamp).ok_or_else(garbled)?;
        Ok(SignedParams {
            timestamp,
            unix,
            signatures,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use serde_json::json;
    use sha2::Digest as _;

    use super::super::secrets;
    use super::super::tests::support::{headers, settings};
    use super::*;

    static STRIPE: ParamsShape = ParamsShape {
        header: Named::new("stripe-signature"),
        separator: ',',
        timestamp: "t",
        signature: "v1",
        joiner: b".",
    };

    static PADDLE: ParamsShape = ParamsShape {
        header: Named::new("paddle-signature"),
        separator: ';',
        timestamp: "ts",
        signature: "h1",
        joiner: b":",
    };

    #[test]
    fn reads_the_timestamp_as_sent_and_every_signature() {
        let a = "ab".repeat(32);
        let b = "CD".repeat(32);
        let value = format!("t=1700000000, v1={a} ,v0={b},v1={b}");
        let parsed = STRIPE.parse(&value, 32).unwrap();
        assert_eq!(
            (parsed.timestamp, parsed.unix),
            ("1700000000", 1_700_000_000)
        );
        assert!(!parsed.signatures.is_empty());
        let value = format!("ts=17;h1={a}");
        let parsed = PADDLE.parse(&value, 32).unwrap();
        assert_eq!((parsed.timestamp, parsed.unix), ("17", 17));
        // Only other schemes: well formed, nothing to check.
        let value = format!("ts=17;h2={a}");
        let parsed = PADDLE.parse(&value, 32).unwrap();
        assert!(parsed.signatures.is_empty());
    }

    #[test]
    fn anything_else_is_a_garbled_header_naming_it() {
        let sig = "ab".repeat(32);
        for value in [
            String::new(),
            "nonsense".to_owned(),
            format!("v1={sig}"),
            format!("t=soon,v1={sig}"),
            format!("t=-5,v1={sig}"),
            format!("t=1,t=1,v1={sig}"),
            "t=1,v1=xyz".to_owned(),
            format!("t=1,v1={sig},junk"),
            // The other provider's separator does not split items.
            format!("t=1;v1={sig}"),
            // More signatures than anyone sends is a forged header, not a slow one.
            format!("t=1{}", format!(",v1={sig}").repeat(17)),
        ] {
            assert_eq!(
                STRIPE.parse(&value, 32).err(),
                Some(VerifyError::GarbledHeader("stripe-signature")),
                "{value:?}"
            );
        }
        assert_eq!(
            PADDLE.parse(&format!("ts=1,h1={sig}"), 32).err(),
            Some(VerifyError::GarbledHeader("paddle-signature"))
        );
    }

    #[test]
    fn what_sign_writes_verify_accepts_until_the_tolerance_runs_out() {
        let source = settings("stripe", &["whsec_k"], json!({}));
        let keyed =
            Keyed::from_settings("s", &source, secrets::raw, Duration::from_secs(300)).unwrap();
        let body = Bytes::from_static(b"{}");
        for (shape, name, prefix) in [
            (&STRIPE, "Stripe-Signature", "t=17,v1="),
            (&PADDLE, "Paddle-Signature", "ts=17;h1="),
        ] {
            let value = shape.sign(&keyed, &body, 17);
            assert!(value.starts_with(prefix), "{value}");
            let map = headers(&[(name, value.as_bytes())]);
            let at = |now_unix| RawRequest {
                headers: &map,
                body: &body,
                now_unix,
            };
            let digest: [u8; 32] = sha2::Sha256::digest(&body).into();
            let verify =
                |request: &RawRequest<'_>| shape.verify_digesting(&keyed, request, &[&body]);
            assert_eq!(verify(&at(317)), Ok(digest));
            assert_eq!(verify(&at(318)), Err(VerifyError::StaleTimestamp));
            let other = Bytes::from_static(b"{ }");
            let tampered = RawRequest {
                body: &other,
                ..at(17)
            };
            assert_eq!(verify(&tampered), Err(VerifyError::BadSignature));
        }
    }
}
