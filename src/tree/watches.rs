//! The watch index of one client core: which connections watch which paths, in ZooKeeper's two
//! tables (data and child), with standard (one-shot), persistent and persistent-recursive
//! modes. Rules: pure; a connection gets at most one event per table per change; standard
//! watches are removed when they fire; recursive watches never see NodeChildrenChanged.

use super::path;
use crate::proto::opcode::event_type;
use std::collections::{HashMap, HashSet};

/// A connection's id, unique within its core.
pub type ConnId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WatchMode {
    Standard,
    Persistent,
    PersistentRecursive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Data,
    Child,
}

#[derive(Default, Debug)]
struct WatchTable {
    by_path: HashMap<String, HashMap<ConnId, WatchMode>>,
    by_conn: HashMap<ConnId, HashSet<String>>,
    recursive_count: usize,
}

impl WatchTable {
    fn add(&mut self, p: &str, conn: ConnId, mode: WatchMode) {
        let entry = self.by_path.entry(p.to_string()).or_default();
        let new_mode = match entry.get(&conn) {
            // A persistent mode is never downgraded by a one-shot watch on the same path.
            Some(old) if *old != WatchMode::Standard && mode == WatchMode::Standard => *old,
            _ => mode,
        };
        let old = entry.insert(conn, new_mode);
        if old != Some(WatchMode::PersistentRecursive) && new_mode == WatchMode::PersistentRecursive {
            self.recursive_count += 1;
        }
        if old == Some(WatchMode::PersistentRecursive) && new_mode != WatchMode::PersistentRecursive {
            self.recursive_count -= 1;
        }
        self.by_conn.entry(conn).or_default().insert(p.to_string());
    }

    fn remove(&mut self, p: &str, conn: ConnId, modes: &[WatchMode]) -> bool {
        let Some(entry) = self.by_path.get_mut(p) else {
            return false;
        };
        let Some(mode) = entry.get(&conn).copied() else {
            return false;
        };
        if !modes.contains(&mode) {
            return false;
        }
        entry.remove(&conn);
        if mode == WatchMode::PersistentRecursive {
            self.recursive_count -= 1;
        }
        if entry.is_empty() {
            self.by_path.remove(p);
        }
        if let Some(paths) = self.by_conn.get_mut(&conn) {
            paths.remove(p);
            if paths.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
        true
    }

    fn has(&self, p: &str, conn: ConnId, modes: &[WatchMode]) -> bool {
        self.by_path.get(p).and_then(|e| e.get(&conn)).is_some_and(|m| modes.contains(m))
    }

    /// Connections to notify of `event` on `p`; one-shot watches fire and are removed.
    fn trigger(&mut self, p: &str, event: i32, suppress: &HashSet<ConnId>, out: &mut HashSet<ConnId>) {
        let mut fired_standard = Vec::new();
        if let Some(entry) = self.by_path.get(p) {
            for (conn, mode) in entry {
                if *mode == WatchMode::PersistentRecursive && event == event_type::NODE_CHILDREN_CHANGED {
                    continue;
                }
                if *mode == WatchMode::Standard {
                    fired_standard.push(*conn);
                }
                if !suppress.contains(conn) {
                    out.insert(*conn);
                }
            }
        }
        for conn in fired_standard {
            self.remove(p, conn, &[WatchMode::Standard]);
        }
        if self.recursive_count > 0 && event != event_type::NODE_CHILDREN_CHANGED {
            for ancestor in path::ancestors(p) {
                if let Some(entry) = self.by_path.get(ancestor) {
                    for (conn, mode) in entry {
                        if *mode == WatchMode::PersistentRecursive && !suppress.contains(conn) {
                            out.insert(*conn);
                        }
                    }
                }
            }
        }
    }

    fn remove_conn(&mut self, conn: ConnId) {
        let Some(paths) = self.by_conn.remove(&conn) else {
            return;
        };
        for p in paths {
            if let Some(entry) = self.by_path.get_mut(&p) {
                if entry.remove(&conn) == Some(WatchMode::PersistentRecursive) {
                    self.recursive_count -= 1;
                }
                if entry.is_empty() {
                    self.by_path.remove(&p);
                }
            }
        }
    }

    fn watch_count(&self) -> usize {
        self.by_path.values().map(|e| e.len()).sum()
    }
}

/// One notification to send: (connection, event type, path).
pub type Notification = (ConnId, i32, String);

/// A request the watch index cannot serve (ZooKeeper answers it with MarshallingError).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchError {
    /// checkWatches / removeWatches with a WatcherType other than 1 to 5.
    UnknownWatcherType(i32),
}

