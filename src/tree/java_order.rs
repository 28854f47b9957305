//! ZooKeeper's order for deleting a closed session's ephemerals. Apache copies the session's
//! `HashSet<String>` of ephemeral paths (`HashSet.clone()`) and deletes them in that copy's
//! iteration order, firing each deletion's watches before the next: clients observe this
//! order in their watch events, so ringkeeper reproduces it.
//! Rules: pure and deterministic (a function of the paths and their creation order only);
//! the model is Java 17's `HashMap`: `String.hashCode` over UTF-16 units, the hash spread
//! `h ^ (h >>> 16)`, power-of-two tables, load factor 0.75, insertion order within a bucket.

/// Java's `String.hashCode`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// `HashMap.hash`: the high half folded into the low half.
fn spread(h: i32) -> u32 {
    let h = h as u32;
    h ^ (h >> 16)
}

/// Table length of a `HashSet` grown by inserting `n` entries one at a time from the
/// default 16 (it doubles when the size passes three quarters of the table).
fn grown_table_len(n: usize) -> u32 {
    let mut len: u32 = 16;
    while n > (len as usize) * 3 / 4 {
        len *= 2;
    }
    len
}

/// Table length of `HashMap.clone()` of a map of `n` entries: `tableSizeFor((int)(n / 0.75f + 1))`.
fn cloned_table_len(n: usize) -> u32 {
    let wanted = ((n as f32) / 0.75f32 + 1.0f32) as u32;
    wanted.max(1).next_power_of_two()
}

/// Orders `paths` (each with its creation zxid, the order the session inserted them) as
/// Apache iterates the cloned set: by bucket of the copy; within one, in the order the copy
/// received them, which is the original set's iteration order (its bucket, then insertion).
pub fn session_close_order<T: AsRef<str>>(paths: &mut [(T, i64)]) {
    let copy_mask = cloned_table_len(paths.len()) - 1;
    let source_mask = grown_table_len(paths.len()) - 1;
    paths.sort_by_cached_key(|(p, czxid)| {
        let h = spread(string_hash(p.as_ref()));
        (h & copy_mask, h & source_mask, *czxid)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hash_matches_java() {
        // Values of "…".hashCode() as the JVM computes them.
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("a"), 97);
        assert_eq!(string_hash("hello"), 99_162_322);
        assert_eq!(string_hash("/zookeeper"), 954_481_661);
        // Outside the BMP Java hashes the two surrogate units.
        assert_eq!(string_hash("\u{1F600}"), 0xd83d * 31 + 0xde00);
    }

    #[test]
    fn table_lengths_follow_hashmap() {
        assert_eq!(
            (grown_table_len(0), grown_table_len(12), grown_table_len(13), grown_table_len(25)),
            (16, 16, 32, 64)
        );
        // clone() sizes by count: 2 entries → (int)(3.67) = 3 → 4; 12 → 17 → 32.
        assert_eq!((cloned_table_len(1), cloned_table_len(2), cloned_table_len(12)), (2, 4, 32));
    }

    #[test]
    fn order_matches_apache_observation() {
        // Observed on Apache 3.8: a session holding /diff/eb (created first) and
        // /diff/es-0000000006 is closed; the watches on /diff/es-… fire first.
        let mut paths = vec![("/diff/eb", 3), ("/diff/es-0000000006", 9)];
        session_close_order(&mut paths);
        assert_eq!(paths, vec![("/diff/es-0000000006", 9), ("/diff/eb", 3)]);
    }

    #[test]
    fn same_bucket_keeps_creation_order() {
        // "Aa" and "BB" have the same Java hash: creation order decides.
        assert_eq!(string_hash("Aa"), string_hash("BB"));
        let mut paths = vec![("BB", 7), ("Aa", 5)];
        session_close_order(&mut paths);
        assert_eq!(paths, vec![("Aa", 5), ("BB", 7)]);
    }
}
