//! A server's small durable identity and ZAB state: `myid` (its sid, as ZooKeeper keeps it:
//! the decimal number alone in `dataDir/myid`), `epochs` (the accepted and the current epoch,
//! written together so they can never disagree with each other after a crash), and
//! `rejoin.pending` (this member set damaged log segments aside and has not synced with an
//! established leader since: it must not count toward a quorum until it has), and
//! `membership` (the last committed reconfiguration: its zxid, the voting and observing sids,
//! and, when the shell knows them, its `server.N` lines, issue 16; absent: the static
//! `server.N` lines).
//! Rules: `epochs` is replaced atomically (`write_atomic`) and carries a crc32c; a damaged or
//! impossible file (accepted below current) is an error naming the file, never a silent reset.
//! `rejoin.pending` is written durably before any log data is set aside, and removed only
//! after the sync.

use super::files::write_atomic;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub const MYID_FILE: &str = "myid";
pub const EPOCHS_FILE: &str = "epochs";
pub const REJOIN_PENDING_FILE: &str = "rejoin.pending";
pub const MEMBERSHIP_FILE: &str = "membership";
/// Bytes a `membership` file may hold (255 sids of 3 digits and commas, twice, a version, and
/// the server lines).
const MEMBERSHIP_FILE_BYTES_MAX: u64 = 4096 + crate::dynconfig::DYNCONFIG_BYTES_MAX as u64;

/// The last committed reconfiguration: its zxid (the version), the voting and observing sids,
/// and its server lines (empty when this member adopted the sids from an election
/// notification, which carries no addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub version: i64,
    pub voters: Vec<u64>,
    pub observers: Vec<u64>,
    pub servers: Vec<crate::config::ServerSpec>,
}
/// `epochs`: magic, version, accepted u32, current u32, crc32c of the 12 bytes before it.
const EPOCHS_MAGIC: [u8; 4] = *b"RKEP";
const EPOCHS_VERSION: u32 = 1;
const EPOCHS_FILE_BYTES: usize = 20;
/// ZooKeeper's limit on sids when extended types (TTL) are on: session ids must not start with 0xff.
pub const SID_MAX: u64 = 254;

#[derive(Debug)]
pub enum PeerStateError {
    Io { path: PathBuf, err: io::Error },
    BadMyid { path: PathBuf, text: String },
    Damaged { path: PathBuf, reason: &'static str },
}

impl fmt::Display for PeerStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerStateError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            PeerStateError::BadMyid { path, text } => write!(
                f,
                "{} must hold this server's id, a number from 1 to {SID_MAX} (found {text:?})",
                path.display()
            ),
            PeerStateError::Damaged { path, reason } => write!(
                f,
                "{} is damaged ({reason}); it holds this server's election promises, so the server will not \
                 guess: restore it, or remove it only after removing this server's log and snapshots so it \
                 rejoins from the leader",
                path.display()
            ),
        }
    }
}

impl std::error::Error for PeerStateError {}

/// Reads `dir/myid`: `Ok(None)` if there is none (a standalone server).
pub fn read_myid(dir: &Path) -> Result<Option<u64>, PeerStateError> {
    let path = dir.join(MYID_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(PeerStateError::Io { path, err }),
    };
    match text.trim().parse::<u64>() {
        Ok(id) if (1..=SID_MAX).contains(&id) => Ok(Some(id)),
        _ => Err(PeerStateError::BadMyid { path, text: text.trim().chars().take(40).collect() }),
    }
}

/// The durable epochs: (accepted, current); (0, 0) if the file does not exist yet.
pub fn read_epochs(dir: &Path) -> Result<(u32, u32), PeerStateError> {
    let path = dir.join(EPOCHS_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(err) => return Err(PeerStateError::Io { path, err }),
    };
    decode_epochs(&bytes).map_err(|reason| PeerStateError::Damaged { path, reason })
}

/// Replaces the epochs file (atomically, durably).
pub fn write_epochs(dir: &Path, accepted: u32, current: u32) -> Result<(), PeerStateError> {
    assert!(accepted >= current, "accepted epoch {accepted} below current epoch {current}");
    let path = dir.join(EPOCHS_FILE);
    write_atomic(&path, &encode_epochs(accepted, current)).map_err(|err| PeerStateError::Io { path, err })
}

/// Records (durably) that this member is about to lose logged txns: `why` says which.
pub fn mark_rejoin_pending(dir: &Path, why: &str) -> Result<(), PeerStateError> {
    let path = dir.join(REJOIN_PENDING_FILE);
    write_atomic(&path, format!("{why}\n").as_bytes()).map_err(|err| PeerStateError::Io { path, err })
}