#[derive(Default, Debug)]
pub struct WatchIndex {
    data: WatchTable,
    child: WatchTable,
}

impl WatchIndex {
    pub fn new() -> WatchIndex {
        WatchIndex::default()
    }

    /// exists/getData with watch=true: a one-shot watch in the data table.
    pub fn add_data_watch(&mut self, p: &str, conn: ConnId) {
        self.data.add(p, conn, WatchMode::Standard);
    }

    /// getChildren with watch=true: a one-shot watch in the child table.
    pub fn add_child_watch(&mut self, p: &str, conn: ConnId) {
        self.child.add(p, conn, WatchMode::Standard);
    }

    /// addWatch: persistent goes to both tables, recursive to the data table only.
    pub fn add_persistent(&mut self, p: &str, conn: ConnId, recursive: bool) {
        if recursive {
            self.data.add(p, conn, WatchMode::PersistentRecursive);
        } else {
            self.data.add(p, conn, WatchMode::Persistent);
            self.child.add(p, conn, WatchMode::Persistent);
        }
    }

    fn modes_for(watcher_type: i32) -> Option<(&'static [WatchMode], &'static [WatchMode])> {
        use crate::proto::opcode::watcher_type as wt;
        use WatchMode::*;
        // (data-table modes, child-table modes) that a WatcherType selects.
        Some(match watcher_type {
            wt::CHILDREN => (&[], &[Standard]),
            wt::DATA => (&[Standard], &[]),
            wt::ANY => (&[Standard, Persistent, PersistentRecursive], &[Standard, Persistent]),
            wt::PERSISTENT => (&[Persistent], &[Persistent]),
            wt::PERSISTENT_RECURSIVE => (&[PersistentRecursive], &[]),
            _ => return None,
        })
    }

    /// checkWatches: Ok(true) if such a watch exists.
    pub fn has_watch(&self, p: &str, conn: ConnId, watcher_type: i32) -> Result<bool, WatchError> {
        let (d, c) = Self::modes_for(watcher_type).ok_or(WatchError::UnknownWatcherType(watcher_type))?;
        Ok(self.data.has(p, conn, d) || self.child.has(p, conn, c))
    }

    /// removeWatches: Ok(true) if at least one watch was removed.
    pub fn remove_watch(&mut self, p: &str, conn: ConnId, watcher_type: i32) -> Result<bool, WatchError> {
        let (d, c) = Self::modes_for(watcher_type).ok_or(WatchError::UnknownWatcherType(watcher_type))?;
        let a = self.data.remove(p, conn, d);
        let b = self.child.remove(p, conn, c);
        Ok(a || b)
    }

    pub fn remove_conn(&mut self, conn: ConnId) {
        self.data.remove_conn(conn);
        self.child.remove_conn(conn);
    }

    /// Number of (path, connection) watches in the data table and the child table.
    pub fn watch_count(&self) -> usize {
        self.data.watch_count() + self.child.watch_count()
    }

    /// Paths watched in the data table, with their connections (for wchp/wchc/wchs).
    pub fn data_watches(&self) -> impl Iterator<Item = (&String, Vec<ConnId>)> {
        self.data.by_path.iter().map(|(p, e)| (p, e.keys().copied().collect()))
    }

    fn emit(out: &mut Vec<Notification>, conns: HashSet<ConnId>, event: i32, p: &str) {
        let mut conns: Vec<ConnId> = conns.into_iter().collect();
        conns.sort_unstable();
        out.extend(conns.into_iter().map(|c| (c, event, p.to_string())));
    }

    /// A node was created: NodeCreated on it, NodeChildrenChanged on its parent.
    pub fn on_created(&mut self, p: &str, out: &mut Vec<Notification>) {
        let none = HashSet::new();
        let mut conns = HashSet::new();
        self.data.trigger(p, event_type::NODE_CREATED, &none, &mut conns);
        Self::emit(out, conns, event_type::NODE_CREATED, p);
        if let Some(parent) = path::parent(p) {
            let mut conns = HashSet::new();
            self.child.trigger(parent, event_type::NODE_CHILDREN_CHANGED, &none, &mut conns);
            Self::emit(out, conns, event_type::NODE_CHILDREN_CHANGED, parent);
        }
    }

