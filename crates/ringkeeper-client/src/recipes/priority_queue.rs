//! Distributed priority queue (seed 001, "Priority Queues"): the queue recipe with an element
//! priority; lower numbers are taken first (as UNIX nice), equal priorities in offer order.
//! Rules: the queue's rules (`queue`), with the element named `<guid>-pq-<PP>-<sequence>`,
//! `PP` the priority in two digits (0..=`PRIORITY_MAX`); a consumer orders its listing by
//! (priority, sequence) and uses an up-to-date listing: every listing sets a children watch,
//! and once that has fired the rest of the listing is dropped and the queue listed again, so
//! an element of higher priority offered meanwhile is taken first.

use bytes::Bytes;

use super::queue::{DistributedQueue, Order};
use super::{split_sequence, RecipeError, RecipeResult};
use crate::client::Client;
use crate::types::CreateMode;

/// The largest (least urgent) priority.
pub const PRIORITY_MAX: u8 = 99;

const ELEMENT: &str = "pq-";

/// An element's (priority, sequence), if the name is one of this queue's.
pub fn priority_of(name: &str) -> Option<(u8, u32)> {
    let (stem, sequence) = split_sequence(name)?;
    let head = stem.strip_suffix('-')?;
    let at = head.len().checked_sub(2)?;
    let (rest, digits) = (head.get(..at)?, head.get(at..)?);
    if !rest.ends_with(ELEMENT) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, sequence))
}

/// (priority, sequence) order.
#[derive(Debug)]
pub struct ByPriority;

impl Order for ByPriority {
    fn sort(children: Vec<String>) -> Vec<String> {
        let mut keyed: Vec<((u8, u32), String)> =
            children.into_iter().filter_map(|c| priority_of(&c).map(|k| (k, c))).collect();
        keyed.sort();
        keyed.into_iter().map(|(_, c)| c).collect()
    }
    const RELIST_ON_CHANGE: bool = true;
}

/// A priority queue: `DistributedQueue`'s poll, take and len hand out the most urgent element.
pub type PriorityQueue = DistributedQueue<ByPriority>;

impl DistributedQueue<ByPriority> {
    /// The priority queue at `dir` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<PriorityQueue> {
        PriorityQueue::open(client, dir, CreateMode::PersistentSequential).await
    }

    /// Adds an element with `priority` (0 is the most urgent, at most `PRIORITY_MAX`).
    pub async fn offer(&self, priority: u8, data: impl Into<Bytes>) -> RecipeResult<String> {
        if priority > PRIORITY_MAX {
            return Err(RecipeError::BadArgument(format!("priority {priority} above {PRIORITY_MAX}")));
        }
        self.offer_named(&format!("{ELEMENT}{priority:02}-"), data.into()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_sort_by_priority_then_sequence() {
        assert_eq!(priority_of("abc-pq-07-0000000012"), Some((7, 12)));
        assert_eq!(priority_of("abc-qn-0000000012"), None);
        assert_eq!(priority_of("abc-pq-7x-0000000012"), None);
        let sorted = ByPriority::sort(vec![
            "g1-pq-05-0000000001".into(),
            "g2-pq-01-0000000002".into(),
            "foreign".into(),
            "g3-pq-05-0000000000".into(),
            "g4-pq-00-0000000009".into(),
        ]);
        assert_eq!(
            sorted,
            vec!["g4-pq-00-0000000009", "g2-pq-01-0000000002", "g3-pq-05-0000000000", "g1-pq-05-0000000001"]
        );
    }
}
