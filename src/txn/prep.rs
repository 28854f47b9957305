//! Prep: turns a client's write (validated against the latest state, including txns not yet
//! durable) into a txn op, following ZooKeeper's order of checks for each operation.
//! Rules: pure; the same tree and request give the same op; a failed check becomes
//! `TxnOp::Error` (or a failed multi), never a panic; no txn leaves here whose record is over
//! `PrepContext::txn_bytes_max` (what the log and the peer protocol carry, and recovery reads
//! back): only an ACL whose `auth` entries expand into many ids can reach it, and that ACL is
//! InvalidACL.

use super::codec::{acl_entry_encoded_len, op_encoded_len, TXN_HEADER_BYTES};
use super::{apply, TxnOp, WriteOp};
use crate::proto::opcode::{create_flags, perms};
use crate::proto::{ErrorCode, Id};
use crate::tree::datatree::{EPHEMERAL_OWNER_CONTAINER, EPHEMERAL_OWNER_TTL_MASK, TTL_MS_MAX};
use crate::tree::quota::{self, QuotaCheck};
use crate::tree::{acl, path, DataTree, NodeKind};

/// Who is writing, and the server settings that change validation.
pub struct PrepContext<'a> {
    pub session_id: i64,
    pub auth_ids: &'a [Id],
    pub extended_types_enabled: bool,
    /// The largest txn record allowed (`codec::txn_record_bytes_max` of jute.maxbuffer).
    pub txn_bytes_max: usize,
    /// zookeeper.enforceQuota: a create or setData past a quota's hard limit is QuotaExceeded.
    pub enforce_quota: bool,
}

impl PrepContext<'_> {
    /// Bytes an op's encoding may take in a record.
    fn op_bytes_max(&self) -> usize {
        self.txn_bytes_max.saturating_sub(TXN_HEADER_BYTES)
    }
}

type PrepResult<T = TxnOp> = Result<T, ErrorCode>;

/// Preps one write. Multi sub-ops are validated in order on an O(1) clone of the tree, so a
/// later op sees the effects of earlier ones; a failure anywhere fails the whole multi. Takes
/// the op by value: its path and data move into the txn op (a clone of the data and the
/// request's drop of it are two atomics on a count the client core's read buffer shares).
pub fn prep(tree: &DataTree, op: WriteOp, ctx: &PrepContext<'_>) -> TxnOp {
    match op {
        WriteOp::Multi(ops) => prep_multi(tree, ops, ctx),
        _ => prep_single(tree, op, ctx, ctx.op_bytes_max())
            .and_then(|op| if op_encoded_len(&op) <= ctx.op_bytes_max() { Ok(op) } else { Err(ErrorCode::InvalidAcl) })
            .unwrap_or_else(|e| TxnOp::Error { err: e.code() }),
    }
}

fn prep_multi(tree: &DataTree, ops: Vec<WriteOp>, ctx: &PrepContext<'_>) -> TxnOp {
    let count = ops.len();
    let mut scratch = tree.clone();
    let mut out = Vec::with_capacity(ops.len());
    let scratch_header = super::TxnHeader { zxid: tree.last_zxid(), session_id: ctx.session_id, cxid: 0, time_ms: 0 };
    // The multi's tag and count, then each sub-op's encoding.
    let mut used = op_encoded_len(&TxnOp::Multi(Vec::new()));
    for (i, op) in ops.into_iter().enumerate() {
        let room = ctx.op_bytes_max().saturating_sub(used);
        let r = if op.allowed_in_multi() {
            prep_single(&scratch, op, ctx, room).and_then(|op| {
                if op_encoded_len(&op) <= room {
                    Ok(op)
                } else {
                    Err(ErrorCode::InvalidAcl)
                }
            })
        } else {
            Err(ErrorCode::MarshallingError)
        };
        match r {
            Ok(txn_op) => {
                used += op_encoded_len(&txn_op);
                let txn = super::Txn { header: scratch_header, op: txn_op };
                apply_scratch(&mut scratch, &txn);
                out.push(txn.op);
            }
            Err(e) => {
                let mut errs: Vec<TxnOp> = (0..i).map(|_| TxnOp::Error { err: 0 }).collect();
                errs.push(TxnOp::Error { err: e.code() });
                errs.extend((i + 1..count).map(|_| TxnOp::Error { err: ErrorCode::RuntimeInconsistency.code() }));
                return TxnOp::Multi(errs);
            }
        }
    }
    TxnOp::Multi(out)
}

