//! zkCli's quota commands (`setquota`, `listquota`, `delquota`), which are client-side
//! procedures over ordinary znodes under /zookeeper/quota: the limits node and the stats node
//! of a path (`tree::quota`), the checks zkCli makes first (the path exists, no parent or
//! child already has a quota), and what it prints.
//! Rules: the same calls in the same order as zkCli, so a server sees the same writes; walks
//! of the quota tree are iterative; a server's refusal is a `CmdError`, never a panic.

use bytes::Bytes;

use crate::client::types::{CreateMode, KeeperError, ANY_VERSION};
use crate::client::{Client, OPEN_ACL_UNSAFE};
use crate::tree::path::join;
use crate::tree::quota::{limit_path, stat_path, StatsTrack, LIMIT_NODE, QUOTA_ROOT};

use super::exec::{err, keeper, out, CmdError};
use super::format::check_path;
use super::parse::QuotaField;

fn field_name(field: QuotaField) -> &'static str {
    match field {
        QuotaField::Count => "count",
        QuotaField::Bytes => "bytes",
        QuotaField::CountHard => "countHardLimit",
        QuotaField::BytesHard => "byteHardLimit",
    }
}

/// A StatsTrack as zkCli's setquota builds it: every limit -1, then the one given.
fn limits_with(field: QuotaField, value: i64) -> StatsTrack {
    let mut t = StatsTrack::parse(b"count=-1,bytes=-1;countHardLimit=-1;byteHardLimit=-1");
    t.put(field_name(field), value);
    t
}

async fn read_track(client: &Client, path: &str) -> Result<StatsTrack, KeeperError> {
    let (data, _) = client.get_data(path).await?;
    Ok(StatsTrack::parse(&data))
}

/// Creates a node with null data, as zkCli creates the quota directories; one that exists
/// already is fine.
async fn create_dir(client: &Client, path: &str) -> Result<(), CmdError> {
    match client.create_nullable(path, None, &OPEN_ACL_UNSAFE, CreateMode::Persistent, None).await {
        Ok(_) | Err(KeeperError::NodeExists) => Ok(()),
        Err(e) => Err(CmdError::Keeper(e, Some(path.to_string()))),
    }
}

/// `setquota -n|-b|-N|-B value path`.
pub async fn set_quota(client: &Client, path: &str, field: QuotaField, value: i64) -> Result<(), CmdError> {
    if path.starts_with(QUOTA_ROOT) {
        err(&format!("cannot set a quota under the path: {QUOTA_ROOT}"));
        return Err(CmdError::Reported);
    }
    check_path(path, false).map_err(CmdError::BadPath)?;
    if client.exists(path).await.map_err(keeper(path))?.is_none() {
        return Err(CmdError::BadPath(format!("{path} does not exist.")));
    }
    check_no_child_quota(client, path).await?;
    check_no_parent_quota(client, path).await?;
    let mut dir = QUOTA_ROOT.to_string();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir = format!("{dir}/{part}");
        if client.exists(&dir).await.map_err(keeper(&dir))?.is_none() {
            create_dir(client, &dir).await?;
        }
    }
    let (limits_at, stats_at) = (limit_path(path), stat_path(path));
    if client.exists(&limits_at).await.map_err(keeper(&limits_at))?.is_none() {
        let limits = limits_with(field, value);
        let create = |p: String, t: StatsTrack| async move {
            client
                .create(&p, Bytes::from(t.to_text()), &OPEN_ACL_UNSAFE, CreateMode::Persistent)
                .await
                .map_err(|e| CmdError::Keeper(e, Some(p.clone())))
        };
        create(limits_at.clone(), limits).await?;
        create(stats_at.clone(), StatsTrack::usage(0, 0)).await?;
        let limits = read_track(client, &limits_at).await.map_err(keeper(&limits_at))?;
        let usage = read_track(client, &stats_at).await.map_err(keeper(&stats_at))?;
        warn_below_usage(&limits, &usage);
    } else {
        let mut limits = read_track(client, &limits_at).await.map_err(keeper(&limits_at))?;
        limits.put(field_name(field), value);
        let usage = read_track(client, &stats_at).await.map_err(keeper(&stats_at))?;
        warn_below_usage(&limits, &usage);
        client.set_data(&limits_at, Bytes::from(limits.to_text()), ANY_VERSION).await.map_err(keeper(&limits_at))?;
    }
    Ok(())
}

/// zkCli's warnings (on stdout) for a limit set below what the subtree already uses.
fn warn_below_usage(limits: &StatsTrack, usage: &StatsTrack) {
    let below = |soft: i64, hard: i64, used: i64| (soft > -1 && soft < used) || (hard > -1 && hard < used);
    if below(limits.count(), limits.count_hard_limit(), usage.count()) {
        out(&format!("[Warning]: the count quota you create is less than the existing count:{}", usage.count()));
    }
    if below(limits.bytes(), limits.byte_hard_limit(), usage.bytes()) {
        out(&format!("[Warning]: the bytes quota you create is less than the existing bytes:{}", usage.bytes()));
    }
}

