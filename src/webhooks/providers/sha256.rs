//! HMAC-SHA256 keys whose check digests the payload in the same pass.
//!
//! Every request is hashed twice over its body: the signature's HMAC-SHA256, and the SHA-256 of
//! the payload that its dedup record fingerprints (`store::Fingerprint`). On x86-64 both run on
//! the CPU's SHA extensions, whose rounds wait on each other, so that one message leaves the unit
//! idle between them. [`Key::mac_and_digest`] therefore feeds the HMAC's inner hash and the
//! payload's hash through the rounds together, a block of each at a time (`sha256_pair`), and
//! pays for little more than one pass instead of two (`bench/history/2026-12-06-afternoon.md`).
//! Elsewhere, and on CPUs without the extensions, each block goes through `sha2::compress256` in
//! turn.
//!
//! The results are the standard ones, bit for bit: the tests compare them with the `hmac` and
//! `sha2` crates over every length around the block boundaries, split into parts every way.

use sha256_pair::{compress, compress_two, State, BLOCK};

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
const IV: State = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// One HMAC-SHA256 key: the states after its inner and outer pad, each hashed once when the key
/// is made (RFC 2104: a key longer than a block is hashed first). Neither `Clone` nor `Debug`:
/// the states stand for the secret, and are neither copied nor printed.
pub(crate) struct Key {
    inner: State,
    outer: State,
}

