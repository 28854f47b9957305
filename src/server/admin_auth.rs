//! Who may run the admin server's commands that list sessions, connections and watches
//! (`dump`, `connections`, `stats`, `watches`, `watches_by_path`, `watch_summary`): ZooKeeper
//! 3.9's admin authentication, applied to those commands. A command whose four-letter alias is
//! in `4lw.commands.whitelist` is open (the operator chose to publish it, as on the client
//! port); any other of them needs an `Authorization: <scheme> [<auth data>]` header (ZooKeeper's
//! format: `digest user:password`, or `ip` alone) whose ids hold every permission bit of
//! `ADMIN_AUTH_PERMS` on the root znode's ACL.
//! Rules: pure (the caller brings the header, the TCP peer address and the root's ACL); each
//! permission bit is checked on its own, so an id with only READ never passes for ALL
//! (CVE-2025-58457 was a check that any one bit sufficed); the `ip` scheme's id is the TCP
//! peer's address and nothing the request says (no `X-Forwarded-For`: CVE-2024-51504).

use crate::proto::opcode::perms;
use crate::proto::{Acl, Id};
use crate::tree::acl::{self, SCHEME_DIGEST, SCHEME_IP};
use std::net::IpAddr;

/// The permissions a caller needs on `/` for a protected command: all of them, as
/// ZooKeeper's admin commands that need auth (snapshot, restore, shed_connections) ask.
pub const ADMIN_AUTH_PERMS: i32 = perms::ALL;

/// The four-letter aliases of the commands that list sessions, connections or watches.
pub const PROTECTED_ALIASES: &[&str] = &["cons", "stat", "dump", "wchc", "wchp", "wchs"];

/// True for a command (by four-letter alias) that lists sessions, connections or watches.
pub fn protected(alias: &str) -> bool {
    PROTECTED_ALIASES.contains(&alias)
}

/// Why a protected command is refused; each maps to ZooKeeper's status and message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization` header (401).
    Missing,
    /// A header that names no known scheme or is malformed (401).
    NotAuthenticated,
    /// Authenticated ids that lack a needed permission on `/` (403).
    NotAuthorized,
}

impl Denied {
    pub fn status(self) -> u16 {
        match self {
            Denied::Missing | Denied::NotAuthenticated => 401,
            Denied::NotAuthorized => 403,
        }
    }

    /// ZooKeeper's messages (`Commands.runCommand`).
    pub fn message(self) -> &'static str {
        match self {
            Denied::Missing => "Auth info is missing for the command",
            Denied::NotAuthenticated => "Not authenticated",
            Denied::NotAuthorized => "Not authorized",
        }
    }
}

/// The ids an `Authorization` header grants: `digest user:password` (plus `super` when it
/// matches the super digest), or `ip` (the TCP peer's IPv4 address; the header's own data, if
/// any, is ignored as ZooKeeper ignores it). A header of more than two space-separated parts,
/// or of another scheme, authenticates nobody.
pub fn authenticate(header: Option<&str>, peer: IpAddr, super_digest: Option<&str>) -> Result<Vec<Id>, Denied> {
    let header = header.ok_or(Denied::Missing)?;
    let parts: Vec<&str> = header.split(' ').collect();
    if parts.is_empty() || parts.len() > 2 {
        return Err(Denied::NotAuthenticated);
    }
    match (parts[0], parts.get(1)) {
        (SCHEME_DIGEST, Some(user_password)) => Ok(acl::digest_auth_ids(user_password.as_bytes(), super_digest)),
        (SCHEME_IP, _) => {
            let addr = match peer {
                IpAddr::V4(v4) => v4,
                IpAddr::V6(v6) => v6.to_ipv4_mapped().ok_or(Denied::NotAuthenticated)?,
            };
            Ok(vec![Id { scheme: SCHEME_IP.to_string(), id: addr.to_string() }])
        }
        _ => Err(Denied::NotAuthenticated),
    }
}

/// Checks that `ids` hold every bit of `needed` on a node whose ACL is `node_acl`, one bit at
/// a time (an ACL entry may grant some bits and another entry the rest).
pub fn authorize(node_acl: &[Acl], ids: &[Id], needed: i32) -> Result<(), Denied> {
    let mut bit = 1;
    while bit <= needed && bit > 0 {
        if needed & bit != 0 && !acl::check(node_acl, bit, ids) {
            return Err(Denied::NotAuthorized);
        }
        bit <<= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn entry(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl { perms, id: Id { scheme: scheme.into(), id: id.into() } }
    }

    #[test]
    fn a_missing_or_unknown_header_authenticates_nobody() {
        assert_eq!(authenticate(None, LOCAL, None), Err(Denied::Missing));
        for h in ["", "digest", "sasl bob", "x509", "digest a:b extra", "Basic Ym9iOnB3"] {
            assert!(authenticate(Some(h), LOCAL, None).is_err(), "{h:?}");
        }
    }

    #[test]
    fn each_permission_bit_is_checked_on_its_own() {
        let ids = authenticate(Some("digest reader:pw"), LOCAL, None).unwrap();
        let reader = acl::digest_of("reader:pw");
        // READ only: the old any-bit check would have let ALL through (CVE-2025-58457).
        let root = vec![entry(perms::READ, SCHEME_DIGEST, &reader)];
        assert!(acl::check(&root, perms::ALL, &ids), "the any-bit check this guards against");
        assert_eq!(authorize(&root, &ids, ADMIN_AUTH_PERMS), Err(Denied::NotAuthorized));
        // Every bit but ADMIN.
        let root = vec![entry(perms::ALL & !perms::ADMIN, SCHEME_DIGEST, &reader)];
        assert_eq!(authorize(&root, &ids, ADMIN_AUTH_PERMS), Err(Denied::NotAuthorized));
        // The bits split over two entries of the same id: all held.
        let root = vec![
            entry(perms::READ | perms::WRITE, SCHEME_DIGEST, &reader),
            entry(perms::CREATE | perms::DELETE | perms::ADMIN, SCHEME_DIGEST, &reader),
        ];
        assert_eq!(authorize(&root, &ids, ADMIN_AUTH_PERMS), Ok(()));
        // Someone else's password.
        let other = authenticate(Some("digest reader:wrong"), LOCAL, None).unwrap();
        assert_eq!(authorize(&root, &other, ADMIN_AUTH_PERMS), Err(Denied::NotAuthorized));
    }

    #[test]
    fn the_super_digest_passes_and_ip_is_the_peer_address() {
        let super_digest = acl::digest_of("super:s3cret");
        let ids = authenticate(Some("digest super:s3cret"), LOCAL, Some(&super_digest)).unwrap();
        let root = vec![entry(perms::READ, SCHEME_IP, "10.0.0.1")];
        assert_eq!(authorize(&root, &ids, ADMIN_AUTH_PERMS), Ok(()));
        let root = vec![entry(perms::ALL, SCHEME_IP, "10.1.2.0/24")];
        let from_lan = authenticate(Some("ip"), IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), None).unwrap();
        assert_eq!(authorize(&root, &from_lan, ADMIN_AUTH_PERMS), Ok(()));
        // The header's data is not an address claim.
        let claimed = authenticate(Some("ip 10.1.2.3"), LOCAL, None).unwrap();
        assert_eq!(claimed[0].id, "127.0.0.1");
        assert_eq!(authorize(&root, &claimed, ADMIN_AUTH_PERMS), Err(Denied::NotAuthorized));
    }
}
