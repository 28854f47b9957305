//! Session bookkeeping of the pipeline core: session ids, passwords, negotiated timeouts, which
//! connection a session is attached to, and expiry by deadline buckets.
//! Rules: sans-IO (the caller passes `now_ms`, monotonic milliseconds: a step of the wall clock
//! must move no deadline); a session is expired only by `expired()`, once
//! its deadline has passed with no touch; a password is HMAC-SHA256(ensemble secret, session
//! id) cut to 16 bytes, so it survives a restart and a move to another member (the secret is in
//! the tree: a txn puts it there, snapshots keep it) but cannot be computed without the secret,
//! which never leaves the servers; the secret comes from the shell (the pipeline draws it from
//! the OS), never from this module; passwords are compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;

/// Length of a session password on the wire.
pub const SESSION_PASSWD_LEN: usize = 16;
/// Length of the per-ensemble session secret (the HMAC-SHA256 key).
pub const SESSION_SECRET_BYTES: usize = 32;

/// The per-ensemble key session passwords are made with.
pub type SessionSecret = [u8; SESSION_SECRET_BYTES];

/// A connection as the pipeline core names it: (client core, connection id on that core).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnRef {
    pub core: u16,
    pub conn: u64,
}

/// The password of a session: the first 16 bytes of HMAC-SHA256(secret, session id as 8
/// big-endian bytes).
pub fn password_of(secret: &SessionSecret, session_id: i64) -> [u8; SESSION_PASSWD_LEN] {
    // HMAC takes a key of any length: new_from_slice cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { unreachable!("HMAC accepts keys of any length") };
    mac.update(&session_id.to_be_bytes());
    let digest = mac.finalize().into_bytes();
    let mut out = [0u8; SESSION_PASSWD_LEN];
    out.copy_from_slice(&digest[..SESSION_PASSWD_LEN]);
    out
}

