//! Signatures taken from a request: decoded from hex or base64 into fixed buffers for comparison.
//!
//! Verification runs for every request, so nothing here allocates: every signature of a header is
//! decoded into a stack array of `MAX_SIGNATURES` slots, and text that cannot be a MAC of the
//! scheme's length is refused before any MAC is computed.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::VerifyError;

/// Most signatures of an accepted scheme we look at in one header. Real senders put one per live
/// secret (two or three during a rotation); the cap keeps a forged header with thousands of
/// entries from costing thousands of MAC computations.
pub(crate) const MAX_SIGNATURES: usize = 16;

/// Longest tag any supported algorithm produces (SHA-512).
const MAX_TAG_LEN: usize = 64;

/// Longest base64 text that can hold `MAX_TAG_LEN` bytes (88 characters, padded).
const MAX_BASE64_LEN: usize = MAX_TAG_LEN.div_ceil(3) * 4;

/// Signatures taken from a request, decoded, waiting to be compared with the expected tags.
pub(crate) struct Candidates {
    tags: [[u8; MAX_TAG_LEN]; MAX_SIGNATURES],
    count: usize,
    tag_len: usize,
}

/// How a scheme writes its MACs as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Hex digits; either case is read, lowercase is written.
    Hex,
    /// Standard-alphabet base64; padded or not is read, padded is written.
    Base64,
}

impl Encoding {
    /// `tag` as this encoding writes it, for `sign`.
    pub(crate) fn encode(self, tag: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(tag),
            Encoding::Base64 => base64(tag),
        }
    }
}

/// Why a signature could not be taken: the header it came from is then garbled.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unusable;

