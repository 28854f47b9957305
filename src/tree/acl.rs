//! ACL schemes and checks (wire-protocol §5): world, auth, digest, ip (IPv4 with CIDR, as
//! ZooKeeper 3.8 validates and matches it) and super.
//! Rules: pure; a check passes if the ACL is empty, the caller holds `super`, or an entry with
//! the needed bit matches one of the caller's ids; ACLs written by clients are validated and
//! fixed up (auth expanded, duplicates dropped) before they reach a txn.

use crate::proto::opcode::perms;
use crate::proto::{Acl, ErrorCode, Id};
use base64::Engine;
use sha1::{Digest, Sha1};

pub const SCHEME_WORLD: &str = "world";
pub const SCHEME_AUTH: &str = "auth";
pub const SCHEME_DIGEST: &str = "digest";
pub const SCHEME_IP: &str = "ip";
pub const SCHEME_SUPER: &str = "super";
/// A verified TLS client certificate's subject DN (ZooKeeper's X509AuthenticationProvider).
pub const SCHEME_X509: &str = "x509";
/// ZooKeeper's SASLAuthenticationProvider: the id a SASL exchange proved (`crate::sasl`).
pub const SCHEME_SASL: &str = "sasl";

/// `world:anyone` with every permission: ZooKeeper's OPEN_ACL_UNSAFE.
/// Permission letters in ZooKeeper's order (`cdrwa`: zkCli, `getPermString`, the audit log).
pub const PERM_LETTERS: [(char, i32); 5] =
    [('c', perms::CREATE), ('d', perms::DELETE), ('r', perms::READ), ('w', perms::WRITE), ('a', perms::ADMIN)];

/// Permission bits as letters, in ZooKeeper's order: `cdrwa`.
pub fn perm_string(bits: i32) -> String {
    PERM_LETTERS.iter().filter(|(_, b)| bits & b != 0).map(|(c, _)| *c).collect()
}

pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl { perms: perms::ALL, id: world_anyone() }]
}

/// `world:anyone` with READ only: the ACL of /zookeeper/config.
pub fn read_acl_unsafe() -> Vec<Acl> {
    vec![Acl { perms: perms::READ, id: world_anyone() }]
}

fn world_anyone() -> Id {
    Id { scheme: SCHEME_WORLD.to_string(), id: "anyone".to_string() }
}

/// `user:BASE64(SHA1("user:password"))` for a digest auth of `user:password`.
pub fn digest_of(user_password: &str) -> String {
    let user = user_password.split(':').next().unwrap_or("");
    let hash = Sha1::digest(user_password.as_bytes());
    format!("{}:{}", user, base64::engine::general_purpose::STANDARD.encode(hash))
}

/// The ids a digest AuthPacket grants: `digest:<digest>`, plus `super:` when it matches the
/// configured super digest. As in ZooKeeper, any bytes are accepted (decoded as Java decodes
/// them, bad UTF-8 as U+FFFD): without a colon the whole text is the user name
/// (`nocolon:BASE64(SHA1("nocolon"))`).
pub fn digest_auth_ids(auth: &[u8], super_digest: Option<&str>) -> Vec<Id> {
    let text = String::from_utf8_lossy(auth);
    let digest = digest_of(&text);
    let mut ids = Vec::with_capacity(2);
    if super_digest == Some(digest.as_str()) {
        ids.push(Id { scheme: SCHEME_SUPER.to_string(), id: String::new() });
    }
    ids.push(Id { scheme: SCHEME_DIGEST.to_string(), id: digest });
    ids
}

/// Java's `Integer.parseInt` for the small numbers of an ip id: an optional sign, then
/// decimal digits (leading zeros allowed).
fn java_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok()
}

/// Parses `a.b.c.d` or `a.b.c.d/bits` as ZooKeeper 3.8's IPAuthenticationProvider does:
/// IPv4 only (it has no IPv6 support: `ip:::1` is InvalidACL there), four dot-separated
/// Java ints of 0..=255, bits 0..=32.
fn parse_ip_cidr(id: &str) -> Option<(u32, u32)> {
    let (addr, bits) = match id.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (id, None),
    };
    let parts: Vec<&str> = addr.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut ip = 0u32;
    for p in parts {
        let v = java_int(p).filter(|v| (0..=255).contains(v))?;
        ip = ip << 8 | v as u32;
    }
    let bits = match bits {
        Some(b) => java_int(b).filter(|b| (0..=32).contains(b))? as u32,
        None => 32,
    };
    Some((ip, bits))
}

