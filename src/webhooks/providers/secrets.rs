//! Turning configured secret strings into key bytes: every encoding a provider uses, in one place.
//!
//! Providers disagree on what the configured secret *is*:
//! - [`raw`]: the whole string as UTF-8, prefix included (Stripe's `whsec_…`, Paddle's `pdl_ntf_…`,
//!   GitHub, Slack, Shopify, Square, Linear, GitLab's token, the generic provider);
//! - [`whsec_base64`]: `whsec_` followed by base64 of the key (Standard Webhooks and Svix);
//! - [`hex`]: hex digits of the key (Adyen's HMAC keys).
//!
//! Each decoder returns the problem as text; [`decode`] names the offending list entry with it.
//! The text says what kind of problem it is and where, never which character: the decoders'
//! own error texts quote the offending symbol, which is a piece of the secret.

use crate::config::{ConfigError, SourceSettings, NO_SECRET};

/// One secret's decoder: the key bytes, or what is wrong with the text.
pub(crate) type Decoder = fn(&str) -> Result<Vec<u8>, String>;

/// The key bytes of every secret of a source (`secrets`, then `secrets_files`), which must have
/// at least one; a secret that does not decode is named by its key.
pub(crate) fn decode(
    source: &str,
    settings: &SourceSettings,
    decoder: Decoder,
) -> Result<Vec<Vec<u8>>, ConfigError> {
    let keys = settings
        .all_secrets()
        .enumerate()
        .map(|(i, secret)| {
            decoder(secret.expose())
                .map_err(|problem| ConfigError::invalid(settings.secret_key(source, i), problem))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(ConfigError::invalid(
            format!("sources.{source}.secrets"),
            NO_SECRET,
        ));
    }
    Ok(keys)
}

/// The secret's UTF-8 bytes, as they are.
pub(crate) fn raw(secret: &str) -> Result<Vec<u8>, String> {
    Ok(secret.as_bytes().to_vec())
}

/// `whsec_<base64>` → key bytes (shared with the relay's signer).
pub(crate) use crate::signing::whsec_base64;

/// Hex digits (either case, surrounding spaces ignored) → key bytes. Adyen shows its HMAC keys so
/// (64 digits for the 32-byte keys it generates).
pub(crate) fn hex(secret: &str) -> Result<Vec<u8>, String> {
    let key = ::hex::decode(secret.trim()).map_err(|e| {
        let problem = match e {
            ::hex::FromHexError::InvalidHexCharacter { index, .. } => {
                format!("a non-hex character at {index}")
            }
            ::hex::FromHexError::OddLength | ::hex::FromHexError::InvalidStringLength => {
                "an odd number of digits".to_owned()
            }
        };
        format!("is not a hex HMAC key (it has {problem})")
    })?;
    if key.is_empty() {
        return Err("is an empty HMAC key".to_owned());
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::support::settings;
    use super::*;

    #[test]
    fn each_encoding_decodes_its_own_form() {
        assert_eq!(raw("whsec_abc").unwrap(), b"whsec_abc");
        assert_eq!(whsec_base64("whsec_AQID").unwrap(), [1, 2, 3]);
        // The prefix and the padding are optional.
        assert_eq!(whsec_base64("AQI").unwrap(), [1, 2]);
        assert_eq!(hex(" 0aFf ").unwrap(), [0x0a, 0xff]);
    }

    #[test]
    fn unusable_secrets_say_why() {
        assert!(whsec_base64("whsec_not*base64")
            .unwrap_err()
            .contains("base64"));
        assert_eq!(
            whsec_base64("whsec_").unwrap_err(),
            "decodes to an empty key"
        );
        assert!(hex("xyz").unwrap_err().contains("hex"));
        assert_eq!(hex("").unwrap_err(), "is an empty HMAC key");
    }

    #[test]
    fn decoding_errors_never_quote_the_secret() {
        // The decoders' own texts name the offending symbol ("Invalid character 'Z'", "Invalid
        // symbol 42"): the messages must say where, never what.
        for (secret, decoder, problem) in [
            (
                "whsec_Zq7*Zq7",
                whsec_base64 as Decoder,
                "a non-base64 character at 3",
            ),
            (
                "whsec_QUJDRA=Z",
                whsec_base64,
                "a non-base64 character at 6",
            ),
            (
                "whsec_Zq7",
                whsec_base64,
                "a last character at 2 that leaves bits over",
            ),
            ("whsec_Z", whsec_base64, "a length no base64 text has"),
            ("0aZq", hex, "a non-hex character at 2"),
            ("0aZ", hex, "an odd number of digits"),
        ] {
            let shown = decoder(secret).unwrap_err();
            assert!(
                shown.ends_with(&format!("(it has {problem})")),
                "{secret:?}: {shown}"
            );
            assert!(
                !shown.contains('Z') && !shown.contains("90"),
                "{secret:?}: {shown}"
            );
        }
    }

    #[test]
    fn errors_name_the_list_entry_and_an_empty_list() {
        let two = settings("adyen", &["0a0b", "nothex"], json!({}));
        let error = decode("ady", &two, hex).unwrap_err().to_string();
        assert!(error.starts_with("sources.ady.secrets[1]: "), "{error}");
        let none = settings("adyen", &[], json!({}));
        let error = decode("ady", &none, hex).unwrap_err().to_string();
        assert_eq!(error, format!("sources.ady.secrets: {NO_SECRET}"));
    }

    #[test]
    fn a_file_secret_that_does_not_decode_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("adyen");
        let read = |text: &str| {
            std::fs::write(&path, text).unwrap();
            vec![crate::config::SecretFile::read(path.to_str().unwrap()).unwrap()]
        };
        let mut source = settings("adyen", &["0c0d"], json!({}));
        source.secrets_files = read("0a0b\nnothex\n");
        let error = decode("ady", &source, hex).unwrap_err().to_string();
        assert!(
            error.starts_with("sources.ady.secrets_files[0] line 2: "),
            "{error}"
        );
        source.secrets_files = read("0a0b\n0e0f\n");
        assert_eq!(decode("ady", &source, hex).unwrap().len(), 3);
    }
}