/// Applies a sub-op to the scratch tree without advancing its zxid.
fn apply_scratch(scratch: &mut DataTree, txn: &super::Txn) {
    let mut changes = Vec::new();
    let zxid = scratch.last_zxid();
    let mut t = txn.clone();
    // The scratch tree never advances; a zxid equal to its own keeps set_last_zxid quiet.
    t.header.zxid = zxid + 1;
    let _ = apply::apply(scratch, &t, &mut changes);
}

fn check_version(expected: i32, actual: i32) -> Result<(), ErrorCode> {
    if expected == -1 || expected == actual {
        Ok(())
    } else {
        Err(ErrorCode::BadVersion)
    }
}

/// The fix-up of a client's ACL, refused (InvalidACL) once its encoding would pass
/// `bytes_max`.
fn fixup_acl(
    acl_req: Option<&[crate::proto::Acl]>,
    ctx: &PrepContext<'_>,
    bytes_max: usize,
) -> PrepResult<Vec<crate::proto::Acl>> {
    let mut used = 4usize;
    acl::fixup(acl_req, ctx.auth_ids, |a| {
        used += acl_entry_encoded_len(a);
        used <= bytes_max
    })
}

/// Preps one op; `bytes_max` bounds its encoding (the caller checks the whole op; this stops
/// an ACL from growing past it while it is expanded).
fn prep_single(tree: &DataTree, op: WriteOp, ctx: &PrepContext<'_>, bytes_max: usize) -> PrepResult {
    match op {
        // Only an ensemble's leader with reconfigEnabled decides a reconfig (it knows the
        // quorum: `server::ensemble`); everywhere else it is what ZooKeeper answers first.
        WriteOp::Reconfig { .. } => Err(ErrorCode::ReconfigDisabled),
        WriteOp::Create { opcode, path, data, acl: acl_req, flags, ttl_ms } => {
            prep_create(tree, opcode, path, data, acl_req.as_deref(), flags, ttl_ms, ctx, bytes_max)
        }
        WriteOp::Delete { path: p, version } => {
            if !p.contains('/') || p.contains('\0') || path::is_reserved(&p) {
                return Err(ErrorCode::BadArguments);
            }
            let parent_path = path::parent(&p).ok_or(ErrorCode::BadArguments)?;
            let parent = tree.get(parent_path).ok_or(ErrorCode::NoNode)?;
            if !acl::check(&parent.acl, perms::DELETE, ctx.auth_ids) {
                return Err(ErrorCode::NoAuth);
            }
            let node = tree.get(&p).ok_or(ErrorCode::NoNode)?;
            check_version(version, node.version)?;
            if !node.children.is_empty() {
                return Err(ErrorCode::NotEmpty);
            }
            Ok(TxnOp::Delete { path: p })
        }
        WriteOp::SetData { path: p, data, version } => {
            path::validate(&p).map_err(|_| ErrorCode::BadArguments)?;
            let node = tree.get(&p).ok_or(ErrorCode::NoNode)?;
            if !acl::check(&node.acl, perms::WRITE, ctx.auth_ids) {
                return Err(ErrorCode::NoAuth);
            }
            let bytes_diff =
                data.as_ref().map_or(0, |d| d.len() as i64) - node.data.as_ref().map_or(0, |d| d.len() as i64);
            check_quota(tree, &p, 0, bytes_diff, ctx)?;
            check_version(version, node.version)?;
            Ok(TxnOp::SetData { path: p, data })
        }
        WriteOp::SetAcl { path: p, acl: acl_req, version } => {
            path::validate(&p).map_err(|_| ErrorCode::BadArguments)?;
            let fixed = fixup_acl(acl_req.as_deref(), ctx, bytes_max)?;
            let node = tree.get(&p).ok_or(ErrorCode::NoNode)?;
            if !acl::check(&node.acl, perms::ADMIN, ctx.auth_ids) {
                return Err(ErrorCode::NoAuth);
            }
            check_version(version, node.aversion)?;
            Ok(TxnOp::SetAcl { path: p, acl: fixed })
        }
        WriteOp::Check { path: p, version } => {
            path::validate(&p).map_err(|_| ErrorCode::BadArguments)?;
            let node = tree.get(&p).ok_or(ErrorCode::NoNode)?;
            if !acl::check(&node.acl, perms::READ, ctx.auth_ids) {
                return Err(ErrorCode::NoAuth);
            }
            check_version(version, node.version)?;
            Ok(TxnOp::Check { path: p })
        }
        WriteOp::DeleteContainer { path: p } => {
            let node = tree.get(&p).ok_or(ErrorCode::NoNode)?;
            if !matches!(node.kind(), NodeKind::Container | NodeKind::Ttl(_)) {
                return Err(ErrorCode::BadArguments);
            }
            if !node.children.is_empty() {
                return Err(ErrorCode::NotEmpty);
            }
            Ok(TxnOp::Delete { path: p })
        }
        WriteOp::CreateSession { timeout_ms } => Ok(TxnOp::CreateSession { timeout_ms }),
        WriteOp::CloseSession => Ok(TxnOp::CloseSession),
        WriteOp::Multi(_) => Err(ErrorCode::MarshallingError),
    }
}

