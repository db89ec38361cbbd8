//! Byte-preserving edits of JSON documents: for the `sign_body` of schemes that sign inside the
//! body, and for the payload fingerprints that leave out a field a provider changes between attempts.
//!
//! Signing a body must change only what the scheme needs: Adyen forwards each item's bytes as they
//! were sent, and someone who signs a pretty-printed file expects it back pretty-printed. So rather
//! than parse and re-serialise, these helpers find a member's value in the original text (serde_json's
//! `RawValue` borrows from it) and replace, or insert, just those bytes.

use std::fmt;
use std::ops::Range;

use memchr::memmem;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{SignError, VerifiedEvent};

/// The members of one JSON object, in document order, each value borrowed from the text.
pub(crate) struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The members of `object`, which must be a JSON object.
    pub(crate) fn of(object: &'a RawValue) -> Result<Self, SignError> {
        serde_json::from_str(object.get())
            .map_err(|e| SignError(format!("expected a JSON object: {e}")))
    }

    /// The value of `key`, if the object has it; a key given twice is an error (whichever copy a
    /// reader takes, signing one of them would be wrong for the other).
    pub(crate) fn get(&self, key: &str) -> Result<Option<&'a RawValue>, SignError> {
        let mut found = self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| *v);
        match (found.next(), found.next()) {
            (Some(_), Some(_)) => Err(SignError(format!("the key {key:?} appears twice"))),
            (value, _) => Ok(value),
        }
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// `doc` with the bytes of `part` (a value parsed out of `doc`) replaced by `0`: what a payload
/// fingerprint covers when a provider changes that field between attempts of one event.
pub(crate) fn zeroed(doc: &[u8], part: &RawValue) -> Vec<u8> {
    let span = span_of(doc, part);
    let mut out = Vec::with_capacity(doc.len());
    out.extend_from_slice(&doc[..span.start]);
    out.push(b'0');
    out.extend_from_slice(&doc[span.end..]);
    out
}

/// Where in `doc` the bytes of `part` (a value parsed out of `doc`) are.
fn span_of(doc: &[u8], part: &RawValue) -> Range<usize> {
    let text = part.get();
    let start = (text.as_ptr() as usize).wrapping_sub(doc.as_ptr() as usize);
    assert!(
        start <= doc.len() && text.len() <= doc.len() - start,
        "the value was not parsed out of this document"
    );
    start..start + text.len()
}

/// A top-level member that a scheme's fingerprint zeroes (Stripe's `pending_webhooks`, Linear's
/// `webhookTimestamp`), and the search that finds its name in a raw body, made once per provider.
pub(crate) struct ZeroedMember(memmem::Finder<'static>);

impl ZeroedMember {
    /// `key`: the member's name, as it appears between its quotes.
    pub(crate) fn new(key: &str) -> Self {
        Self(memmem::Finder::new(format!("\"{key}\"").as_bytes()).into_owned())
    }

    /// The guess at where this member's value is in `doc`.
    pub(crate) fn guess<'a>(&self, doc: &'a [u8]) -> ZeroedGuess<'a> {
        ZeroedGuess::new(doc, &self.0)
    }
}

/// What [`zeroed`] will make of a body once it is parsed, guessed from its raw bytes before
/// that: the signature's HMAC and the SHA-256 of the fingerprint's input then run in one pass
/// (`Keyed::verify_digesting`) for a scheme that zeroes a field its provider changes between
/// attempts (Stripe's `pending_webhooks`, Linear's `webhookTimestamp`). The guess is the number
/// after the last `"<key>":` of the text. It counts only if the parse then finds the member's
/// value at exactly those bytes ([`ZeroedGuess::settle`]): a wrong guess costs a second pass
/// over the body downstream, never a wrong fingerprint. Nothing here reads more than the text.
pub(crate) struct ZeroedGuess<'a> {
    doc: &'a [u8],
    span: Option<Range<usize>>,
}

impl<'a> ZeroedGuess<'a> {
    /// `quoted_key`: a finder of the member's name with its quotes, as it appears in the text.
    /// It searches forwards with SIMD, where a search from the end would go byte by byte.
    fn new(doc: &'a [u8], quoted_key: &memmem::Finder<'_>) -> Self {
        let span = quoted_key.find_iter(doc).last().and_then(|at| {
            let quoted_key = quoted_key.needle();
            let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
            let mut i = at + quoted_key.len();
            i += doc[i..].iter().take_while(|b| blank(b)).count();
            (doc.get(i) == Some(&b':')).then_some(())?;
            i += 1;
            i += doc[i..].iter().take_while(|b| blank(b)).count();
            let number = doc[i..]
                .iter()
                .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .count();
            (number > 0).then_some(i..i + number)
        });
        Self { doc, span }
    }

