//! Two SHA-256 block compressions at once: [`compress_two`].
//!
//! SHA-256's rounds depend each on the one before, so one message cannot keep the x86-64 SHA
//! extensions busy: every `sha256rnds2` waits for the last. Two messages whose rounds alternate
//! fill those waits, and cost little more than one. hookonce hashes every webhook body twice, for
//! its signature's HMAC and for its dedup fingerprint; this crate is how it pays for one pass.
//!
//! The kernel is safe code: every intrinsic it calls is safe inside a function compiled for the
//! features it needs. Calling that function is not, unless the CPU has them; [`compress_two`]
//! checks, and elsewhere (other CPUs, other architectures) compresses the blocks one after the
//! other with `sha2::compress256`. Both ways give the same states, which the tests check.

/// SHA-256's chaining state: eight words, A to H.
pub type State = [u32; 8];

/// Bytes in one block.
pub const BLOCK: usize = 64;

/// Compresses the blocks of `a_blocks` into `a` and those of `b_blocks` into `b`: exactly
/// `sha2::compress256` on each. Both hold the same number of whole blocks.
///
/// # Panics
/// When their lengths differ or are not whole blocks.
pub fn compress_two(a: &mut State, a_blocks: &[u8], b: &mut State, b_blocks: &[u8]) {
    assert!(
        a_blocks.len() == b_blocks.len() && a_blocks.len().is_multiple_of(BLOCK),
        "compress_two takes whole blocks, as many of each"
    );
    #[cfg(target_arch = "x86_64")]
    if shani::available() {
        // SAFETY: `shani::compress_two` is compiled for the features `available` just found on
        // this CPU; that is its only requirement (its body is safe code).
        #[allow(unsafe_code)]
        unsafe {
            shani::compress_two(a, a_blocks, b, b_blocks)
        };
        return;
    }
    compress(a, a_blocks);
    compress(b, b_blocks);
}

/// Compresses the whole blocks of `blocks` into `state` (`sha2::compress256`, which uses the SHA
/// extensions when it can).
///
/// # Panics
/// When `blocks` is not whole blocks.
pub fn compress(state: &mut State, blocks: &[u8]) {
    use sha2::digest::generic_array::{typenum::U64, GenericArray};
    assert!(
        blocks.len().is_multiple_of(BLOCK),
        "compress takes whole blocks"
    );
    if blocks.len() == BLOCK {
        sha2::compress256(state, &[*GenericArray::from_slice(blocks)]);
        return;
    }
    // `compress256` takes blocks as an array type that a byte slice cannot be borrowed as: they
    // are copied into a batch, so that a long run costs one call per sixteen blocks, as a
    // `sha2` hasher's would, and not one per block (which adds about 1 % on CPUs without the
    // extensions, where every block is compressed in software).
    const BATCH: usize = 16;
    let mut batch = [GenericArray::<u8, U64>::default(); BATCH];
    for run in blocks.chunks(BATCH * BLOCK) {
        let count = run.len() / BLOCK;
        for (slot, block) in batch.iter_mut().zip(run.chunks_exact(BLOCK)) {
            slot.copy_from_slice(block);
        }
        sha2::compress256(state, &batch[..count]);
    }
}

#[cfg(target_arch = "x86_64")]
mod shani {
    //! The interleaved kernel. The state is kept as the SHA instructions want it, ABEF and CDGH
    //! (Intel's "SHA extensions" white paper, whose single-message loop this follows).

    use core::arch::x86_64::{
        __m128i, _mm_add_epi32, _mm_alignr_epi8, _mm_blend_epi16, _mm_extract_epi32, _mm_set_epi32,
        _mm_set_epi64x, _mm_setzero_si128, _mm_sha256msg1_epu32, _mm_sha256msg2_epu32,
        _mm_sha256rnds2_epu32, _mm_shuffle_epi32, _mm_shuffle_epi8,
    };

