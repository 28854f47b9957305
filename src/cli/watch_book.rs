//! Which watch events the shell prints. zkCli sets every watch with one default watcher, and
//! Java's client hands one notification to a watcher once, however many of its watches
//! (data, exist, child, persistent, recursive) the notification reaches. The Rust client
//! delivers a notification to each registration separately, so the shell books every watch
//! it sets and prints an event the first time one of its registrations gets it: the others
//! the same notification reaches are then marked (a one-shot watch is spent, a persistent
//! one skips that event once).
//! Rules: pure; the reach of an event follows the client's watch registry (`watches.rs`),
//! which follows Java; session events (type None) are printed from the session's own stream,
//! never from here.

use std::collections::HashMap;

use crate::client::types::{EventType, WatchedEvent};
use crate::client::watches::WatchKind;

/// A watch the shell set.
pub type Booking = u64;

#[derive(Debug, Default)]
pub struct WatchBook {
    live: HashMap<Booking, (WatchKind, String)>,
    /// Events a persistent watch will get again from a notification already printed.
    skips: HashMap<Booking, Vec<(EventType, String)>>,
    next: Booking,
}

fn one_shot(kind: WatchKind) -> bool {
    matches!(kind, WatchKind::Data | WatchKind::Exist | WatchKind::Child)
}