fn ip_matches(acl_id: &str, caller: &str) -> bool {
    let (Some((net, bits)), Some((addr, _))) = (parse_ip_cidr(acl_id), parse_ip_cidr(caller)) else {
        return false;
    };
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    (net & mask) == (addr & mask)
}

fn id_is_valid(id: &Id) -> bool {
    match id.scheme.as_str() {
        SCHEME_WORLD => id.id == "anyone",
        SCHEME_DIGEST => id.id.trim_end_matches(':').split(':').count() == 2,
        SCHEME_IP => parse_ip_cidr(&id.id).is_some(),
        SCHEME_X509 => !id.id.is_empty(),
        SCHEME_SASL => crate::sasl::id_is_valid(&id.id),
        _ => false,
    }
}

/// True when a caller holding `ids` has `perm` on a node whose ACL is `acl`.
pub fn check(acl: &[Acl], perm: i32, ids: &[Id]) -> bool {
    if acl.is_empty() || ids.iter().any(|i| i.scheme == SCHEME_SUPER) {
        return true;
    }
    acl.iter().filter(|a| a.perms & perm != 0).any(|a| {
        if a.id.scheme == SCHEME_WORLD && a.id.id == "anyone" {
            return true;
        }
        ids.iter().any(|caller| {
            caller.scheme == a.id.scheme
                && match a.id.scheme.as_str() {
                    SCHEME_IP => ip_matches(&a.id.id, &caller.id),
                    // SASLAuthenticationProvider.matches: a SASL user named "super" matches
                    // every sasl entry.
                    SCHEME_SASL => caller.id == a.id.id || caller.id == "super",
                    _ => caller.id == a.id.id,
                }
        })
    })
}

/// Validates a client-supplied ACL and expands `auth` entries into the caller's
/// authenticated ids; drops duplicates (in linear time: a frame may hold tens of thousands of
/// entries). InvalidAcl on an empty list, an unknown scheme, an invalid id, `auth` without any
/// authenticated id, or when `fits` refuses an entry about to be added (the caller's bound on
/// the list's size: an `auth` entry becomes one entry per id, so the result can be far larger
/// than the request).
pub fn fixup(acl: Option<&[Acl]>, ids: &[Id], mut fits: impl FnMut(&Acl) -> bool) -> Result<Vec<Acl>, ErrorCode> {
    let acl = acl.filter(|a| !a.is_empty()).ok_or(ErrorCode::InvalidAcl)?;
    let mut out: Vec<Acl> = Vec::with_capacity(acl.len());
    let mut seen: std::collections::HashSet<Acl> = std::collections::HashSet::with_capacity(acl.len());
    let mut push = |a: Acl, out: &mut Vec<Acl>| {
        if seen.contains(&a) {
            return Ok(());
        }
        if !fits(&a) {
            return Err(ErrorCode::InvalidAcl);
        }
        seen.insert(a.clone());
        out.push(a);
        Ok(())
    };
    for a in acl {
        if a.id.scheme == SCHEME_AUTH {
            let mut any = false;
            // The ids of providers that authenticate (ZooKeeper's isAuthenticated): digest,
            // x509 and sasl, not ip.
            for caller in ids.iter().filter(|i| [SCHEME_DIGEST, SCHEME_X509, SCHEME_SASL].contains(&i.scheme.as_str()))
            {
                any = true;
                push(Acl { perms: a.perms, id: caller.clone() }, &mut out)?;
            }
            if !any {
                return Err(ErrorCode::InvalidAcl);
            }
        } else if id_is_valid(&a.id) {
            push(a.clone(), &mut out)?;
        } else {
            return Err(ErrorCode::InvalidAcl);
        }
    }
    Ok(out)
}