/// No node below `path`'s quota directory may hold a quota already.
async fn check_no_child_quota(client: &Client, path: &str) -> Result<(), CmdError> {
    let own = format!("{QUOTA_ROOT}{path}");
    let mut stack = vec![own.clone()];
    while let Some(dir) = stack.pop() {
        let children = match client.get_children(&dir).await {
            Ok(c) => c,
            Err(KeeperError::NoNode) => continue,
            Err(e) => return Err(CmdError::Keeper(e, Some(dir))),
        };
        if dir != own && children.iter().any(|c| c == LIMIT_NODE) {
            let below = &dir[QUOTA_ROOT.len()..];
            return Err(CmdError::BadPath(format!("{path} has a child {below} which has a quota")));
        }
        stack.extend(children.iter().map(|c| join(&dir, c)));
    }
    Ok(())
}

/// No ancestor of `path` may hold a quota already.
async fn check_no_parent_quota(client: &Client, path: &str) -> Result<(), CmdError> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut dir = QUOTA_ROOT.to_string();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        dir = format!("{dir}/{part}");
        let children = match client.get_children(&dir).await {
            Ok(c) => c,
            Err(KeeperError::NoNode) => return Ok(()),
            Err(e) => return Err(CmdError::Keeper(e, Some(dir))),
        };
        if children.iter().any(|c| c == LIMIT_NODE) {
            let above = &dir[QUOTA_ROOT.len()..];
            return Err(CmdError::BadPath(format!("{path} has a parent {above} which has a quota")));
        }
    }
    Ok(())
}

/// `listquota path`: the limits and the usage, as zkCli prints them.
pub async fn list_quota(client: &Client, path: &str) -> Result<(), CmdError> {
    let limits_at = limit_path(path);
    err(&format!("absolute path is {limits_at}"));
    let tracks = async {
        let limits = read_track(client, &limits_at).await?;
        let usage = read_track(client, &stat_path(path)).await?;
        Ok::<_, KeeperError>((limits, usage))
    };
    match tracks.await {
        Ok((limits, usage)) => {
            out(&format!("Output quota for {path} {}", limits.to_text()));
            out(&format!("Output stat for {path} {}", usage.to_text()));
            Ok(())
        }
        Err(KeeperError::NoNode) => {
            err(&format!("quota for {path} does not exist."));
            Ok(())
        }
        Err(e) => Err(CmdError::Keeper(e, Some(path.to_string()))),
    }
}

/// `delquota [-n|-b|-N|-B] path`: one limit unset, or the whole quota removed with the quota
/// directories it leaves empty.
pub async fn del_quota(client: &Client, path: &str, field: Option<QuotaField>) -> Result<(), CmdError> {
    let (dir, limits_at) = (format!("{QUOTA_ROOT}{path}"), limit_path(path));
    if client.exists(&limits_at).await.map_err(keeper(&limits_at))?.is_none() {
        out(&format!("Quota does not exist for {path}"));
        return Ok(());
    }
    let limits = match read_track(client, &limits_at).await {
        Ok(t) => t,
        Err(KeeperError::NoNode) => {
            err(&format!("quota for {path} does not exist."));
            return Ok(());
        }
        Err(e) => return Err(CmdError::Keeper(e, Some(limits_at))),
    };
    match field {
        Some(f) => {
            let mut limits = limits;
            limits.put(field_name(f), -1);
            client
                .set_data(&limits_at, Bytes::from(limits.to_text()), ANY_VERSION)
                .await
                .map_err(keeper(&limits_at))?;
        }
        None => {
            for child in client.get_children(&dir).await.map_err(keeper(&dir))? {
                let p = join(&dir, &child);
                client.delete(&p, ANY_VERSION).await.map_err(keeper(&p))?;
            }
            // The quota directories left empty, up to /zookeeper/quota.
            let mut at = dir;
            while at != QUOTA_ROOT && at.starts_with(QUOTA_ROOT) {
                if !client.get_children(&at).await.map_err(keeper(&at))?.is_empty() {
                    break;
                }
                client.delete(&at, ANY_VERSION).await.map_err(keeper(&at))?;
                at = at[..at.rfind('/').unwrap_or(0)].to_string();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_built_as_zkcli_builds_them() {
        assert_eq!(
            limits_with(QuotaField::Count, 10).to_text(),
            "count=10,bytes=-1=;byteHardLimit=-1;countHardLimit=-1"
        );
        assert_eq!(
            limits_with(QuotaField::BytesHard, 5).to_text(),
            "count=-1,bytes=-1=;byteHardLimit=5;countHardLimit=-1"
        );
    }
}
