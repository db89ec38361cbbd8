//! Byte-preserving edits of JSON documents, for the `sign_body` of schemes that sign inside the body.
//!
//! Signing a body must change only what the scheme needs: Adyen forwards each item's bytes as they
//! were sent, and someone who signs a pretty-printed file expects it back pretty-printed. So rather
//! than parse and re-serialise, these helpers find a member's value in the original text (serde_json's
//! `RawValue` borrows from it) and replace, or insert, just those bytes.

use std::fmt;
use std::ops::Range;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::SignError;

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
    let text = part.get();
    let start = (text.as_ptr() as usize).wrapping_sub(doc.as_ptr() as usize);
    assert!(
        start <= doc.len() && text.len() <= doc.len() - start,
        "the value was not parsed out of this document"
    );
    let mut out = Vec::with_capacity(doc.len());
    out.extend_from_slice(&doc[..start]);
    out.push(b'0');
    out.extend_from_slice(&doc[start + text.len()..]);
    out
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

    #[test]
    fn duplicate_keys_and_non_objects_are_refused() {
        let doc = r#"{"a":1,"a":2}"#;
        let object: &RawValue = serde_json::from_str(doc).unwrap();
        assert!(Edits::new(doc).set(object, "a", "3".to_owned()).is_err());
        let array: &RawValue = serde_json::from_str("[1]").unwrap();
        assert!(Members::of(array).is_err());
    }
}
