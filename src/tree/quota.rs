//! ZooKeeper's quotas: `/zookeeper/quota<path>/zookeeper_limits` holds a path's limits and
//! `/zookeeper/quota<path>/zookeeper_stats` its usage (znodes in the subtree, the path itself
//! included, and their data bytes), both as ZooKeeper's `StatsTrack` text
//! (`count=4,bytes=5=;byteHardLimit=10;countHardLimit=10`). The tree keeps the stats node's data
//! current as it applies creates, deletes and setData (no txn, no Stat change: ZooKeeper's
//! DataTree does the same), and recounts a quota when its stats node is created or a snapshot is
//! restored. Prep refuses a create or setData past a hard limit with QuotaExceeded when
//! `enforceQuota` is set.
//! Rules: pure; text that does not parse as a number is taken as absent (-1), never a panic
//! (any client may write these nodes).

use std::collections::BTreeMap;

/// Where quota nodes live.
pub const QUOTA_ROOT: &str = "/zookeeper/quota";
/// The node holding a quota's limits.
pub const LIMIT_NODE: &str = "zookeeper_limits";
/// The node holding a quota's usage.
pub const STAT_NODE: &str = "zookeeper_stats";

const COUNT: &str = "count";
const BYTES: &str = "bytes";
const COUNT_HARD_LIMIT: &str = "countHardLimit";
const BYTE_HARD_LIMIT: &str = "byteHardLimit";

/// ZooKeeper's StatsTrack: named numbers, -1 when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsTrack(BTreeMap<String, i64>);

impl StatsTrack {
    /// Parses `key=value` pairs separated by `,` or `;` (runs of them count as one), as
    /// ZooKeeper does; an empty value is -1; a pair that is not a number is left out.
    pub fn parse(text: &[u8]) -> StatsTrack {
        let mut out = BTreeMap::new();
        let text = String::from_utf8_lossy(text);
        for pair in text.split([',', ';']).filter(|p| !p.is_empty()) {
            let mut parts = pair.split('=');
            let (Some(key), value) = (parts.next(), parts.next().unwrap_or("")) else { continue };
            let value = if value.is_empty() { Some(-1) } else { value.parse::<i64>().ok() };
            if let Some(v) = value {
                out.insert(key.to_string(), v);
            }
        }
        StatsTrack(out)
    }

    /// Usage as a stats node starts: count and bytes only.
    pub fn usage(count: i64, bytes: i64) -> StatsTrack {
        let mut t = StatsTrack::default();
        t.put(COUNT, count);
        t.put(BYTES, bytes);
        t
    }

    fn get(&self, key: &str) -> i64 {
        self.0.get(key).copied().unwrap_or(-1)
    }

    /// Sets one named number (`count`, `bytes`, `countHardLimit`, `byteHardLimit`).
    pub fn put(&mut self, key: &str, value: i64) {
        self.0.insert(key.to_string(), value);
    }

    pub fn count(&self) -> i64 {
        self.get(COUNT)
    }
    pub fn bytes(&self) -> i64 {
        self.get(BYTES)
    }
    pub fn count_hard_limit(&self) -> i64 {
        self.get(COUNT_HARD_LIMIT)
    }
    pub fn byte_hard_limit(&self) -> i64 {
        self.get(BYTE_HARD_LIMIT)
    }

    /// Adds to count and bytes (an absent one counts from -1, as in ZooKeeper).
    pub fn add(&mut self, count_diff: i64, bytes_diff: i64) {
        self.put(COUNT, self.count().wrapping_add(count_diff));
        self.put(BYTES, self.bytes().wrapping_add(bytes_diff));
    }

    /// ZooKeeper's text: `count=C,bytes=B`, then, if other keys exist, `=` and `;key=value`
    /// for each in key order (the form pre-3.5 parsers read).
    pub fn to_text(&self) -> String {
        let mut out = format!("{COUNT}={},{BYTES}={}", self.count(), self.bytes());
        let rest: Vec<_> = self.0.iter().filter(|(k, _)| *k != COUNT && *k != BYTES).collect();
        if !rest.is_empty() {
            out.push('=');
            for (k, v) in rest {
                out.push_str(&format!(";{k}={v}"));
            }
        }
        out
    }
}

/// The real path a quota node's parent stands for: `/zookeeper/quota/a/b` → `/a/b`; None for
/// anything else (the quota root itself included).
pub fn real_path_of_quota_dir(quota_dir: &str) -> Option<&str> {
    quota_dir.strip_prefix(QUOTA_ROOT).filter(|rest| rest.starts_with('/') && rest.len() > 1)
}

pub fn limit_path(real: &str) -> String {
    format!("{QUOTA_ROOT}{real}/{LIMIT_NODE}")
}

pub fn stat_path(real: &str) -> String {
    format!("{QUOTA_ROOT}{real}/{STAT_NODE}")
}

