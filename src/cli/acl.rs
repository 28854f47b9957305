//! ACLs as zkCli writes and prints them: `scheme:id:perms` entries separated by commas
//! (`world:anyone:cdrwa`, `digest:user:hash:r`, `auth::cdrwa`, `ip:10.0.0.0/8:r`; the id is
//! everything between the first and the last colon), the permission letters in zkCli's order
//! (`cdrwa`), and getAcl's two-line form of an entry (`'world,'anyone` then `: cdrwa`).
//! Rules: pure; a malformed entry is skipped with zkCli's warning, an unknown permission
//! letter is ignored with zkCli's warning (the server decides what an empty list means).

use crate::client::types::{Acl, Id};

/// A parsed ACL argument: the entries, and a warning line for each part that was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclSpec {
    pub acl: Vec<Acl>,
    pub warnings: Vec<String>,
}

/// Parses zkCli's ACL syntax.
pub fn parse_acl(s: &str) -> AclSpec {
    let mut out = AclSpec { acl: Vec::new(), warnings: Vec::new() };
    for entry in s.split(',') {
        let (Some(first), Some(last)) = (entry.find(':'), entry.rfind(':')) else {
            out.warnings.push(format!("{entry} does not have the form scheme:id:perm"));
            continue;
        };
        if first == last {
            out.warnings.push(format!("{entry} does not have the form scheme:id:perm"));
            continue;
        }
        let mut bits = 0;
        for c in entry[last + 1..].chars() {
            match PERM_LETTERS.iter().find(|(l, _)| *l == c) {
                Some((_, b)) => bits |= b,
                None => out.warnings.push(format!("Unknown perm type: {c}")),
            }
        }
        out.acl.push(Acl {
            perms: bits,
            id: Id { scheme: entry[..first].to_string(), id: entry[first + 1..last].to_string() },
        });
    }
    out
}

pub use crate::tree::acl::perm_string;
use crate::tree::acl::PERM_LETTERS;

/// Jute's CSV escaping of a string, which getAcl's output shows.
fn csv_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push_str("%00"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            ',' => out.push_str("%2C"),
            '}' => out.push_str("%7D"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
    out
}

/// getAcl's lines for one entry: the id as Jute prints it (`'scheme,'id`), then `: perms`.
pub fn acl_lines(acl: &Acl) -> [String; 2] {
    [format!("'{},'{}", csv_escape(&acl.id.scheme), csv_escape(&acl.id.id)), format!(": {}", perm_string(acl.perms))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::acl::perms;

    fn acl(scheme: &str, id: &str, perms: i32) -> Acl {
        Acl { perms, id: Id { scheme: scheme.into(), id: id.into() } }
    }

    #[test]
    fn entries_take_the_id_between_the_first_and_last_colon() {
        let a = parse_acl("world:anyone:cdrwa,digest:u:c2VjcmV0+/=:r,auth::rw,ip:10.0.0.0/8:a");
        assert_eq!(a.warnings, Vec::<String>::new());
        assert_eq!(
            a.acl,
            vec![
                acl("world", "anyone", perms::ALL),
                acl("digest", "u:c2VjcmV0+/=", perms::READ),
                acl("auth", "", perms::READ | perms::WRITE),
                acl("ip", "10.0.0.0/8", perms::ADMIN),
            ]
        );
    }

    #[test]
    fn malformed_entries_and_letters_are_warned_about() {
        let a = parse_acl("foo,world:anyone,ip:1.2.3.4:rxz");
        assert_eq!(
            a.warnings,
            vec![
                "foo does not have the form scheme:id:perm",
                "world:anyone does not have the form scheme:id:perm",
                "Unknown perm type: x",
                "Unknown perm type: z",
            ]
        );
        assert_eq!(a.acl, vec![acl("ip", "1.2.3.4", perms::READ)]);
        // No permission letters: an entry with no rights, as zkCli sends it.
        assert_eq!(parse_acl("world:anyone:").acl, vec![acl("world", "anyone", 0)]);
    }

    #[test]
    fn printed_as_getacl_prints_them() {
        assert_eq!(perm_string(perms::ALL), "cdrwa");
        assert_eq!(perm_string(perms::READ | perms::ADMIN), "ra");
        assert_eq!(perm_string(0), "");
        assert_eq!(acl_lines(&acl("world", "anyone", perms::ALL)), ["'world,'anyone".to_string(), ": cdrwa".into()]);
        assert_eq!(acl_lines(&acl("x509", "CN=a,O=b%}", 1))[0], "'x509,'CN=a%2CO=b%25%7D");
    }
}
