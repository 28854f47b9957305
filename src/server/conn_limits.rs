//! Connection limits shared by every client core, as ZooKeeper applies them at accept:
//! the server's connection count (maxCnxns, capped by the file descriptors the process may
//! open) and connections per client IP (maxClientCnxns), both counted across all cores.
//! Rules: lock-free atomics only (cores share nothing else mutable); bounded memory: the
//! per-IP counts live in a fixed table of `IP_SLOTS` counters indexed by a keyed hash of the
//! IP, so two IPs that share a slot share one limit (stricter, never looser); every count
//! taken is given back exactly once (`ConnPermit` gives it back when dropped).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Per-IP counters in the table (4 bytes each).
pub const IP_SLOTS: usize = 65_536;

/// Why a connection is refused (each names its limit, as ZooKeeper's log lines do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server holds `max` connections (maxCnxns, or the file descriptor budget).
    Total { max: u32 },
    /// The client's IP holds `max` connections (maxClientCnxns).
    PerIp { ip: IpAddr, max: u32 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total { max } => write!(f, "too many connections: max is {max}"),
            Refusal::PerIp { ip, max } => write!(f, "too many connections from {ip} - max is {max}"),
        }
    }
}

#[derive(Debug)]
pub struct ConnLimits {
    total: AtomicU32,
    /// 0: unlimited.
    total_max: u32,
    per_ip: Box<[AtomicU32]>,
    /// 0: unlimited (the table is then not used).
    per_ip_max: u32,
    hasher: RandomState,
}

/// One admitted connection's place in the counts, given back on drop.
#[derive(Debug)]
pub struct ConnPermit {
    limits: Arc<ConnLimits>,
    slot: Option<usize>,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.limits.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(slot) = self.slot {
            self.limits.per_ip[slot].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Adds one to `counter` unless it is at `max` (0: no maximum).
fn take(counter: &AtomicU32, max: u32) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (max == 0 || n < max).then_some(n + 1)).is_ok()
}

impl ConnLimits {
    /// `total_max`: connections of the server; `per_ip_max`: per client IP (0: unlimited).
    pub fn new(total_max: u32, per_ip_max: u32) -> Arc<ConnLimits> {
        let slots = if per_ip_max == 0 { 0 } else { IP_SLOTS };
        Arc::new(ConnLimits {
            total: AtomicU32::new(0),
            total_max,
            per_ip: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            per_ip_max,
            hasher: RandomState::new(),
        })
    }

    /// Counts a new connection from `ip`, or says which limit refuses it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnPermit, Refusal> {
        if !take(&self.total, self.total_max) {
            return Err(Refusal::Total { max: self.total_max });
        }
        let mut permit = ConnPermit { limits: self.clone(), slot: None };
        if self.per_ip_max > 0 {
            // An IPv4 client seen through an IPv6 socket counts as itself.
            let ip = ip.to_canonical();
            let slot = (self.hasher.hash_one(ip) as usize) % IP_SLOTS;
            if !take(&self.per_ip[slot], self.per_ip_max) {
                // `permit` gives the total back.
                return Err(Refusal::PerIp { ip, max: self.per_ip_max });
            }
            permit.slot = Some(slot);
        }
        Ok(permit)
    }

    /// Connections of the server now.
    pub fn total(&self) -> u32 {
        self.total.load(Ordering::Acquire)
    }

    /// The server-wide maximum in force (0: unlimited).
    pub fn total_max(&self) -> u32 {
        self.total_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_count_across_holders_and_give_back_on_drop() {
        let l = ConnLimits::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), Refusal::PerIp { ip: a, max: 2 });
        assert_eq!(l.total(), 2, "a refused connection gives its place back");
        let _b1 = l.admit(b).unwrap();
        assert_eq!(l.admit(b).unwrap_err(), Refusal::Total { max: 3 });
        drop(a1);
        assert_eq!(l.total(), 2);
        let _a3 = l.admit(a).unwrap();
        // The IPv4-mapped form of a counts as a.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(matches!(l.admit(mapped), Err(Refusal::Total { .. } | Refusal::PerIp { .. })));
    }

    #[test]
    fn zero_means_unlimited() {
        let l = ConnLimits::new(0, 0);
        let ip: IpAddr = "::1".parse().unwrap();
        let permits: Vec<ConnPermit> = (0..1000).map(|_| l.admit(ip).unwrap()).collect();
        assert_eq!(l.total(), 1000);
        drop(permits);
        assert_eq!(l.total(), 0);
    }
}
