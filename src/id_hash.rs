//! The hasher for maps keyed by ids this server makes: client cores' connection numbers and
//! `ConnRef`s, session ids, and the commit queue's path-hash keys. These maps are looked up
//! several times per request, where SipHash cost more than the lookup around it.
//! Rules: only for keys that no client can steer into collisions. Session ids and connection
//! numbers are made by a server (a client may name a session id when it resumes one, but
//! only looks it up); the guard keys are `fence::key`'s hash of a path under a seed drawn at
//! random once per process.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hash of the few integers an id hashes.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A map keyed by server-made ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A set of server-made ids.
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_of_one_server_spread_over_the_low_bits() {
        // ZooKeeper's session ids: the server id in the top byte, a counter below. A table of
        // 2^k buckets indexes by the hash's low bits, so consecutive ids must not share them.
        let base = (3i64 << 56) | (0x1234 << 24);
        let mut low = HashSet::new();
        for i in 0..1024i64 {
            let mut h = IdHasher::default();
            h.write_i64(base + i);
            low.insert(h.finish() & 1023);
        }
        assert!(low.len() > 600, "only {} of 1024 low-bit values used", low.len());
        let mut m: IdMap<i64, i64> = IdMap::default();
        for i in 0..1024i64 {
            m.insert(base + i, i);
        }
        assert!((0..1024i64).all(|i| m.get(&(base + i)) == Some(&i)));
    }
}