/// Whether this member lost logged txns and has not synced with an established leader since.
pub fn rejoin_pending(dir: &Path) -> Result<bool, PeerStateError> {
    let path = dir.join(REJOIN_PENDING_FILE);
    match fs::metadata(&path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(PeerStateError::Io { path, err }),
    }
}

/// This member synced with an established leader: it counts toward quorums again.
pub fn clear_rejoin_pending(dir: &Path) -> Result<(), PeerStateError> {
    let path = dir.join(REJOIN_PENDING_FILE);
    match fs::remove_file(&path) {
        Ok(()) => super::files::fsync_dir(dir).map_err(|err| PeerStateError::Io { path, err }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(PeerStateError::Io { path, err }),
    }
}

/// The committed membership, None if no reconfiguration has committed here (the file is absent).
pub fn read_membership(dir: &Path) -> Result<Option<Membership>, PeerStateError> {
    let path = dir.join(MEMBERSHIP_FILE);
    let text = match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(PeerStateError::Io { path, err }),
        Ok(m) if m.len() > MEMBERSHIP_FILE_BYTES_MAX => {
            return Err(PeerStateError::Damaged { path, reason: "larger than any membership" })
        }
        Ok(_) => fs::read_to_string(&path).map_err(|err| PeerStateError::Io { path: path.clone(), err })?,
    };
    decode_membership(&text).map(Some).map_err(|reason| PeerStateError::Damaged { path, reason })
}

/// Replaces the membership file (atomically, durably).
pub fn write_membership(dir: &Path, m: &Membership) -> Result<(), PeerStateError> {
    let path = dir.join(MEMBERSHIP_FILE);
    write_atomic(&path, encode_membership(m).as_bytes()).map_err(|err| PeerStateError::Io { path, err })
}

/// `version=0x…`, `voters=1,2,3`, `observers=4` (empty after `=` for none), one per line,
/// then the `server.N=…` lines if known.
fn encode_membership(m: &Membership) -> String {
    let list = |ids: &[u64]| ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let mut t = format!("version={:#x}\nvoters={}\nobservers={}\n", m.version, list(&m.voters), list(&m.observers));
    for s in &m.servers {
        t.push_str(&format!("server.{}={}\n", s.id, s.value()));
    }
    t
}

fn decode_membership(text: &str) -> Result<Membership, &'static str> {
    let mut lines = text.lines();
    let mut field = |key: &str| -> Result<&str, &'static str> {
        let line = lines.next().ok_or("a line is missing")?;
        line.strip_prefix(key).and_then(|r| r.strip_prefix('=')).ok_or("a line is not the one expected")
    };
    let version = field("version")?;
    let version = version
        .strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or("the version is no hexadecimal zxid")? as i64;
    let ids = |v: &str| -> Result<Vec<u64>, &'static str> {
        if v.is_empty() {
            return Ok(Vec::new());
        }
        v.split(',')
            .map(|i| i.parse::<u64>().ok().filter(|i| (1..=SID_MAX).contains(i)).ok_or("a server id is out of range"))
            .collect()
    };
    let voters = ids(field("voters")?)?;
    let observers = ids(field("observers")?)?;
    if voters.is_empty() {
        return Err("it names no voter");
    }
    let rest: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    if rest.iter().any(|l| !l.starts_with("server.")) {
        return Err("it has lines after the observers that are no server lines");
    }
    let servers = crate::dynconfig::DynConfig::parse(&rest.join("\n")).map_err(|_| "a server line is bad")?.servers;
    if !servers.is_empty() {
        let (mut v, mut o) = (voters.clone(), observers.clone());
        v.sort_unstable();
        o.sort_unstable();
        let lv: Vec<u64> = servers.iter().filter(|s| !s.observer).map(|s| s.id).collect();
        let lo: Vec<u64> = servers.iter().filter(|s| s.observer).map(|s| s.id).collect();
        if (lv, lo) != (v, o) {
            return Err("its server lines name other members than its voters and observers");
        }
    }
    Ok(Membership { version, voters, observers, servers })
}

fn encode_epochs(accepted: u32, current: u32) -> [u8; EPOCHS_FILE_BYTES] {
    let mut b = [0u8; EPOCHS_FILE_BYTES];
    b[..4].copy_from_slice(&EPOCHS_MAGIC);
    b[4..8].copy_from_slice(&EPOCHS_VERSION.to_be_bytes());
    b[8..12].copy_from_slice(&accepted.to_be_bytes());
    b[12..16].copy_from_slice(&current.to_be_bytes());
    let crc = crc32c::crc32c(&b[4..16]);
    b[16..].copy_from_slice(&crc.to_be_bytes());
    b
}