/// True if `given` is the session's password. Without a secret (a data dir from before there
/// was one, until the first txn makes it) no password is right. The comparison takes the same
/// time whatever bytes differ.
pub fn password_matches(secret: Option<&SessionSecret>, session_id: i64, given: &[u8]) -> bool {
    let Some(secret) = secret else { return false };
    let expected = password_of(secret, session_id);
    if given.len() != expected.len() {
        return false;
    }
    expected.iter().zip(given).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// ZooKeeper's first session id: the server id in the top byte, then 40 bits of the current
/// time in ms shifted up by 16, so ids stay unique across restarts.
pub fn first_session_id(server_id: u8, now_ms: i64) -> i64 {
    let time_part = ((now_ms as u64) << 24) >> 8;
    (time_part | ((server_id as u64) << 56)) as i64
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    timeout_ms: i32,
    deadline_ms: i64,
    attached: Option<ConnRef>,
}

/// The live sessions of the pipeline core.
#[derive(Debug)]
pub struct SessionTracker {
    /// Deadlines are rounded up to a multiple of this (ZooKeeper's expirationInterval = tickTime).
    bucket_ms: i64,
    sessions: crate::id_hash::IdMap<i64, Tracked>,
    /// bucket deadline → sessions that were put there (stale entries are skipped lazily).
    buckets: BTreeMap<i64, Vec<i64>>,
    next_id: i64,
}

impl SessionTracker {
    pub fn new(bucket_ms: u32, first_id: i64) -> SessionTracker {
        assert!(bucket_ms > 0, "session bucket interval must be positive");
        SessionTracker {
            bucket_ms: bucket_ms as i64,
            sessions: Default::default(),
            buckets: BTreeMap::new(),
            next_id: first_id,
        }
    }

    /// A fresh session id, never handed out before by this tracker.
    pub fn next_session_id(&mut self) -> i64 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    fn schedule(&mut self, id: i64, now_ms: i64) {
        let Some(t) = self.sessions.get_mut(&id) else {
            return;
        };
        let bucket = (now_ms + t.timeout_ms as i64) / self.bucket_ms * self.bucket_ms + self.bucket_ms;
        if t.deadline_ms == bucket {
            return;
        }
        t.deadline_ms = bucket;
        self.buckets.entry(bucket).or_default().push(id);
    }

    /// Starts tracking a session (a new one, or one restored from disk).
    pub fn add(&mut self, id: i64, timeout_ms: i32, now_ms: i64) {
        self.sessions.insert(id, Tracked { timeout_ms, deadline_ms: 0, attached: None });
        self.schedule(id, now_ms);
    }

    pub fn contains(&self, id: i64) -> bool {
        self.sessions.contains_key(&id)
    }

    pub fn timeout_ms(&self, id: i64) -> Option<i32> {
        self.sessions.get(&id).map(|t| t.timeout_ms)
    }

    /// Pushes the session's deadline out by its timeout. False if the session is gone.
    pub fn touch(&mut self, id: i64, now_ms: i64) -> bool {
        if !self.sessions.contains_key(&id) {
            return false;
        }
        self.schedule(id, now_ms);
        true
    }

    /// Changes the timeout (a resumed session negotiates again) and touches.
    pub fn set_timeout(&mut self, id: i64, timeout_ms: i32, now_ms: i64) {
        if let Some(t) = self.sessions.get_mut(&id) {
            t.timeout_ms = timeout_ms;
            t.deadline_ms = 0;
        }
        self.schedule(id, now_ms);
    }

    /// Binds the session to a connection; returns the connection it was bound to before.
    pub fn attach(&mut self, id: i64, conn: ConnRef) -> Option<ConnRef> {
        let t = self.sessions.get_mut(&id)?;
        let old = t.attached.replace(conn);
        old.filter(|o| *o != conn)
    }

    /// Unbinds the session if it is still bound to `conn`.
    pub fn detach(&mut self, id: i64, conn: ConnRef) {
        if let Some(t) = self.sessions.get_mut(&id) {
            if t.attached == Some(conn) {
                t.attached = None;
            }
        }
    }

    /// Forgets a session (closed or expired); returns the connection it was bound to.
    pub fn remove(&mut self, id: i64) -> Option<ConnRef> {
        self.sessions.remove(&id).and_then(|t| t.attached)
    }

    /// Sessions whose deadline is at or before `now_ms`, removed from the tracker, each with
    /// the connection it was bound to. Sorted by id, so the result is deterministic.
    pub fn expired(&mut self, now_ms: i64) -> Vec<(i64, Option<ConnRef>)> {
        let mut out = Vec::new();
        while let Some((&bucket, _)) = self.buckets.first_key_value() {
            if bucket > now_ms {
                break;
            }
            let ids = self.buckets.pop_first().map(|(_, v)| v).unwrap_or_default();
            for id in ids {
                if self.sessions.get(&id).is_some_and(|t| t.deadline_ms == bucket) {
                    let attached = self.remove(id);
                    out.push((id, attached));
                }
            }
        }
        out.sort_unstable_by_key(|(id, _)| *id);
        out
    }

    /// Every session grouped by its deadline bucket, earliest first, ids sorted (ZooKeeper's
    /// `dump`: "Session Sets").
    pub fn deadline_sets(&self) -> Vec<(i64, Vec<i64>)> {
        let mut sets: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (&id, t) in &self.sessions {
            sets.entry(t.deadline_ms).or_default().push(id);
        }
        sets.into_iter()
            .map(|(d, mut ids)| {
                ids.sort_unstable();
                (d, ids)
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: ConnRef = ConnRef { core: 0, conn: 1 };

    #[test]
    fn session_expires_only_after_its_timeout_without_touches() {
        let mut t = SessionTracker::new(500, 100);
        let id = t.next_session_id();
        t.add(id, 4000, 0);
        assert!(t.expired(3999).is_empty());
        assert!(t.touch(id, 3000));
        assert!(t.expired(6999).is_empty());
        let gone = t.expired(7600);
        assert_eq!(gone, vec![(id, None)]);
        assert!(!t.contains(id));
        assert!(!t.touch(id, 8000));
    }

    #[test]
    fn deadline_sets_group_sessions_by_bucket() {
        let mut t = SessionTracker::new(1000, 1);
        t.add(3, 4000, 0);
        t.add(1, 4000, 100);
        t.add(2, 9000, 0);
        assert_eq!(t.deadline_sets(), vec![(5000, vec![1, 3]), (10000, vec![2])]);
        t.touch(1, 6000);
        assert_eq!(t.deadline_sets(), vec![(5000, vec![3]), (10000, vec![2]), (11000, vec![1])]);
    }

    #[test]
    fn attach_reports_the_previous_connection() {
        let mut t = SessionTracker::new(1000, 1);
        t.add(1, 4000, 0);
        assert_eq!(t.attach(1, C), None);
        let other = ConnRef { core: 1, conn: 9 };
        assert_eq!(t.attach(1, other), Some(C));
        t.detach(1, C);
        assert_eq!(t.remove(1), Some(other));
    }

    /// The format is fixed (a restarted or upgraded member must make the same passwords):
    /// checked against Python's hmac module.
    #[test]
    fn password_is_hmac_sha256_of_the_big_endian_id_cut_to_16_bytes() {
        let mut secret = [0u8; SESSION_SECRET_BYTES];
        for (i, b) in secret.iter_mut().enumerate() {
            *b = i as u8;
        }
        let expected: [u8; 16] =
            [0x5b, 0xb1, 0xef, 0x93, 0x88, 0x82, 0x27, 0xe2, 0xe8, 0x36, 0x91, 0xde, 0x25, 0x04, 0xdb, 0x34];
        assert_eq!(password_of(&secret, 0x0123_4567_89ab_cdef), expected);
    }

    #[test]
    fn passwords_are_stable_and_differ_per_session_and_secret() {
        let a = [7u8; SESSION_SECRET_BYTES];
        let mut b = a;
        b[31] ^= 1;
        assert_eq!(password_of(&a, 42), password_of(&a, 42));
        assert_ne!(password_of(&a, 42), password_of(&a, 43));
        assert_ne!(password_of(&a, 42), password_of(&b, 42));
        assert!(password_matches(Some(&a), 42, &password_of(&a, 42)));
        assert!(!password_matches(Some(&b), 42, &password_of(&a, 42)));
        assert!(!password_matches(None, 42, &password_of(&a, 42)));
        assert!(!password_matches(Some(&a), 42, &password_of(&a, 42)[..15]));
        assert!(!password_matches(Some(&a), 42, &[0u8; SESSION_PASSWD_LEN]));
        let id = first_session_id(0, 1_700_000_000_000);
        assert!(id > 0);
        assert_eq!(id >> 56, 0);
    }
}