fn is_under(ancestor: &str, path: &str) -> bool {
    path == ancestor || ancestor == "/" || path.strip_prefix(ancestor).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a notification of `t` on `path` reaches a watch of `kind` on `watched`.
fn reaches(kind: WatchKind, watched: &str, t: EventType, path: &str) -> bool {
    use WatchKind::*;
    let exact = watched == path;
    let persistent = (kind == Persistent && exact) || (kind == PersistentRecursive && is_under(watched, path));
    match t {
        EventType::NodeCreated | EventType::NodeDataChanged => (matches!(kind, Data | Exist) && exact) || persistent,
        EventType::NodeDeleted => (one_shot(kind) && exact) || persistent,
        EventType::NodeChildrenChanged => exact && matches!(kind, Child | Persistent),
        EventType::DataWatchRemoved => exact && matches!(kind, Data | Exist),
        EventType::ChildWatchRemoved => exact && kind == Child,
        EventType::PersistentWatchRemoved => exact && matches!(kind, Persistent | PersistentRecursive),
        EventType::None => false,
    }
}

impl WatchBook {
    pub fn new() -> WatchBook {
        WatchBook::default()
    }

    /// Books a watch the server has set.
    pub fn book(&mut self, kind: WatchKind, path: &str) -> Booking {
        self.next += 1;
        self.live.insert(self.next, (kind, path.to_string()));
        self.next
    }

    /// The watch's events are over (its stream ended, or the session did).
    pub fn forget(&mut self, b: Booking) {
        self.live.remove(&b);
        self.skips.remove(&b);
    }

    /// Whether `event`, delivered to booking `b`, is printed.
    pub fn deliver(&mut self, b: Booking, event: &WatchedEvent) -> bool {
        let Some(path) = event.path.as_deref() else {
            self.forget(b);
            return false;
        };
        if event.event_type == EventType::None {
            self.forget(b);
            return false;
        }
        let Some((kind, _)) = self.live.get(&b).cloned() else { return false };
        let ends = one_shot(kind) || event.event_type == EventType::PersistentWatchRemoved;
        if let Some(skips) = self.skips.get_mut(&b) {
            if let Some(i) = skips.iter().position(|(t, p)| *t == event.event_type && p == path) {
                skips.swap_remove(i);
                if ends {
                    self.forget(b);
                }
                return false;
            }
        }
        let others: Vec<(Booking, WatchKind)> = self
            .live
            .iter()
            .filter(|(o, (k, w))| **o != b && reaches(*k, w, event.event_type, path))
            .map(|(o, (k, _))| (*o, *k))
            .collect();
        for (o, k) in others {
            if one_shot(k) {
                self.forget(o);
            } else {
                self.skips.entry(o).or_default().push((event.event_type, path.to_string()));
            }
        }
        if ends {
            self.forget(b);
        }
        true
    }

    /// Watches booked and not yet over.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::types::KeeperState;

    fn ev(t: EventType, p: &str) -> WatchedEvent {
        WatchedEvent { event_type: t, keeper_state: KeeperState::SyncConnected, path: Some(p.into()) }
    }

    #[test]
    fn one_notification_prints_once_whatever_it_reaches() {
        let mut w = WatchBook::new();
        let d1 = w.book(WatchKind::Data, "/a");
        let d2 = w.book(WatchKind::Data, "/a");
        let c = w.book(WatchKind::Child, "/a");
        let e = ev(EventType::NodeDataChanged, "/a");
        assert!(w.deliver(d2, &e), "the first delivery prints");
        assert!(!w.deliver(d1, &e), "the same notification to another data watch does not");
        assert_eq!(w.len(), 1, "only the child watch is left");
        // The child watch was not reached by a data change; a deletion reaches it.
        assert!(w.deliver(c, &ev(EventType::NodeDeleted, "/a")));
        assert!(w.is_empty());
    }

    #[test]
    fn a_deletion_spends_data_and_child_watches_together() {
        let mut w = WatchBook::new();
        let d = w.book(WatchKind::Data, "/a");
        let c = w.book(WatchKind::Child, "/a");
        let e = ev(EventType::NodeDeleted, "/a");
        assert!(w.deliver(c, &e));
        assert!(!w.deliver(d, &e));
        assert!(w.is_empty());
    }

    #[test]
    fn persistent_watches_skip_what_a_one_shot_printed_and_vice_versa() {
        let mut w = WatchBook::new();
        let r = w.book(WatchKind::PersistentRecursive, "/a");
        let d = w.book(WatchKind::Data, "/a/b");
        let e = ev(EventType::NodeDataChanged, "/a/b");
        assert!(w.deliver(d, &e));
        assert!(!w.deliver(r, &e), "the recursive watch's copy of the printed notification");
        assert!(w.deliver(r, &e), "a later change prints again");
        // Recursive watches get no child events; persistent ones do.
        let p = w.book(WatchKind::Persistent, "/a");
        let ch = ev(EventType::NodeChildrenChanged, "/a");
        assert!(w.deliver(p, &ch));
        assert!(w.skips.get(&r).is_none_or(|s| s.is_empty()), "nothing skipped by the recursive watch");
        // Persistent delivered first: a one-shot on the same path is spent silently.
        let d2 = w.book(WatchKind::Exist, "/a/c");
        let created = ev(EventType::NodeCreated, "/a/c");
        assert!(w.deliver(r, &created));
        assert!(!w.deliver(d2, &created));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn removals_print_once_per_event_type_and_end_persistent_watches() {
        let mut w = WatchBook::new();
        let p = w.book(WatchKind::Persistent, "/w");
        let r = w.book(WatchKind::PersistentRecursive, "/w");
        let d = w.book(WatchKind::Data, "/w");
        let c = w.book(WatchKind::Child, "/w");
        let gone = ev(EventType::PersistentWatchRemoved, "/w");
        assert!(w.deliver(r, &gone));
        assert!(!w.deliver(p, &gone));
        assert!(w.deliver(c, &ev(EventType::ChildWatchRemoved, "/w")));
        assert!(w.deliver(d, &ev(EventType::DataWatchRemoved, "/w")));
        assert!(w.is_empty());
    }

    #[test]
    fn session_events_and_unknown_bookings_print_nothing_here() {
        let mut w = WatchBook::new();
        let d = w.book(WatchKind::Data, "/a");
        assert!(!w.deliver(d, &WatchedEvent::session(KeeperState::Closed)));
        assert!(w.is_empty());
        assert!(!w.deliver(99, &ev(EventType::NodeDataChanged, "/a")));
        assert!(is_under("/", "/x") && is_under("/a", "/a/b") && !is_under("/a", "/ab"));
    }
}
