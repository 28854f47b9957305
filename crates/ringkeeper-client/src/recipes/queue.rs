//! Distributed FIFO queue (seed 001, "Queues"): producers offer elements, consumers take
//! them in the order they were offered, each element by exactly one consumer.
//! Rules: an element is a child `<guid>-qn-<sequence>` of the queue node, created sequential
//! (persistent by default, so an element outlives its producer, as in ZooKeeper's own queue
//! recipe; `Queue::with_ephemeral_elements` gives seed 001's ephemeral flag) under the GUID
//! rule, so a lost create reply never enqueues an element twice. A consumer lists the
//! children (with a watch only when the list is empty, then sleeps on that watch), and works
//! through that listing lowest sequence first, without listing again until it is exhausted.
//! An element is taken by reading it and deleting it at the version read: the consumer whose
//! delete succeeds has it, one that gets NoNode moves on. A take whose delete reply is lost
//! fails with ConnectionLoss (the element may be gone: at most once).

use std::collections::VecDeque;
use std::future::Future;

use bytes::Bytes;

use super::sequential::line;
use super::{child_path, create_protected, ensure_path, new_guid, node_event, retried, RecipeError, RecipeResult};
use crate::client::{Client, OneShotWatch};
use crate::types::{CreateMode, KeeperError};

/// The name prefix of a FIFO queue's elements.
const ELEMENT: &str = "qn-";

/// How a consumer orders a listing and when it must list again: the part a FIFO queue and
/// a priority queue do not share.
pub trait Order {
    /// The listing's elements in the order they are to be taken.
    fn sort(children: Vec<String>) -> Vec<String>;
    /// Whether a change of the children invalidates a listing (a priority queue's) or not
    /// (a FIFO queue's: later elements always come after it).
    const RELIST_ON_CHANGE: bool;
}

/// FIFO: sequence order.
#[derive(Debug)]
pub struct Fifo;

impl Order for Fifo {
    fn sort(children: Vec<String>) -> Vec<String> {
        line(&children, &[ELEMENT]).into_iter().map(|e| e.name.to_string()).collect()
    }
    const RELIST_ON_CHANGE: bool = false;
}

/// A queue at a directory, ordered by `O`: one handle per producer or consumer (a consumer
/// keeps the listing it works through). `Queue` and `priority_queue::PriorityQueue` are its
/// two kinds.
#[derive(Debug)]
pub struct DistributedQueue<O: Order> {
    client: Client,
    dir: String,
    mode: CreateMode,
    listing: VecDeque<String>,
    /// With `RELIST_ON_CHANGE`: the children watch set by the listing, to notice a change.
    changed: Option<OneShotWatch>,
    order: std::marker::PhantomData<O>,
}

impl<O: Order> DistributedQueue<O> {
    /// The queue at `dir` (created, with its ancestors, if missing), its elements made with
    /// `mode`.
    pub(crate) async fn open(client: &Client, dir: &str, mode: CreateMode) -> RecipeResult<DistributedQueue<O>> {
        ensure_path(client, dir).await?;
        Ok(DistributedQueue {
            client: client.clone(),
            dir: dir.to_string(),
            mode,
            listing: VecDeque::new(),
            changed: None,
            order: std::marker::PhantomData,
        })
    }

    /// Adds an element named `<guid>-<name><sequence>`; returns its path.
    pub(crate) async fn offer_named(&self, name: &str, data: Bytes) -> RecipeResult<String> {
        let guid = new_guid(&self.client);
        let name = create_protected(&self.client, &self.dir, &guid, name, data, self.mode).await?;
        Ok(child_path(&self.dir, &name))
    }

    /// Whether the listing is stale: a priority queue's listing whose watch has fired since.
    fn listing_stale(&mut self) -> bool {
        let fired = self.changed.as_mut().is_some_and(|w| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            std::pin::Pin::new(w).poll(&mut cx).is_ready()
        });
        if fired {
            self.changed = None;
        }
        fired
    }

    /// Lists the queue into the listing (a priority queue keeps the listing's children watch,
    /// to notice it going stale).
    async fn list(&mut self) -> RecipeResult<()> {
        if O::RELIST_ON_CHANGE {
            self.changed = Some(self.list_w().await?);
        } else {
            self.listing = O::sort(retried(|| self.client.get_children(&self.dir)).await?).into();
        }
        Ok(())
    }

    /// Lists the queue into the listing with a children watch, and returns the watch.
    async fn list_w(&mut self) -> RecipeResult<OneShotWatch> {
        let (children, w) = retried(|| self.client.get_children_w(&self.dir)).await?;
        self.listing = O::sort(children).into();
        Ok(w)
    }

    /// Takes the first element of the listing that is still there; `None` when the listing
    /// is used up (or, for a priority queue, found stale after a miss).
    async fn take_listed(&mut self) -> RecipeResult<Option<Bytes>> {
        while let Some(name) = self.listing.pop_front() {
            let path = child_path(&self.dir, &name);
            let taken = match retried(|| self.client.get_data(&path)).await {
                Ok((data, stat)) => match self.client.delete(&path, stat.version).await {
                    Ok(()) => Some(data),
                    Err(KeeperError::NoNode) => None,
                    Err(e) => return Err(e.into()),
                },
                Err(RecipeError::Keeper(KeeperError::NoNode)) => None,
                Err(e) => return Err(e),
            };
            if taken.is_some() {
                return Ok(taken);
            }
            // Another consumer took it. The first element of a fresh listing is always tried,
            // so a busy queue cannot keep a consumer listing forever.
            if self.listing_stale() {
                self.listing.clear();
            }
        }
        Ok(None)
    }

    /// Takes the head element (the oldest, or the most urgent), or `None` if the queue is
    /// empty now.
    pub async fn poll(&mut self) -> RecipeResult<Option<Bytes>> {
        if self.listing_stale() {
            self.listing.clear();
        }
        loop {
            if let Some(d) = self.take_listed().await? {
                return Ok(Some(d));
            }
            self.list().await?;
            if self.listing.is_empty() {
                return Ok(None);
            }
        }
    }

    /// Takes the head element, waiting (on a children watch) while the queue is empty.
    pub async fn take(&mut self) -> RecipeResult<Bytes> {
        if let Some(d) = self.poll().await? {
            return Ok(d);
        }
        loop {
            let watch = self.list_w().await?;
            if self.listing.is_empty() {
                node_event(watch.await)?;
                continue;
            }
            if O::RELIST_ON_CHANGE {
                self.changed = Some(watch);
            }
            if let Some(d) = self.take_listed().await? {
                return Ok(d);
            }
        }
    }

    /// How many elements the queue holds now.
    pub async fn len(&self) -> RecipeResult<usize> {
        let children = retried(|| self.client.get_children(&self.dir)).await?;
        Ok(O::sort(children).len())
    }
}

/// A FIFO queue.
pub type Queue = DistributedQueue<Fifo>;

impl DistributedQueue<Fifo> {
    /// The queue at `dir` (created, with its ancestors, if missing), persistent elements.
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<Queue> {
        Queue::open(client, dir, CreateMode::PersistentSequential).await
    }

    /// The queue at `dir` whose elements are ephemeral: an element goes away with its
    /// producer's session if nobody took it (seed 001's flags).
    pub async fn with_ephemeral_elements(client: &Client, dir: &str) -> RecipeResult<Queue> {
        Queue::open(client, dir, CreateMode::EphemeralSequential).await
    }

    /// Adds an element at the tail; returns its path.
    pub async fn offer(&self, data: impl Into<Bytes>) -> RecipeResult<String> {
        self.offer_named(ELEMENT, data.into()).await
    }
}
