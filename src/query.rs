//! Reads answered from a replica: exists, getData, getChildren(2), getACL, getEphemerals,
//! getAllChildrenNumber, multiRead and a top-level check (13, a read as in ZooKeeper 3.9),
//! with ZooKeeper's permission checks and error codes.
//! Rules: pure (a tree, or for a one-node read that znode, and a request in; a response and
//! the watch to register out); reads do no path validation beyond ZooKeeper's (an invalid path
//! is simply NoNode, except exists with a NUL); a watch is registered only where ZooKeeper
//! registers one.

use crate::proto::opcode::perms;
use crate::proto::reply::{MultiReadResult, Response};
use crate::proto::request::Request;
use crate::proto::{ErrorCode, Id};
use crate::tree::{acl, DataTree, Znode};

/// A watch a read asks to leave behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchRequest {
    /// exists or getData with watch=true: the data table (exists also on a missing node).
    Data(String),
    /// getChildren with watch=true: the child table.
    Child(String),
}

/// The outcome of one read: the reply (or its error) and the watch to register, if any.
pub struct ReadOutcome {
    pub result: Result<Response, ErrorCode>,
    pub watch: Option<WatchRequest>,
}

fn outcome(result: Result<Response, ErrorCode>) -> ReadOutcome {
    ReadOutcome { result, watch: None }
}

/// The path of a read whose answer is one znode's alone (its data, stat, ACL or children):
/// exists, getData, getChildren(2), getACL. `read_node` answers these from that znode.
pub fn one_node_path(req: &Request) -> Option<&str> {
    match req {
        Request::GetData { path, .. }
        | Request::Exists { path, .. }
        | Request::GetAcl { path }
        | Request::GetChildren { path, .. }
        | Request::GetChildren2 { path, .. } => Some(path),
        _ => None,
    }
}

/// Answers a read of one znode (`one_node_path`) from `node`, the znode at its path or None.
/// `None` when `req` is not such a read.
pub fn read_node(node: Option<&Znode>, req: &Request, auth: &[Id]) -> Option<ReadOutcome> {
    Some(match req {
        Request::Exists { path, watch } => {
            if path.contains('\0') {
                return Some(outcome(Err(ErrorCode::BadArguments)));
            }
            match node {
                Some(node) => {
                    if !acl::check(&node.acl, perms::READ, auth) {
                        return Some(outcome(Err(ErrorCode::NoAuth)));
                    }
                    ReadOutcome {
                        result: Ok(Response::Stat(node.stat())),
                        watch: watch.then(|| WatchRequest::Data(path.clone())),
                    }
                }
                None => ReadOutcome {
                    result: Err(ErrorCode::NoNode),
                    watch: watch.then(|| WatchRequest::Data(path.clone())),
                },
            }
        }
        Request::GetData { path, watch } => match get_data(node, auth) {
            Ok(r) => ReadOutcome { result: Ok(r), watch: watch.then(|| WatchRequest::Data(path.clone())) },
            Err(e) => outcome(Err(e)),
        },
        Request::GetChildren { path, watch } | Request::GetChildren2 { path, watch } => {
            let with_stat = matches!(req, Request::GetChildren2 { .. });
            match get_children(node, auth, with_stat) {
                Ok(r) => ReadOutcome { result: Ok(r), watch: watch.then(|| WatchRequest::Child(path.clone())) },
                Err(e) => outcome(Err(e)),
            }
        }
        Request::GetAcl { .. } => outcome(get_acl(node, auth)),
        _ => return None,
    })
}

/// Answers a read request. `None` when `req` is not a read this module serves.
pub fn read(tree: &DataTree, req: &Request, auth: &[Id], session_id: i64) -> Option<ReadOutcome> {
    if let Some(path) = one_node_path(req) {
        return read_node(tree.get(path), req, auth);
    }
    Some(match req {
        Request::GetAllChildrenNumber { path } => outcome(match tree.get(path) {
            None => Err(ErrorCode::NoNode),
            Some(n) if !acl::check(&n.acl, perms::READ, auth) => Err(ErrorCode::NoAuth),
            Some(_) => Ok(Response::AllChildrenNumber(tree.descendant_count(path) as i32)),
        }),
        Request::Check { path, version } => outcome(match tree.get(path) {
            None => Err(ErrorCode::NoNode),
            Some(n) if !acl::check(&n.acl, perms::READ, auth) => Err(ErrorCode::NoAuth),
            Some(n) if *version != -1 && n.stat().version != *version => Err(ErrorCode::BadVersion),
            Some(_) => Ok(Response::None),
        }),
        Request::GetEphemerals { prefix } => {
            let paths: Vec<String> = tree
                .ephemerals_of(session_id)
                .filter(|p| p.starts_with(prefix.as_str()))
                .map(|p| p.to_string())
                .collect();
            outcome(Ok(Response::Ephemerals(paths)))
        }
        Request::MultiRead(ops) => {
            let results = ops
                .iter()
                .map(|op| match op {
                    Request::GetData { path, .. } => match get_data(tree.get(path), auth) {
                        Ok(Response::GetData { data, stat }) => MultiReadResult::GetData { data, stat },
                        Ok(_) => MultiReadResult::Error(ErrorCode::SystemError.code()),
                        Err(e) => MultiReadResult::Error(e.code()),
                    },
                    Request::GetChildren { path, .. } => match get_children(tree.get(path), auth, false) {
                        Ok(Response::Children(children)) => MultiReadResult::GetChildren { children },
                        Ok(_) => MultiReadResult::Error(ErrorCode::SystemError.code()),
                        Err(e) => MultiReadResult::Error(e.code()),
                    },
                    _ => MultiReadResult::Error(ErrorCode::MarshallingError.code()),
                })
                .collect();
            outcome(Ok(Response::MultiRead(results)))
        }
        _ => return None,
    })
}