#[allow(clippy::too_many_arguments)]
fn prep_create(
    tree: &DataTree,
    opcode: i32,
    p: String,
    data: Option<bytes::Bytes>,
    acl_req: Option<&[crate::proto::Acl]>,
    flags: i32,
    ttl_ms: i64,
    ctx: &PrepContext<'_>,
    bytes_max: usize,
) -> PrepResult {
    // 1. create mode and TTL.
    if !(create_flags::PERSISTENT..=create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL).contains(&flags) {
        return Err(ErrorCode::BadArguments);
    }
    let is_ttl = flags == create_flags::PERSISTENT_WITH_TTL || flags == create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL;
    if is_ttl && !ctx.extended_types_enabled {
        return Err(ErrorCode::Unimplemented);
    }
    if is_ttl {
        if !(1..=TTL_MS_MAX).contains(&ttl_ms) {
            return Err(ErrorCode::BadArguments);
        }
    } else if ttl_ms >= 0 {
        return Err(ErrorCode::BadArguments);
    }
    let sequential = matches!(
        flags,
        create_flags::PERSISTENT_SEQUENTIAL
            | create_flags::EPHEMERAL_SEQUENTIAL
            | create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL
    );
    // createContainer (op 19) makes a container whatever the flags say (as Apache does; the
    // sequential flags still add the suffix), and create with the CONTAINER flag a plain node.
    let container = opcode == crate::proto::OpCode::CreateContainer.code();
    let ephemeral = !container && matches!(flags, create_flags::EPHEMERAL | create_flags::EPHEMERAL_SEQUENTIAL);
    // 2. a slash and no NUL.
    let Some(last_slash) = p.rfind('/') else {
        return Err(ErrorCode::BadArguments);
    };
    if p.contains('\0') {
        return Err(ErrorCode::BadArguments);
    }
    // 3. ACL fix-up.
    let fixed_acl = fixup_acl(acl_req, ctx, bytes_max)?;
    // 4. parent exists.
    let parent_path = if last_slash == 0 { "/" } else { &p[..last_slash] };
    let parent = tree.get(parent_path).ok_or(ErrorCode::NoNode)?;
    // 5. CREATE on the parent.
    if !acl::check(&parent.acl, perms::CREATE, ctx.auth_ids) {
        return Err(ErrorCode::NoAuth);
    }
    // 6. sequence suffix, then full validation.
    let full = if sequential { format!("{p}{:010}", parent.child_creates) } else { p };
    path::validate(&full).map_err(|_| ErrorCode::BadArguments)?;
    // 7. exists.
    if tree.contains(&full) {
        return Err(ErrorCode::NodeExists);
    }
    // 8. ephemeral parent.
    if matches!(parent.kind(), NodeKind::Ephemeral(_)) {
        return Err(ErrorCode::NoChildrenForEphemerals);
    }
    // 9. quota.
    check_quota(tree, &full, 1, data.as_ref().map_or(0, |d| d.len() as i64), ctx)?;
    let ephemeral_owner = if ephemeral {
        ctx.session_id
    } else if container {
        EPHEMERAL_OWNER_CONTAINER
    } else if is_ttl {
        EPHEMERAL_OWNER_TTL_MASK | ttl_ms
    } else {
        0
    };
    let response_type = if opcode == crate::proto::OpCode::Create.code() { 1 } else { 15 };
    Ok(TxnOp::Create { path: full, data, acl: fixed_acl, ephemeral_owner, response_type })
}

/// ZooKeeper's quota check (`ZooKeeperServer.checkQuota`), against the prep tree: nothing
/// unless enforceQuota; past a hard limit QuotaExceeded, past a soft one only a log line.
fn check_quota(tree: &DataTree, p: &str, count_diff: i64, bytes_diff: i64, ctx: &PrepContext<'_>) -> PrepResult<()> {
    if !ctx.enforce_quota {
        return Ok(());
    }
    let Some(prefix) = tree.quota_prefix(p) else { return Ok(()) };
    let Some((limits, usage)) = tree.quota_of(&prefix) else { return Ok(()) };
    match quota::check(&prefix, &limits, &usage, count_diff, bytes_diff) {
        QuotaCheck::Within => Ok(()),
        QuotaCheck::SoftExceeded(why) => {
            log_quota_exceeded(&why);
            Ok(())
        }
        QuotaCheck::HardExceeded(why) => {
            log_quota_exceeded(&why);
            Err(ErrorCode::QuotaExceeded)
        }
    }
}

