//! ACL values a client passes to create and setACL: the permission bits and ZooKeeper's three
//! well-known ACLs (`ZooDefs.Ids`).
//! Rules: the values are exactly Java's; the lists are built once and shared.

use std::sync::LazyLock;

pub use ringkeeper_proto::opcode::perms;
use ringkeeper_proto::records::{Acl, Id};

/// `world:anyone`: every client.
pub fn anyone_id() -> Id {
    Id { scheme: "world".into(), id: "anyone".into() }
}

/// `auth:` (empty id): on create/setACL the server replaces it with every authenticated id
/// the caller holds.
pub fn auth_ids() -> Id {
    Id { scheme: "auth".into(), id: String::new() }
}

/// Everyone may do everything: `[(ALL, world:anyone)]`.
pub static OPEN_ACL_UNSAFE: LazyLock<Vec<Acl>> = LazyLock::new(|| vec![Acl { perms: perms::ALL, id: anyone_id() }]);
/// The creator's authenticated ids get everything: `[(ALL, auth:)]`.
pub static CREATOR_ALL_ACL: LazyLock<Vec<Acl>> = LazyLock::new(|| vec![Acl { perms: perms::ALL, id: auth_ids() }]);
/// Everyone may read: `[(READ, world:anyone)]`.
pub static READ_ACL_UNSAFE: LazyLock<Vec<Acl>> = LazyLock::new(|| vec![Acl { perms: perms::READ, id: anyone_id() }]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_acls_are_javas() {
        assert_eq!(OPEN_ACL_UNSAFE.len(), 1);
        assert_eq!(OPEN_ACL_UNSAFE[0].perms, 31);
        assert_eq!((OPEN_ACL_UNSAFE[0].id.scheme.as_str(), OPEN_ACL_UNSAFE[0].id.id.as_str()), ("world", "anyone"));
        assert_eq!(CREATOR_ALL_ACL[0].perms, 31);
        assert_eq!((CREATOR_ALL_ACL[0].id.scheme.as_str(), CREATOR_ALL_ACL[0].id.id.as_str()), ("auth", ""));
        assert_eq!(READ_ACL_UNSAFE[0].perms, 1);
        assert_eq!(READ_ACL_UNSAFE[0].id, anyone_id());
    }
}
