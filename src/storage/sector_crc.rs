//! The txn log's sector crc (CRC-32C of the sector's file offset, u64 BE, then its 508 payload
//! bytes; docs/storage-format.md), computed in three interleaved streams.
//! Why: the `crc32c` crate runs its 3-way parallel path only on 768 bytes or more, so a
//! 508-byte sector went through one serial chain of 63 `crc32` instructions (3 cycles of
//! latency each); here the payload's 63 words are three independent chains of 21, joined by
//! shifting the first two over the bytes that follow them (CRC is linear: the register after
//! X ++ Y from state s is shift(s, |Y|) xor the register after Y from 0).
//! Rules: the same value as `crc32c::crc32c_append(crc32c(offset_be), payload)` for every
//! input (a test checks it against the crate); other payload lengths, and CPUs without SSE4.2,
//! take the crate's path. The shift tables are computed at compile time.

use super::log::SECTOR_PAYLOAD_BYTES;

/// Words (8 bytes) per stream: the payload's first 504 bytes are three streams of 168.
const STREAM_WORDS: usize = 21;
const STREAM_BYTES: usize = STREAM_WORDS * 8;
/// Payload bytes after the three streams (a `crc32` of 4 bytes).
const TAIL_BYTES: usize = SECTOR_PAYLOAD_BYTES - 3 * STREAM_BYTES;
const _: () = assert!(TAIL_BYTES == 4);

/// CRC-32C's polynomial, bit-reflected.
const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// The raw (not inverted) register `s` after `bytes` zero bytes, one bit at a time.
const fn shift_slow(mut s: u32, bytes: usize) -> u32 {
    let mut i = 0;
    while i < bytes * 8 {
        s = if s & 1 == 1 { (s >> 1) ^ POLY_REFLECTED } else { s >> 1 };
        i += 1;
    }
    s
}

/// `SHIFT[i][b]`: the register `b << 8i` after `STREAM_BYTES` zero bytes; a register's shift is
/// the xor of its four bytes' entries (the shift is linear).
const SHIFT: [[u32; 256]; 4] = {
    let mut bit = [0u32; 32];
    let mut k = 0;
    while k < 32 {
        bit[k] = shift_slow(1 << k, STREAM_BYTES);
        k += 1;
    }
    let mut table = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 256 {
            let mut v = 0u32;
            let mut j = 0;
            while j < 8 {
                if b & (1 << j) != 0 {
                    v ^= bit[8 * i + j];
                }
                j += 1;
            }
            table[i][b] = v;
            b += 1;
        }
        i += 1;
    }
    table
};

/// The register `s` after `STREAM_BYTES` zero bytes.
fn shift_stream(s: u32) -> u32 {
    SHIFT[0][(s & 0xff) as usize]
        ^ SHIFT[1][((s >> 8) & 0xff) as usize]
        ^ SHIFT[2][((s >> 16) & 0xff) as usize]
        ^ SHIFT[3][(s >> 24) as usize]
}

/// The crc of a sector at file offset `offset` holding `payload`.
pub fn sector_crc(offset: u64, payload: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if payload.len() == SECTOR_PAYLOAD_BYTES && std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2 (checked above), the only requirement of `interleaved`.
            return unsafe { interleaved(offset, payload) };
        }
    }
    crc32c::crc32c_append(crc32c::crc32c(&offset.to_be_bytes()), payload)
}

/// `sector_crc` with three interleaved `crc32` chains; `payload` is `SECTOR_PAYLOAD_BYTES` long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn interleaved(offset: u64, payload: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64};
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&payload[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    // The offset's 8 bytes, as they stand in the stream (big-endian), from the initial !0.
    let mut a = _mm_crc32_u64(u64::from(u32::MAX), u64::from_le_bytes(offset.to_be_bytes()));
    let (mut b, mut c) = (0u64, 0u64);
    for i in 0..STREAM_WORDS {
        a = _mm_crc32_u64(a, word(i));
        b = _mm_crc32_u64(b, word(STREAM_WORDS + i));
        c = _mm_crc32_u64(c, word(2 * STREAM_WORDS + i));
    }
    // The registers are 32 bits wide; `_mm_crc32_u64` returns them zero-extended.
    let joined = shift_stream(shift_stream(a as u32) ^ b as u32) ^ c as u32;
    let mut tail = [0u8; TAIL_BYTES];
    tail.copy_from_slice(&payload[3 * STREAM_BYTES..]);
    !_mm_crc32_u32(joined, u32::from_le_bytes(tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(offset: u64, payload: &[u8]) -> u32 {
        crc32c::crc32c_append(crc32c::crc32c(&offset.to_be_bytes()), payload)
    }

    #[test]
    fn matches_the_crate_on_every_kind_of_payload() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut payloads = vec![vec![0u8; SECTOR_PAYLOAD_BYTES], vec![0xffu8; SECTOR_PAYLOAD_BYTES]];
        for _ in 0..200 {
            payloads.push((0..SECTOR_PAYLOAD_BYTES).map(|_| next() as u8).collect());
        }
        // A single bit in each position of the payload.
        for bit in (0..SECTOR_PAYLOAD_BYTES * 8).step_by(37) {
            let mut p = vec![0u8; SECTOR_PAYLOAD_BYTES];
            p[bit / 8] = 1 << (bit % 8);
            payloads.push(p);
        }
        for (i, p) in payloads.iter().enumerate() {
            for offset in [0u64, 512, 4096 * 1000 + 3 * 512, next() & !511, u64::MAX - 511] {
                assert_eq!(sector_crc(offset, p), reference(offset, p), "payload {i} at offset {offset}");
            }
        }
    }

    #[test]
    fn other_lengths_take_the_crates_path() {
        let p: Vec<u8> = (0..100u8).collect();
        assert_eq!(sector_crc(1024, &p), reference(1024, &p));
        assert_eq!(sector_crc(0, &[]), reference(0, &[]));
    }

    #[test]
    fn the_shift_table_shifts() {
        // Shifting by a stream of zero bytes equals feeding them one bit at a time.
        for s in [1u32, 0x8000_0000, 0xDEAD_BEEF, 0x1234_5678] {
            assert_eq!(shift_stream(s), shift_slow(s, STREAM_BYTES));
        }
    }
}