    /// A node was deleted: NodeDeleted through the data then the child table (a connection
    /// told once is not told twice), then NodeChildrenChanged on the parent.
    pub fn on_deleted(&mut self, p: &str, out: &mut Vec<Notification>) {
        let none = HashSet::new();
        let mut told = HashSet::new();
        self.data.trigger(p, event_type::NODE_DELETED, &none, &mut told);
        let mut more = HashSet::new();
        self.child.trigger(p, event_type::NODE_DELETED, &told, &mut more);
        told.extend(more);
        Self::emit(out, told, event_type::NODE_DELETED, p);
        if let Some(parent) = path::parent(p) {
            let mut conns = HashSet::new();
            self.child.trigger(parent, event_type::NODE_CHILDREN_CHANGED, &none, &mut conns);
            Self::emit(out, conns, event_type::NODE_CHILDREN_CHANGED, parent);
        }
    }

    pub fn on_data_changed(&mut self, p: &str, out: &mut Vec<Notification>) {
        let mut conns = HashSet::new();
        self.data.trigger(p, event_type::NODE_DATA_CHANGED, &HashSet::new(), &mut conns);
        Self::emit(out, conns, event_type::NODE_DATA_CHANGED, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::opcode::watcher_type;

    fn events(out: &[Notification]) -> Vec<(u64, i32, &str)> {
        out.iter().map(|(c, e, p)| (*c, *e, p.as_str())).collect()
    }

    #[test]
    fn one_shot_watches_fire_once_and_delete_dedups_tables() {
        let mut w = WatchIndex::new();
        w.add_data_watch("/d", 1);
        w.add_child_watch("/d", 1);
        let mut out = vec![];
        w.on_created("/d/k", &mut out);
        w.on_deleted("/d/k", &mut out);
        w.on_deleted("/d", &mut out);
        assert_eq!(events(&out), vec![(1, 4, "/d"), (1, 2, "/d")]);
        assert_eq!(w.watch_count(), 0);
    }

    #[test]
    fn persistent_watch_sequence_matches_zookeeper() {
        let mut w = WatchIndex::new();
        w.add_persistent("/pp", 9, false);
        let mut out = vec![];
        w.on_created("/pp/c", &mut out);
        w.on_data_changed("/pp", &mut out);
        w.on_data_changed("/pp/c", &mut out);
        w.on_deleted("/pp/c", &mut out);
        w.on_deleted("/pp", &mut out);
        w.on_created("/pp", &mut out);
        let types: Vec<i32> = out.iter().map(|n| n.1).collect();
        assert_eq!(types, vec![4, 3, 4, 2, 1]);
    }

    #[test]
    fn recursive_watch_sees_descendants_but_not_child_events() {
        let mut w = WatchIndex::new();
        w.add_persistent("/r", 3, true);
        let mut out = vec![];
        w.on_created("/r/a", &mut out);
        w.on_created("/r/a/b", &mut out);
        w.on_data_changed("/r/a/b", &mut out);
        w.on_deleted("/r/a/b", &mut out);
        w.on_created("/other", &mut out);
        assert_eq!(events(&out), vec![(3, 1, "/r/a"), (3, 1, "/r/a/b"), (3, 3, "/r/a/b"), (3, 2, "/r/a/b")]);
        assert_eq!(w.has_watch("/r", 3, watcher_type::PERSISTENT_RECURSIVE), Ok(true));
        assert_eq!(w.remove_watch("/r", 3, watcher_type::DATA), Ok(false));
        assert_eq!(w.remove_watch("/r", 3, watcher_type::ANY), Ok(true));
        assert_eq!(w.watch_count(), 0);
        assert_eq!(w.has_watch("/r", 3, 99), Err(WatchError::UnknownWatcherType(99)));
    }

    #[test]
    fn closing_a_connection_drops_its_watches() {
        let mut w = WatchIndex::new();
        w.add_data_watch("/a", 1);
        w.add_data_watch("/a", 2);
        w.remove_conn(1);
        let mut out = vec![];
        w.on_data_changed("/a", &mut out);
        assert_eq!(events(&out), vec![(2, 3, "/a")]);
    }
}