/// getACL without ADMIN: digest ids come back as `user:x`.
pub fn redact_digests(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|a| {
            if a.id.scheme == SCHEME_DIGEST {
                let user = a.id.id.split(':').next().unwrap_or("");
                Acl { perms: a.perms, id: Id { scheme: a.id.scheme.clone(), id: format!("{user}:x") } }
            } else {
                a.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str, i: &str) -> Id {
        Id { scheme: s.into(), id: i.into() }
    }

    /// sasl ids (issue 15): exact match, "super" matches every sasl entry (Apache's
    /// SASLAuthenticationProvider.matches), `auth` expands to them, KerberosName validity.
    #[test]
    fn sasl_ids_match_expand_and_validate() {
        let acl = vec![Acl { perms: perms::ALL, id: id("sasl", "bob") }];
        assert!(check(&acl, perms::WRITE, &[id("ip", "127.0.0.1"), id("sasl", "bob")]));
        assert!(!check(&acl, perms::READ, &[id("sasl", "alice")]));
        assert!(!check(&acl, perms::READ, &[id("digest", "bob")]));
        assert!(check(&acl, perms::READ, &[id("sasl", "super")]));
        let auth = [Acl { perms: perms::READ, id: id("auth", "") }];
        let out = fixup(Some(&auth), &[id("ip", "127.0.0.1"), id("sasl", "bob")], |_| true).unwrap();
        assert_eq!(out, [Acl { perms: perms::READ, id: id("sasl", "bob") }]);
        let ok = [Acl { perms: perms::READ, id: id("sasl", "zk/host@EXAMPLE.COM") }];
        assert!(fixup(Some(&ok), &[], |_| true).is_ok());
        let bad = [Acl { perms: perms::READ, id: id("sasl", "a@b@c") }];
        assert_eq!(fixup(Some(&bad), &[], |_| true), Err(ErrorCode::InvalidAcl));
    }

    #[test]
    fn digest_matches_zookeeper() {
        assert_eq!(digest_of("alice:secret"), "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=");
    }

    #[test]
    fn checks_world_digest_ip_and_super() {
        let acl = vec![
            Acl { perms: perms::READ, id: id("world", "anyone") },
            Acl { perms: perms::ALL, id: id("digest", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=") },
            Acl { perms: perms::WRITE, id: id("ip", "10.1.0.0/16") },
        ];
        let anon = vec![id("ip", "127.0.0.1")];
        assert!(check(&acl, perms::READ, &anon));
        assert!(!check(&acl, perms::WRITE, &anon));
        assert!(check(&acl, perms::WRITE, &[id("ip", "10.1.200.3")]));
        assert!(!check(&acl, perms::WRITE, &[id("ip", "10.2.0.1")]));
        let alice = vec![id("digest", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=")];
        assert!(check(&acl, perms::ADMIN, &alice));
        assert!(check(&acl, perms::ADMIN, &[id("super", "")]));
        assert!(check(&[], perms::ADMIN, &anon));
    }

    #[test]
    fn fixup_expands_auth_and_rejects_bad_ids() {
        let alice = vec![id("ip", "127.0.0.1"), id("digest", "alice:h")];
        let auth = vec![Acl { perms: 31, id: id("auth", "") }];
        assert_eq!(fixup(Some(&auth), &alice, |_| true).unwrap(), vec![Acl { perms: 31, id: id("digest", "alice:h") }]);
        assert_eq!(fixup(Some(&auth), &alice[..1], |_| true), Err(ErrorCode::InvalidAcl));
        assert_eq!(fixup(Some(&[]), &alice, |_| true), Err(ErrorCode::InvalidAcl));
        assert_eq!(fixup(None, &alice, |_| true), Err(ErrorCode::InvalidAcl));
        for bad in [
            id("world", "x"),
            id("nope", "x"),
            id("digest", "nocolon"),
            id("ip", "1.2.3.4/40"),
            id("ip", "::1"),
            id("ip", "fe80::1/64"),
            id("ip", "1.2.3"),
            id("ip", "1.2.3.256"),
            id("ip", "1.2.3.4/"),
        ] {
            assert_eq!(fixup(Some(&[Acl { perms: 1, id: bad }]), &alice, |_| true), Err(ErrorCode::InvalidAcl));
        }
        let dup = vec![Acl { perms: 1, id: id("world", "anyone") }; 2];
        assert_eq!(fixup(Some(&dup), &alice, |_| true).unwrap().len(), 1);
        // The caller's size bound refuses the list.
        let two = vec![Acl { perms: 1, id: id("world", "anyone") }, Acl { perms: 2, id: id("world", "anyone") }];
        let mut room = 1;
        let fits = |_: &Acl| std::mem::replace(&mut room, 0) == 1;
        assert_eq!(fixup(Some(&two), &alice, fits), Err(ErrorCode::InvalidAcl));
    }

    #[test]
    fn digest_auth_grants_super_when_configured() {
        let sup = digest_of("super:secret");
        let ids = digest_auth_ids(b"super:secret", Some(&sup));
        assert!(ids.iter().any(|i| i.scheme == "super"));
        // ZooKeeper takes a credential without a colon too: the whole text is the user.
        let nocolon = digest_auth_ids(b"nocolon", None);
        assert_eq!(nocolon.len(), 1);
        assert!(nocolon[0].id.starts_with("nocolon:"), "{:?}", nocolon);
        assert_eq!(redact_digests(&[Acl { perms: 1, id: id("digest", "bob:abc=") }])[0].id.id, "bob:x");
    }
}