/// Logs the first quota excess and then one in `QUOTA_LOG_EVERY` (a busy writer past its
/// quota must not flood the log; counting keeps prep free of clocks).
fn log_quota_exceeded(why: &str) {
    const QUOTA_LOG_EVERY: u64 = 1024;
    static EXCEEDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = EXCEEDED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if n.is_multiple_of(QUOTA_LOG_EVERY) {
        tracing::warn!("{why} ({} quota excesses so far; one in {QUOTA_LOG_EVERY} is logged)", n + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{apply::apply, Txn, TxnHeader};

    fn ctx(ids: &[Id]) -> PrepContext<'_> {
        PrepContext {
            session_id: 5,
            auth_ids: ids,
            extended_types_enabled: false,
            txn_bytes_max: crate::txn::codec::txn_record_bytes_max(crate::config::JUTE_MAX_BUFFER_BYTES_DEFAULT),
            enforce_quota: true,
        }
    }

    fn create(p: &str, flags: i32) -> WriteOp {
        WriteOp::Create { opcode: 1, path: p.into(), data: None, acl: Some(acl::open_acl_unsafe()), flags, ttl_ms: -1 }
    }

    fn run(tree: &mut DataTree, op: &WriteOp, zxid: i64) -> TxnOp {
        let ids = vec![Id { scheme: "ip".into(), id: "127.0.0.1".into() }];
        let t = prep(tree, op.clone(), &ctx(&ids));
        let txn = Txn { header: TxnHeader { zxid, session_id: 5, cxid: 1, time_ms: 9 }, op: t.clone() };
        apply(tree, &txn, &mut vec![]);
        t
    }

    #[test]
    fn sequential_names_use_the_parent_create_counter() {
        let mut t = DataTree::new();
        t.add_session(5, 4000);
        run(&mut t, &create("/q", 0), 1);
        let names: Vec<String> = [(2, 2), (3, 2)]
            .iter()
            .map(|(z, f)| match run(&mut t, &create("/q/n-", *f), *z) {
                TxnOp::Create { path, .. } => path,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names, vec!["/q/n-0000000000", "/q/n-0000000001"]);
        run(&mut t, &WriteOp::Delete { path: "/q/n-0000000001".into(), version: -1 }, 4);
        match run(&mut t, &create("/q/n-", 2), 5) {
            TxnOp::Create { path, .. } => assert_eq!(path, "/q/n-0000000002"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_errors_follow_zookeeper_order() {
        let mut t = DataTree::new();
        t.add_session(5, 4000);
        let err = |op: TxnOp| match op {
            TxnOp::Error { err } => err,
            other => panic!("{other:?}"),
        };
        assert_eq!(err(run(&mut t, &create("bad", 0), 1)), -8);
        assert_eq!(err(run(&mut t, &create("/bad/", 0), 2)), -101);
        assert_eq!(err(run(&mut t, &create("/x", 9), 3)), -8);
        assert_eq!(err(run(&mut t, &create("/x", 5), 4)), -6);
        run(&mut t, &create("/e", 1), 5);
        assert_eq!(err(run(&mut t, &create("/e/c", 0), 6)), -108);
        assert_eq!(err(run(&mut t, &create("/e", 0), 7)), -110);
        assert_eq!(err(run(&mut t, &WriteOp::Delete { path: "/zookeeper".into(), version: -1 }, 8)), -8);
        assert_eq!(err(run(&mut t, &WriteOp::SetData { path: "/e".into(), data: None, version: 3 }, 9)), -103);
        assert_eq!(
            err(run(&mut t, &WriteOp::SetData { path: "/zookeeper/config".into(), data: None, version: -1 }, 10)),
            -102
        );
    }

    #[test]
    fn failed_multi_changes_nothing_and_reports_each_op() {
        let mut t = DataTree::new();
        t.add_session(5, 4000);
        let multi = WriteOp::Multi(vec![create("/m", 0), create("/m/a", 0), create("/missing/x", 0), create("/n", 0)]);
        let op = run(&mut t, &multi, 1);
        assert_eq!(
            op,
            TxnOp::Multi(vec![
                TxnOp::Error { err: 0 },
                TxnOp::Error { err: 0 },
                TxnOp::Error { err: -101 },
                TxnOp::Error { err: -2 }
            ])
        );
        assert!(!t.contains("/m"));
        let ok = WriteOp::Multi(vec![create("/m", 0), create("/m/a", 0)]);
        assert!(matches!(run(&mut t, &ok, 2), TxnOp::Multi(v) if v.len() == 2));
        assert!(t.contains("/m/a"));
    }
}