fn get_data(node: Option<&Znode>, auth: &[Id]) -> Result<Response, ErrorCode> {
    let node = node.ok_or(ErrorCode::NoNode)?;
    if !acl::check(&node.acl, perms::READ, auth) {
        return Err(ErrorCode::NoAuth);
    }
    Ok(Response::GetData { data: node.data.clone(), stat: node.stat() })
}

fn get_children(node: Option<&Znode>, auth: &[Id], with_stat: bool) -> Result<Response, ErrorCode> {
    let node = node.ok_or(ErrorCode::NoNode)?;
    if !acl::check(&node.acl, perms::READ, auth) {
        return Err(ErrorCode::NoAuth);
    }
    let children: Vec<String> = node.children.iter().map(|c| c.to_string()).collect();
    Ok(if with_stat { Response::Children2 { children, stat: node.stat() } } else { Response::Children(children) })
}

fn get_acl(node: Option<&Znode>, auth: &[Id]) -> Result<Response, ErrorCode> {
    let node = node.ok_or(ErrorCode::NoNode)?;
    let admin = acl::check(&node.acl, perms::ADMIN, auth);
    if !admin && !acl::check(&node.acl, perms::READ, auth) {
        return Err(ErrorCode::NoAuth);
    }
    let list = if admin { node.acl.to_vec() } else { acl::redact_digests(&node.acl) };
    Ok(Response::GetAcl { acl: list, stat: node.stat() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Acl, Stat};
    use bytes::Bytes;
    use std::sync::Arc;

    fn tree() -> DataTree {
        let mut t = DataTree::new();
        let digest = Id { scheme: "digest".into(), id: acl::digest_of("bob:pw") };
        let secret: Arc<[Acl]> = vec![Acl { perms: perms::READ, id: digest.clone() }].into();
        t.create_node("/open", Some(Bytes::from_static(b"hi")), acl::open_acl_unsafe().into(), 0, 1, 1);
        t.create_node("/open/a", None::<&[u8]>, acl::open_acl_unsafe().into(), 0, 2, 2);
        t.create_node("/secret", None::<&[u8]>, secret, 0, 3, 3);
        t.add_session(9, 4000);
        t.create_node("/open/e", None::<&[u8]>, acl::open_acl_unsafe().into(), 9, 4, 4);
        t
    }

    #[test]
    fn exists_leaves_a_watch_on_a_missing_node_but_get_data_does_not() {
        let t = tree();
        let r = read(&t, &Request::Exists { path: "/nope".into(), watch: true }, &[], 0).unwrap();
        assert_eq!(r.result.err(), Some(ErrorCode::NoNode));
        assert_eq!(r.watch, Some(WatchRequest::Data("/nope".into())));
        let r = read(&t, &Request::GetData { path: "/nope".into(), watch: true }, &[], 0).unwrap();
        assert_eq!((r.result.err(), r.watch), (Some(ErrorCode::NoNode), None));
        let r = read(&t, &Request::Exists { path: "/a\0".into(), watch: false }, &[], 0).unwrap();
        assert_eq!(r.result.err(), Some(ErrorCode::BadArguments));
    }

    #[test]
    fn reads_check_read_permission_and_get_acl_redacts_without_admin() {
        let t = tree();
        let r = read(&t, &Request::GetData { path: "/secret".into(), watch: false }, &[], 0).unwrap();
        assert_eq!(r.result.err(), Some(ErrorCode::NoAuth));
        let bob = vec![Id { scheme: "digest".into(), id: acl::digest_of("bob:pw") }];
        let r = read(&t, &Request::GetAcl { path: "/secret".into() }, &bob, 0).unwrap();
        match r.result {
            Ok(Response::GetAcl { acl, .. }) => assert_eq!(acl[0].id.id, "bob:x"),
            _ => panic!("getACL failed"),
        }
    }

    #[test]
    fn children_ephemerals_and_counts() {
        let t = tree();
        match read(&t, &Request::GetChildren2 { path: "/open".into(), watch: true }, &[], 0).unwrap() {
            ReadOutcome { result: Ok(Response::Children2 { children, stat }), watch } => {
                assert_eq!(children, vec!["a".to_string(), "e".to_string()]);
                assert_eq!(stat.num_children, 2);
                assert_eq!(watch, Some(WatchRequest::Child("/open".into())));
            }
            _ => panic!("getChildren2 failed"),
        }
        match read(&t, &Request::GetEphemerals { prefix: "/".into() }, &[], 9).unwrap().result {
            Ok(Response::Ephemerals(p)) => assert_eq!(p, vec!["/open/e".to_string()]),
            _ => panic!("getEphemerals failed"),
        }
        match read(&t, &Request::GetAllChildrenNumber { path: "/".into() }, &[], 0).unwrap().result {
            Ok(Response::AllChildrenNumber(n)) => assert_eq!(n, 7),
            _ => panic!("getAllChildrenNumber failed"),
        }
        let _ = Stat::default();
    }
}