    use super::{State, BLOCK};

    /// Whether this CPU has what [`compress_two`] is compiled for (std caches the answer).
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("sha")
            && std::arch::is_x86_feature_detected!("sse2")
            && std::arch::is_x86_feature_detected!("ssse3")
            && std::arch::is_x86_feature_detected!("sse4.1")
    }

    /// The round constants (FIPS 180-4, 4.2.2).
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// Four 32-bit words as one vector, the first in the lowest lane.
    #[target_feature(enable = "sse2")]
    fn vector(words: [u32; 4]) -> __m128i {
        let [w0, w1, w2, w3] = words.map(|w| w as i32);
        _mm_set_epi32(w3, w2, w1, w0)
    }

    /// The state as the rounds take it: (ABEF, CDGH).
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    fn load(state: &State) -> (__m128i, __m128i) {
        let cdab = _mm_shuffle_epi32(vector([state[0], state[1], state[2], state[3]]), 0xB1);
        let hgfe = _mm_shuffle_epi32(vector([state[4], state[5], state[6], state[7]]), 0x1B);
        (
            _mm_alignr_epi8(cdab, hgfe, 8),
            _mm_blend_epi16(hgfe, cdab, 0xF0),
        )
    }

    /// Back from (ABEF, CDGH) to A to H.
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    fn store(state: &mut State, abef: __m128i, cdgh: __m128i) {
        let feba = _mm_shuffle_epi32(abef, 0x1B);
        let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
        let abcd = _mm_blend_epi16(feba, dchg, 0xF0);
        let efgh = _mm_alignr_epi8(dchg, feba, 8);
        *state = [
            _mm_extract_epi32::<0>(abcd) as u32,
            _mm_extract_epi32::<1>(abcd) as u32,
            _mm_extract_epi32::<2>(abcd) as u32,
            _mm_extract_epi32::<3>(abcd) as u32,
            _mm_extract_epi32::<0>(efgh) as u32,
            _mm_extract_epi32::<1>(efgh) as u32,
            _mm_extract_epi32::<2>(efgh) as u32,
            _mm_extract_epi32::<3>(efgh) as u32,
        ];
    }

    /// Sixteen bytes of a block as four big-endian message words, the first in the lowest lane.
    #[target_feature(enable = "sse2,ssse3")]
    fn words(bytes: &[u8]) -> __m128i {
        let low = u64::from_le_bytes(bytes[..8].try_into().expect("sixteen bytes"));
        let high = u64::from_le_bytes(bytes[8..16].try_into().expect("sixteen bytes"));
        let big_endian = _mm_set_epi64x(0x0c0d0e0f08090a0b, 0x0405060700010203);
        _mm_shuffle_epi8(_mm_set_epi64x(high as i64, low as i64), big_endian)
    }

    /// One block's message schedule, each group of four words plus its round constants.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    fn schedule(block: &[u8]) -> [__m128i; 16] {
        let mut w = [_mm_setzero_si128(); 16];
        for (i, lane) in w.iter_mut().take(4).enumerate() {
            *lane = words(&block[16 * i..16 * i + 16]);
        }
        for i in 4..16 {
            let t = _mm_sha256msg1_epu32(w[i - 4], w[i - 3]);
            let t = _mm_add_epi32(t, _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
            w[i] = _mm_sha256msg2_epu32(t, w[i - 1]);
        }
        for (i, lane) in w.iter_mut().enumerate() {
            let k = vector([K[4 * i], K[4 * i + 1], K[4 * i + 2], K[4 * i + 3]]);
            *lane = _mm_add_epi32(*lane, k);
        }
        w
    }

    /// Four rounds, two per instruction.
    #[inline]
    #[target_feature(enable = "sha,sse2")]
    fn four_rounds(abef: &mut __m128i, cdgh: &mut __m128i, wk: __m128i) {
        *cdgh = _mm_sha256rnds2_epu32(*cdgh, *abef, wk);
        *abef = _mm_sha256rnds2_epu32(*abef, *cdgh, _mm_shuffle_epi32(wk, 0x0E));
    }

    /// Every block pair's 64 rounds, four of one message and then four of the other; the states
    /// stay in registers from the first block to the last.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) fn compress_two(a: &mut State, a_blocks: &[u8], b: &mut State, b_blocks: &[u8]) {
        let (mut a0, mut a1) = load(a);
        let (mut b0, mut b1) = load(b);
        for (a_block, b_block) in a_blocks
            .chunks_exact(BLOCK)
            .zip(b_blocks.chunks_exact(BLOCK))
        {
            let a_wk = schedule(a_block);
            let b_wk = schedule(b_block);
            let (a_start, b_start) = ((a0, a1), (b0, b1));
            for i in 0..16 {
                four_rounds(&mut a0, &mut a1, a_wk[i]);
                four_rounds(&mut b0, &mut b1, b_wk[i]);
            }
            (a0, a1) = (_mm_add_epi32(a0, a_start.0), _mm_add_epi32(a1, a_start.1));
            (b0, b1) = (_mm_add_epi32(b0, b_start.0), _mm_add_epi32(b1, b_start.1));
        }
        store(a, a0, a1);
        store(b, b0, b1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256's initial state.
    const IV: State = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];

    /// `count` blocks that differ from byte to byte and from seed to seed.
    fn blocks(seed: u32, count: usize) -> Vec<u8> {
        (0..count * BLOCK)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(31)
                    .wrapping_add(seed.wrapping_mul(97)) as u8
            })
            .collect()
    }

    #[test]
    fn two_at_once_equals_each_alone() {
        for seed in 0..256u32 {
            let count = seed as usize % 5;
            let start_a = IV.map(|w| w.rotate_left(seed));
            let start_b = IV.map(|w| w ^ seed.wrapping_mul(0x0101_0101));
            let (a_blocks, b_blocks) = (blocks(seed, count), blocks(seed + 1000, count));
            let (mut a, mut b) = (start_a, start_b);
            compress_two(&mut a, &a_blocks, &mut b, &b_blocks);
            let (mut a_alone, mut b_alone) = (start_a, start_b);
            compress(&mut a_alone, &a_blocks);
            compress(&mut b_alone, &b_blocks);
            assert_eq!((a, b), (a_alone, b_alone), "seed {seed}, {count} blocks");
        }
    }

    #[test]
    fn a_long_run_compresses_as_its_blocks_one_by_one() {
        use sha2::digest::generic_array::GenericArray;
        for count in [2, 15, 16, 17, 33, 100] {
            let data = blocks(count as u32, count);
            let mut whole = IV;
            compress(&mut whole, &data);
            let mut one_by_one = IV;
            for block in data.chunks_exact(BLOCK) {
                sha2::compress256(&mut one_by_one, &[*GenericArray::from_slice(block)]);
            }
            assert_eq!(whole, one_by_one, "{count} blocks");
        }
    }

    #[test]
    #[should_panic(expected = "as many of each")]
    fn unequal_runs_are_refused() {
        let (mut a, mut b) = (IV, IV);
        compress_two(&mut a, &blocks(1, 2), &mut b, &blocks(2, 1));
    }

    #[test]
    fn the_empty_message_hashes_to_the_standard_digest() {
        // FIPS 180-4's padding of the empty message: 0x80, then zeros and a zero length.
        let mut padded = [0u8; BLOCK];
        padded[0] = 0x80;
        let (mut a, mut b) = (IV, IV);
        compress_two(&mut a, &padded, &mut b, &padded);
        let expected = [
            0xe3b0c442, 0x98fc1c14, 0x9afbf4c8, 0x996fb924, 0x27ae41e4, 0x649b934c, 0xa495991b,
            0x7852b855,
        ];
        assert_eq!((a, b), (expected, expected));
    }
}