    /// The guessed input in parts: the text before the value, `0`, the text after it; or, with
    /// no guess, the text as it is.
    pub(crate) fn parts(&self) -> [&'a [u8]; 3] {
        match &self.span {
            Some(span) => [&self.doc[..span.start], b"0", &self.doc[span.end..]],
            None => [self.doc, b"", b""],
        }
    }

    /// `event` with what its fingerprint covers (`doc` with `value` zeroed, or with no such
    /// member `doc` itself), and, when the guess was that, `digest`: the SHA-256 of
    /// [`ZeroedGuess::parts`].
    pub(crate) fn settle(
        &self,
        event: VerifiedEvent,
        value: Option<&RawValue>,
        digest: &[u8; 32],
    ) -> VerifiedEvent {
        match (value, &self.span) {
            (Some(value), Some(span)) if span_of(self.doc, value) == *span => event
                .with_fingerprint_input(zeroed(self.doc, value))
                .with_payload_digest(digest),
            (Some(value), _) => event.with_fingerprint_input(zeroed(self.doc, value)),
            (None, None) => event.with_payload_digest(digest),
            (None, Some(_)) => event,
        }
    }
}

/// Replacements and insertions in one document, applied together at the end.
pub(crate) struct Edits<'a> {
    doc: &'a str,
    edits: Vec<(Range<usize>, String)>,
}

impl<'a> Edits<'a> {
    pub(crate) fn new(doc: &'a str) -> Self {
        Self {
            doc,
            edits: Vec::new(),
        }
    }

    /// Where `part`, a value parsed out of the document, sits in it.
    fn range_of(&self, part: &RawValue) -> Range<usize> {
        let text = part.get();
        let start = (text.as_ptr() as usize).wrapping_sub(self.doc.as_ptr() as usize);
        assert!(
            start <= self.doc.len() && text.len() <= self.doc.len() - start,
            "the value was not parsed out of this document"
        );
        start..start + text.len()
    }

    /// Replaces the bytes of `part` with the JSON text `with`.
    pub(crate) fn replace(&mut self, part: &RawValue, with: String) {
        let range = self.range_of(part);
        self.edits.push((range, with));
    }

    /// Sets `key` of `object` to the JSON text `value`: the old value's bytes are replaced, or the
    /// member is appended after the object's last member.
    pub(crate) fn set(
        &mut self,
        object: &'a RawValue,
        key: &str,
        value: String,
    ) -> Result<(), SignError> {
        let members = Members::of(object)?;
        if let Some(old) = members.get(key)? {
            self.replace(old, value);
            return Ok(());
        }
        let name = serde_json::to_string(key).expect("a string serializes");
        let (at, text) = match members.0.last() {
            Some((_, last)) => (self.range_of(last).end, format!(",{name}:{value}")),
            // An empty object: right after its `{`.
            None => (self.range_of(object).start + 1, format!("{name}:{value}")),
        };
        self.edits.push((at..at, text));
        Ok(())
    }