/// What a write does to a quota'd subtree, checked against its limits before prep accepts it.
#[derive(Debug, PartialEq, Eq)]
pub enum QuotaCheck {
    Within,
    /// Past a soft limit only: the write goes ahead (and is logged).
    SoftExceeded(String),
    /// Past a hard limit: QuotaExceeded.
    HardExceeded(String),
}

/// ZooKeeper's check: count is checked when it changes and a count limit is set, bytes when
/// they change and a byte limit is set; the hard limit wins over the soft one when both exist.
pub fn check(prefix: &str, limits: &StatsTrack, usage: &StatsTrack, count_diff: i64, bytes_diff: i64) -> QuotaCheck {
    let mut soft = None;
    let checks = [
        (count_diff, usage.count(), limits.count(), limits.count_hard_limit(), "count"),
        (bytes_diff, usage.bytes(), limits.bytes(), limits.byte_hard_limit(), "bytes"),
    ];
    for (diff, used, soft_limit, hard_limit, what) in checks {
        if diff == 0 || (soft_limit < 0 && hard_limit < 0) {
            continue;
        }
        let new = used.wrapping_add(diff);
        let (limit, hard) = if hard_limit > -1 { (hard_limit, true) } else { (soft_limit, false) };
        if new > limit {
            let msg = format!(
                "Quota exceeded: {prefix} [current {what}={new}, {}{}Limit={limit}]",
                if hard { "hard" } else { "soft" },
                if what == "count" { "Count" } else { "Byte" }
            );
            if hard {
                return QuotaCheck::HardExceeded(msg);
            }
            soft.get_or_insert(msg);
        }
    }
    soft.map_or(QuotaCheck::Within, QuotaCheck::SoftExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_track_reads_and_writes_zookeepers_text() {
        let t = StatsTrack::parse(b"count=4,bytes=5=;byteHardLimit=10;countHardLimit=12");
        assert_eq!((t.count(), t.bytes(), t.count_hard_limit(), t.byte_hard_limit()), (4, 5, 12, 10));
        assert_eq!(t.to_text(), "count=4,bytes=5=;byteHardLimit=10;countHardLimit=12");
        assert_eq!(StatsTrack::usage(3, 7).to_text(), "count=3,bytes=7");
        let old = StatsTrack::parse(b"count=-1,bytes=100");
        assert_eq!((old.count(), old.bytes(), old.count_hard_limit()), (-1, 100, -1));
        assert_eq!(StatsTrack::parse(b"count=,bytes=2").count(), -1);
        // Garbage is absent, never a panic.
        let bad = StatsTrack::parse(b"count=x;;=;bytes;\xff=1,,count2=9");
        assert_eq!((bad.count(), bad.bytes()), (-1, -1));
        let mut empty = StatsTrack::parse(b"");
        empty.add(1, 10);
        assert_eq!(empty.to_text(), "count=0,bytes=9");
    }

    #[test]
    fn quota_dirs_map_to_real_paths() {
        assert_eq!(real_path_of_quota_dir("/zookeeper/quota/a/b"), Some("/a/b"));
        assert_eq!(real_path_of_quota_dir("/zookeeper/quota"), None);
        assert_eq!(real_path_of_quota_dir("/zookeeper/quotax/a"), None);
        assert_eq!(real_path_of_quota_dir("/a"), None);
        assert_eq!(limit_path("/a"), "/zookeeper/quota/a/zookeeper_limits");
        assert_eq!(stat_path("/a"), "/zookeeper/quota/a/zookeeper_stats");
    }

    #[test]
    fn hard_limits_refuse_and_soft_limits_warn() {
        let usage = StatsTrack::usage(3, 10);
        let soft = StatsTrack::parse(b"count=3,bytes=-1");
        assert!(
            matches!(check("/a", &soft, &usage, 1, 0), QuotaCheck::SoftExceeded(m) if m.contains("softCountLimit=3"))
        );
        assert_eq!(check("/a", &soft, &usage, 0, 5), QuotaCheck::Within, "no byte limit");
        let hard = StatsTrack::parse(b"count=-1,bytes=-1=;byteHardLimit=12;countHardLimit=4");
        assert_eq!(check("/a", &hard, &usage, 1, 2), QuotaCheck::Within, "4 znodes, 12 bytes: at the limits");
        assert!(
            matches!(check("/a", &hard, &usage, 1, 3), QuotaCheck::HardExceeded(m) if m.contains("hardByteLimit=12"))
        );
        assert!(matches!(check("/a", &hard, &StatsTrack::usage(4, 0), 1, 0), QuotaCheck::HardExceeded(_)));
        // ZooKeeper checks any change of bytes, a shrinking one too: a subtree already past its
        // hard limit refuses it.
        assert!(matches!(check("/a", &hard, &StatsTrack::usage(2, 99), 0, -5), QuotaCheck::HardExceeded(_)));
        // Hard wins over soft when both are set.
        let both = StatsTrack::parse(b"count=2,bytes=-1=;countHardLimit=5");
        assert!(matches!(check("/a", &both, &usage, 1, 0), QuotaCheck::Within));
    }
}