fn decode_epochs(b: &[u8]) -> Result<(u32, u32), &'static str> {
    if b.len() != EPOCHS_FILE_BYTES {
        return Err("wrong length");
    }
    if b[..4] != EPOCHS_MAGIC {
        return Err("bad magic");
    }
    let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if word(16) != crc32c::crc32c(&b[4..16]) {
        return Err("checksum mismatch");
    }
    if word(4) != EPOCHS_VERSION {
        return Err("unknown version");
    }
    let (accepted, current) = (word(8), word(12));
    if accepted < current {
        return Err("accepted epoch below current epoch");
    }
    Ok((accepted, current))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::files::tests::TempDir;

    #[test]
    fn epochs_round_trip_and_damage_is_an_error() {
        let dir = TempDir::new("epochs");
        assert_eq!(read_epochs(&dir.0).unwrap(), (0, 0));
        write_epochs(&dir.0, 7, 5).unwrap();
        assert_eq!(read_epochs(&dir.0).unwrap(), (7, 5));
        write_epochs(&dir.0, 8, 8).unwrap();
        assert_eq!(read_epochs(&dir.0).unwrap(), (8, 8));
        let path = &dir.0.join(EPOCHS_FILE);
        let good = fs::read(path).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            fs::write(path, &bad).unwrap();
            assert!(matches!(read_epochs(&dir.0), Err(PeerStateError::Damaged { .. })), "flip at byte {i}");
        }
        fs::write(path, &good[..10]).unwrap();
        assert!(matches!(read_epochs(&dir.0), Err(PeerStateError::Damaged { .. })));
        // A well-formed file that breaks the rule accepted >= current is damage too.
        fs::write(path, encode_epochs(3, 4)).unwrap();
        assert!(matches!(read_epochs(&dir.0), Err(PeerStateError::Damaged { .. })));
    }

    #[test]
    fn myid_is_a_small_positive_number() {
        let dir = TempDir::new("myid");
        assert_eq!(read_myid(&dir.0).unwrap(), None);
        for (text, want) in [("1\n", Some(1)), ("  42 ", Some(42)), ("254", Some(254))] {
            fs::write(dir.0.join(MYID_FILE), text).unwrap();
            assert_eq!(read_myid(&dir.0).unwrap(), want);
        }
        for text in ["0", "255", "-1", "x", "", "1 2"] {
            fs::write(dir.0.join(MYID_FILE), text).unwrap();
            assert!(matches!(read_myid(&dir.0), Err(PeerStateError::BadMyid { .. })), "{text:?}");
        }
    }

    #[test]
    fn the_membership_file_round_trips_and_damage_is_named() {
        let dir = TempDir::new("membership");
        assert_eq!(read_membership(&dir.0).unwrap(), None);
        let m = Membership { version: 0x1_0000_0006, voters: vec![1, 2, 3, 4, 5], observers: vec![], servers: vec![] };
        write_membership(&dir.0, &m).unwrap();
        assert_eq!(read_membership(&dir.0).unwrap(), Some(m.clone()));
        assert_eq!(
            std::fs::read_to_string(&dir.0.join(MEMBERSHIP_FILE)).unwrap(),
            "version=0x100000006\nvoters=1,2,3,4,5\nobservers=\n"
        );
        let m2 = Membership { version: 0x2_0000_0001, voters: vec![2, 3, 4], observers: vec![1, 5], servers: vec![] };
        write_membership(&dir.0, &m2).unwrap();
        assert_eq!(read_membership(&dir.0).unwrap(), Some(m2));
        // With its server lines (a reconfiguration this member applied).
        let lines =
            crate::dynconfig::DynConfig::parse("server.1=h:1:2;127.0.0.1:3\nserver.2=h:4:5:observer;h:6").unwrap();
        let m3 = Membership { version: 0x2_0000_0002, voters: vec![1], observers: vec![2], servers: lines.servers };
        write_membership(&dir.0, &m3).unwrap();
        assert_eq!(read_membership(&dir.0).unwrap(), Some(m3));
        for bad in [
            "",
            "version=6\nvoters=1\nobservers=\n",
            "version=0x6\nvoters=\nobservers=\n",
            "version=0x6\nvoters=1,0\nobservers=\n",
            "version=0x6\nvoters=1,x\nobservers=\n",
            "version=0x6\nobservers=\nvoters=1\n",
            "version=0x6\nvoters=1\nobservers=2\nmore=1\n",
            "version=0x6\nvoters=1\nobservers=\nserver.2=h:1:2;3\n",
            "version=0x6\nvoters=1\nobservers=\nserver.1=h:1\n",
        ] {
            std::fs::write(&dir.0.join(MEMBERSHIP_FILE), bad).unwrap();
            let err = read_membership(&dir.0).unwrap_err().to_string();
            assert!(err.contains("membership is damaged"), "{bad:?}: {err}");
        }
    }
}