impl Key {
    pub(crate) fn new(secret: &[u8]) -> Self {
        let mut key = [0u8; BLOCK];
        if secret.len() > BLOCK {
            key[..32].copy_from_slice(&digest(&[secret]));
        } else {
            key[..secret.len()].copy_from_slice(secret);
        }
        let pad = |byte: u8| {
            let mut block = key;
            block.iter_mut().for_each(|b| *b ^= byte);
            let mut state = IV;
            compress(&mut state, &block);
            state
        };
        Self {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// The MAC of the concatenated `message` parts.
    pub(crate) fn mac(&self, message: &[&[u8]]) -> [u8; 32] {
        let mut inner = self.inner;
        absorb(&mut inner, Blocks::new(message, BLOCK as u64));
        self.finish(&inner)
    }

    /// The MAC of the concatenated `message` parts, and the SHA-256 of the concatenated
    /// `payload` parts, in one pass.
    pub(crate) fn mac_and_digest(
        &self,
        message: &[&[u8]],
        payload: &[&[u8]],
    ) -> ([u8; 32], [u8; 32]) {
        let mut inner = self.inner;
        let mut plain = IV;
        lockstep(
            (&mut inner, Blocks::new(message, BLOCK as u64)),
            (&mut plain, Blocks::new(payload, 0)),
        );
        (self.finish(&inner), bytes_of(&plain))
    }

    /// The outer hash over the inner hash's state.
    fn finish(&self, inner: &State) -> [u8; 32] {
        let mut outer = self.outer;
        let inner = bytes_of(inner);
        let parts: [&[u8]; 1] = [&inner];
        absorb(&mut outer, Blocks::new(&parts, BLOCK as u64));
        bytes_of(&outer)
    }
}

/// The SHA-256 of the concatenated parts.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut state = IV;
    absorb(&mut state, Blocks::new(parts, 0));
    bytes_of(&state)
}

/// Runs a message's blocks through `state`.
fn absorb(state: &mut State, mut blocks: Blocks<'_>) {
    while let Some(run) = blocks.run() {
        compress(state, run);
        let taken = run.len();
        blocks.consume(taken);
    }
}

/// Runs two messages' blocks through their states, a block of each together while both last.
fn lockstep(
    (a, mut a_blocks): (&mut State, Blocks<'_>),
    (b, mut b_blocks): (&mut State, Blocks<'_>),
) {
    loop {
        match (a_blocks.run(), b_blocks.run()) {
            (Some(a_run), Some(b_run)) => {
                let taken = a_run.len().min(b_run.len());
                compress_two(a, &a_run[..taken], b, &b_run[..taken]);
                a_blocks.consume(taken);
                b_blocks.consume(taken);
            }
            (Some(a_run), None) => {
                compress(a, a_run);
                let taken = a_run.len();
                a_blocks.consume(taken);
            }
            (None, Some(b_run)) => {
                compress(b, b_run);
                let taken = b_run.len();
                b_blocks.consume(taken);
            }
            (None, None) => return,
        }
    }
}

/// A message as the compression function reads it, padding and length included: runs of whole
/// blocks read in place from its parts, a block copied together where one spans two parts, and
/// the padded last one or two.
struct Blocks<'a> {
    parts: std::slice::Iter<'a, &'a [u8]>,
    /// What is left of the part being read.
    rest: &'a [u8],
    /// The message's length in bytes so far, counting what was hashed before it (an HMAC pad).
    length: u64,
    /// A block copied together, or the padded tail; `staged[at..ready]` is still to be read.
    staged: [u8; 2 * BLOCK],
    at: usize,
    ready: usize,
    /// Whether the tail has been made (nothing is left after `staged`).
    padded: bool,
    /// Whether the last run handed out was read from `staged` (else from `rest`).
    from_staged: bool,
}

impl<'a> Blocks<'a> {
    fn new(parts: &'a [&'a [u8]], already: u64) -> Self {
        Self {
            parts: parts.iter(),
            rest: &[],
            length: already,
            staged: [0; 2 * BLOCK],
            at: 0,
            ready: 0,
            padded: false,
            from_staged: false,
        }
    }

    /// The next whole blocks (one or more), or `None` once the tail has been read. The caller
    /// then says how many bytes of them it took ([`Blocks::consume`], whole blocks).
    fn run(&mut self) -> Option<&[u8]> {
        if self.at == self.ready && !self.padded {
            while self.rest.is_empty() {
                match self.parts.next() {
                    Some(part) => self.rest = part,
                    None => break,
                }
            }
            if self.rest.len() >= BLOCK {
                self.from_staged = false;
                let whole = self.rest.len() / BLOCK * BLOCK;
                return Some(&self.rest[..whole]);
            }
            self.stage();
        }
        self.from_staged = true;
        (self.at < self.ready).then(|| &self.staged[self.at..self.ready])
    }

    fn consume(&mut self, taken: usize) {
        debug_assert!(taken.is_multiple_of(BLOCK));
        if self.from_staged {
            self.at += taken;
        } else {
            self.rest = &self.rest[taken..];
            self.length += taken as u64;
        }
    }

    /// Copies bytes from the parts into `staged` until a block is full, or makes the tail when
    /// the parts run out first. [`Blocks::run`] calls it only when what is left of the current
    /// part is less than a block.
    fn stage(&mut self) {
        let mut filled = 0;
        loop {
            let take = self.rest.len().min(BLOCK - filled);
            self.staged[filled..filled + take].copy_from_slice(&self.rest[..take]);
            self.rest = &self.rest[take..];
            filled += take;
            if filled == BLOCK {
                self.length += BLOCK as u64;
                (self.at, self.ready) = (0, BLOCK);
                return;
            }
            match self.parts.next() {
                Some(part) => self.rest = part,
                None => break,
            }
        }
        // The parts are read, `filled` bytes of them staged: 0x80, zeros, and the length in
        // bits in the last eight bytes, in one block or two.
        self.length += filled as u64;
        self.staged[filled..].fill(0);
        self.staged[filled] = 0x80;
        let end = if filled + 1 + 8 <= BLOCK {
            BLOCK
        } else {
            2 * BLOCK
        };
        self.staged[end - 8..end].copy_from_slice(&(self.length * 8).to_be_bytes());
        (self.at, self.ready) = (0, end);
        self.padded = true;
    }
}

fn bytes_of(state: &State) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};

    use super::*;

    fn reference_mac(secret: &[u8], message: &[u8]) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Bytes that differ from position to position and from `seed` to `seed`.
    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn digests_equal_sha256_around_every_block_boundary() {
        for len in (0..=200).chain([447, 448, 1400, 4096, 4097]) {
            let data = bytes(len, 7);
            let expected: [u8; 32] = Sha256::digest(&data).into();
            assert_eq!(digest(&[&data]), expected, "length {len}");
            let (head, tail) = data.split_at(len / 3);
            assert_eq!(
                digest(&[head, &[], tail]),
                expected,
                "length {len}, in parts"
            );
        }
    }

    #[test]
    fn macs_equal_hmac_sha256_for_keys_shorter_and_longer_than_a_block() {
        for key_len in [0, 1, 20, 32, 63, 64, 65, 100, 200] {
            let key = Key::new(&bytes(key_len, 3));
            for len in (0..=130).chain([1400, 5000]) {
                let message = bytes(len, 11);
                let expected = reference_mac(&bytes(key_len, 3), &message);
                assert_eq!(
                    key.mac(&[&message]),
                    expected,
                    "key {key_len}, length {len}"
                );
            }
        }
    }

    #[test]
    fn the_mac_and_the_digest_of_one_pass_are_each_the_standard_ones() {
        // Message and payload of every pair of lengths around the boundaries, so that either
        // runs out first, by zero, one or several blocks, with the message in parts (a prefix
        // that leaves the payload unaligned, as Standard Webhooks' `id.timestamp.body`).
        let key_bytes = bytes(40, 5);
        let key = Key::new(&key_bytes);
        let lengths: Vec<usize> = (0..=140).step_by(3).chain([55, 56, 63, 64, 1400]).collect();
        for &prefix in &[0usize, 1, 37, 64] {
            for &m in &lengths {
                for &p in &lengths {
                    let head = bytes(prefix, 1);
                    let body = bytes(m, 2);
                    let payload = bytes(p, 9);
                    let joined = [head.as_slice(), &body].concat();
                    let (mac, digest) = key.mac_and_digest(&[&head, &body], &[&payload]);
                    assert_eq!(mac, reference_mac(&key_bytes, &joined), "{prefix}+{m}, {p}");
                    let expected: [u8; 32] = Sha256::digest(&payload).into();
                    assert_eq!(digest, expected, "{prefix}+{m}, {p}");
                    // The payload in parts (as a field zeroed in place: before, `0`, after).
                    let (before, after) = (&payload[..p / 3], &payload[p / 2..]);
                    let edited = [before, b"0", after].concat();
                    let (mac, digest) = key.mac_and_digest(&[&head, &body], &[before, b"0", after]);
                    assert_eq!(mac, reference_mac(&key_bytes, &joined), "{prefix}+{m}, {p}");
                    let expected: [u8; 32] = Sha256::digest(&edited).into();
                    assert_eq!(digest, expected, "{prefix}+{m}, {p} in parts");
                }
            }
        }
    }
}