    /// The edited document.
    pub(crate) fn apply(mut self) -> Vec<u8> {
        self.edits
            .sort_by_key(|(range, _)| (range.start, range.end));
        let mut out = Vec::with_capacity(self.doc.len() + 64 * self.edits.len());
        let mut at = 0;
        for (range, text) in &self.edits {
            assert!(range.start >= at, "overlapping edits");
            out.extend_from_slice(&self.doc.as_bytes()[at..range.start]);
            out.extend_from_slice(text.as_bytes());
            at = range.end;
        }
        out.extend_from_slice(&self.doc.as_bytes()[at..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(doc: &str, key: &str, value: &str) -> String {
        let object: &RawValue = serde_json::from_str(doc).unwrap();
        let mut edits = Edits::new(doc);
        edits.set(object, key, value.to_owned()).unwrap();
        String::from_utf8(edits.apply()).unwrap()
    }

    #[test]
    fn replaces_or_appends_and_keeps_every_other_byte() {
        assert_eq!(set(r#"{"a": 1, "b" :2}"#, "b", "3"), r#"{"a": 1, "b" :3}"#);
        assert_eq!(
            set("{\n  \"a\": \"x\\u00e9\"\n}\n", "b", "true"),
            "{\n  \"a\": \"x\\u00e9\",\"b\":true\n}\n"
        );
        assert_eq!(set(" { } ", "k\"", "null"), r#" {"k\"":null } "#);
        // A key spelled with an escape is the same key.
        assert_eq!(set(r#"{"\u0062":1}"#, "b", "2"), r#"{"\u0062":2}"#);
    }

    #[test]
    fn nested_edits_apply_together() {
        let doc = r#"{"items":[{"x":{"s":"old"}},{"y":1}],"z":0}"#;
        #[derive(Deserialize)]
        struct Doc<'a> {
            #[serde(borrow)]
            items: Vec<&'a RawValue>,
        }
        let parsed: Doc<'_> = serde_json::from_str(doc).unwrap();
        let mut edits = Edits::new(doc);
        let x = Members::of(parsed.items[0])
            .unwrap()
            .get("x")
            .unwrap()
            .unwrap();
        edits.set(x, "s", "\"new\"".to_owned()).unwrap();
        edits.set(parsed.items[1], "x", "{}".to_owned()).unwrap();
        assert_eq!(
            String::from_utf8(edits.apply()).unwrap(),
            r#"{"items":[{"x":{"s":"new"}},{"y":1,"x":{}}],"z":0}"#
        );
    }

    /// What [`ZeroedGuess::settle`] leaves on an event for `doc` and its top-level `key`: the
    /// fingerprint's input, and whether it carries a digest (checked to be that input's).
    fn settled(doc: &str, key: &str) -> (String, bool) {
        use sha2::Digest as _;
        let object: &RawValue = serde_json::from_str(doc).unwrap();
        let value = Members::of(object).unwrap().get(key).unwrap();
        let guess = ZeroedMember::new(key).guess(doc.as_bytes());
        let digest: [u8; 32] = sha2::Sha256::digest(guess.parts().concat()).into();
        let event = VerifiedEvent::new("evt_1", "t", bytes::Bytes::from(doc.to_owned())).unwrap();
        let event = guess.settle(event, value, &digest);
        let input = String::from_utf8(event.fingerprint_input().to_vec()).unwrap();
        if let Some(carried) = event.payload_digest() {
            assert_eq!(carried[..], sha2::Sha256::digest(&input)[..16], "{doc}");
        }
        (input, event.payload_digest().is_some())
    }

    #[test]
    fn a_member_zeroed_before_the_parse_is_hashed_in_the_signature_s_pass() {
        let zeroed = |doc: &str, expected: &str| {
            assert_eq!(settled(doc, "n"), (expected.to_owned(), true), "{doc}");
        };
        zeroed(r#"{"id":"a","n":3,"z":1}"#, r#"{"id":"a","n":0,"z":1}"#);
        zeroed(r#"{"id":"a","n":12345}"#, r#"{"id":"a","n":0}"#);
        zeroed(
            "{\n  \"n\" :\t -1.5e+3 ,\r\n  \"z\": 1\n}",
            "{\n  \"n\" :\t 0 ,\r\n  \"z\": 1\n}",
        );
        // A nested member of that name before the top-level one: the last one is guessed.
        zeroed(r#"{"d":{"n":7},"n":2}"#, r#"{"d":{"n":7},"n":0}"#);
        // A string that mentions the name: its quotes are escaped, so it is not a member.
        zeroed(r#"{"s":"\"n\":4","n":2}"#, r#"{"s":"\"n\":4","n":0}"#);
        // No such member: the body as it is, hashed in the same pass.
        assert_eq!(
            settled(r#"{"id":"a"}"#, "n"),
            (r#"{"id":"a"}"#.to_owned(), true)
        );
    }

    #[test]
    fn a_wrong_guess_costs_a_second_pass_never_a_wrong_fingerprint() {
        // A nested member after the top-level one: the guess is the nested one's.
        assert_eq!(
            settled(r#"{"n":2,"d":{"n":7}}"#, "n"),
            (r#"{"n":0,"d":{"n":7}}"#.to_owned(), false)
        );
        // Only a nested member: the fingerprint covers the body as sent.
        let nested = r#"{"d":{"n":7}}"#;
        assert_eq!(settled(nested, "n"), (nested.to_owned(), false));
        // A value that is not a number is zeroed all the same, but was not guessed.
        assert_eq!(
            settled(r#"{"n":null,"z":1}"#, "n"),
            (r#"{"n":0,"z":1}"#.to_owned(), false)
        );
        assert_eq!(
            settled(r#"{"n":"5"}"#, "n"),
            (r#"{"n":0}"#.to_owned(), false)
        );
        // The name at the very end of the text, with nothing after it.
        let name = ZeroedMember::new("n");
        for text in [&br#"{"n""#[..], br#"{"n":"#, br#"{"n": "#] {
            assert_eq!(name.guess(text).parts(), [text, b"", b""]);
        }
    }

    #[test]
    fn duplicate_keys_and_non_objects_are_refused() {
        let doc = r#"{"a":1,"a":2}"#;
        let object: &RawValue = serde_json::from_str(doc).unwrap();
        assert!(Edits::new(doc).set(object, "a", "3".to_owned()).is_err());
        let array: &RawValue = serde_json::from_str("[1]").unwrap();
        assert!(Members::of(array).is_err());
    }
}