impl Candidates {
    /// An empty set for tags of `tag_len` bytes (32 for SHA-256).
    pub(crate) fn new(tag_len: usize) -> Self {
        debug_assert!(tag_len <= MAX_TAG_LEN);
        Self {
            tags: [[0; MAX_TAG_LEN]; MAX_SIGNATURES],
            count: 0,
            tag_len,
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a hex signature (either case). Wrong length, bad digits or too many: `Unusable`.
    pub(crate) fn push_hex(&mut self, text: &str) -> Result<(), Unusable> {
        let slot = self.next_slot()?;
        decode_hex(text.as_bytes(), slot)?;
        self.count += 1;
        Ok(())
    }

    /// Adds a standard-alphabet base64 signature, padded or not.
    pub(crate) fn push_base64(&mut self, text: &str) -> Result<(), Unusable> {
        let tag_len = self.tag_len;
        let slot = self.next_slot()?;
        if text.len() > MAX_BASE64_LEN {
            return Err(Unusable);
        }
        let mut buffer = [0u8; MAX_TAG_LEN + 3];
        let len = BASE64_LENIENT
            .decode_slice(text, &mut buffer)
            .map_err(|_| Unusable)?;
        if len != tag_len {
            return Err(Unusable);
        }
        slot.copy_from_slice(&buffer[..len]);
        self.count += 1;
        Ok(())
    }

    /// Adds a signature written in `encoding`.
    pub(crate) fn push(&mut self, encoding: Encoding, text: &str) -> Result<(), Unusable> {
        match encoding {
            Encoding::Hex => self.push_hex(text),
            Encoding::Base64 => self.push_base64(text),
        }
    }

    /// The one signature of a scheme that sends a single MAC of `tag_len` bytes, read from
    /// `header` (named in the error when the text is not such a MAC).
    pub(crate) fn single(
        encoding: Encoding,
        text: &str,
        tag_len: usize,
        header: &'static str,
    ) -> Result<Self, VerifyError> {
        let mut candidates = Self::new(tag_len);
        candidates
            .push(encoding, text)
            .map_err(|_| VerifyError::GarbledHeader(header))?;
        Ok(candidates)
    }

    fn next_slot(&mut self) -> Result<&mut [u8], Unusable> {
        let tag_len = self.tag_len;
        self.tags
            .get_mut(self.count)
            .map(|tag| &mut tag[..tag_len])
            .ok_or(Unusable)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.tags[..self.count]
            .iter()
            .map(|tag| &tag[..self.tag_len])
    }
}

/// A value no hex digit has (bit 4), in [`HEX_VALUES`] for every byte that is not one.
const NOT_HEX: u8 = 0x10;

/// Each byte's value as a hex digit of either case, or [`NOT_HEX`].
const HEX_VALUES: [u8; 256] = {
    let mut values = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        values[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        values[b'a' as usize + i] = 10 + i as u8;
        values[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    values
};

/// Decodes `text`, exactly twice as long as `out`, into `out`: a table lookup per digit and one
/// check at the end. A signature's digits are random, so the usual range tests per digit
/// (`hex::decode_to_slice`) mispredicted a branch on about every other digit.
fn decode_hex(text: &[u8], out: &mut [u8]) -> Result<(), Unusable> {
    if text.len() != 2 * out.len() {
        return Err(Unusable);
    }
    let mut seen = 0;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (
            HEX_VALUES[usize::from(pair[0])],
            HEX_VALUES[usize::from(pair[1])],
        );
        seen |= high | low;
        *byte = high << 4 | low;
    }
    if seen & NOT_HEX == 0 {
        Ok(())
    } else {
        Err(Unusable)
    }
}

/// Standard alphabet that accepts padded and unpadded input alike (senders differ).
pub(crate) use crate::signing::BASE64_LENIENT;

/// Base64 (standard alphabet, padded) of a tag, for `sign`.
pub(crate) fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_reject_wrong_lengths_and_cap_the_count() {
        let mut c = Candidates::new(32);
        assert_eq!(c.push_hex("abcd"), Err(Unusable));
        assert_eq!(c.push_hex(&"zz".repeat(32)), Err(Unusable));
        assert_eq!(c.push_base64("AAAA"), Err(Unusable));
        assert!(c.is_empty());
        for _ in 0..MAX_SIGNATURES {
            c.push_hex(&"AB".repeat(32)).unwrap();
        }
        assert_eq!(c.push_hex(&"ab".repeat(32)), Err(Unusable));
        assert_eq!(c.push_base64(&base64(&[0; 32])), Err(Unusable));
    }

    #[test]
    fn hex_decodes_as_the_hex_crate_does_for_every_pair_of_bytes() {
        for high in 0..=255u8 {
            for low in 0..=255u8 {
                let text = [high, low];
                let (mut ours, mut theirs) = ([0u8; 1], [0u8; 1]);
                let decoded = decode_hex(&text, &mut ours);
                let expected = hex::decode_to_slice(text, &mut theirs);
                assert_eq!(decoded.is_ok(), expected.is_ok(), "{text:?}");
                if decoded.is_ok() {
                    assert_eq!(ours, theirs, "{text:?}");
                }
            }
        }
        let mut out = [0u8; 2];
        assert_eq!(decode_hex(b"abc", &mut out), Err(Unusable));
        assert_eq!(decode_hex(b"abcdef", &mut out), Err(Unusable));
        assert_eq!(decode_hex(b"00fF", &mut out), Ok(()));
        assert_eq!(out, [0x00, 0xff]);
        // A bad digit anywhere, first or last, refuses the whole text.
        assert_eq!(decode_hex(b"g0ff", &mut out), Err(Unusable));
        assert_eq!(decode_hex(b"00f\x00", &mut out), Err(Unusable));
    }

    #[test]
    fn base64_signatures_decode_padded_or_not() {
        let mut c = Candidates::new(32);
        let padded = base64(&[7; 32]);
        c.push_base64(&padded).unwrap();
        c.push_base64(padded.trim_end_matches('=')).unwrap();
        assert!(c.iter().all(|tag| tag == [7; 32]));
        assert_eq!(c.push_base64(&"A".repeat(200)), Err(Unusable));
    }

    #[test]
    fn a_single_signature_round_trips_through_its_encoding_or_names_the_header() {
        for encoding in [Encoding::Hex, Encoding::Base64] {
            let text = encoding.encode(&[5; 32]);
            let c = Candidates::single(encoding, &text, 32, "x-sig").unwrap();
            assert!(c.iter().eq([&[5u8; 32][..]]), "{encoding:?}");
            assert_eq!(
                Candidates::single(encoding, &text, 20, "x-sig").err(),
                Some(VerifyError::GarbledHeader("x-sig"))
            );
        }
        assert_eq!(Encoding::Hex.encode(&[0xab]), "ab");
    }
}
