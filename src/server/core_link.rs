//! The two channels between the pipeline core and one client core, in either of two forms:
//! glommio's shared channels when the client core is a thread of its own, or local channels
//! when it is a task on the pipeline's executor (`ringkeeper.clientCoreOnPipeline`).
//!
//! Rules:
//! - Both forms are bounded by the same depth (`ringkeeper.channelDepth`), keep order, and
//!   end (`recv` gives `None`, `send` fails) once the other end is dropped.
//! - The form follows where the two ends run, never the traffic: a shared channel's receiver
//!   is woken only when its executor polls the reactor, which it does after every runnable
//!   task has run, so on one thread each message would wait behind all of them and a poll of
//!   io_uring; a local channel wakes the receiving task at once, as any task wakes another.
//! - A local receiver still waits for the next reactor poll while the txn log has an append
//!   in flight (the flag the pipeline's `LogSlot` keeps): glommio submits the log's queued
//!   writes and fdatasync at that poll, and a client core that ran a batch's replies first
//!   would hold the disk back by as long (docs/benchmarks.md, sixteenth session). An idle log
//!   (a lone write) waits for nothing.
//! - Only the shared form crosses threads (`SharedSender` / `SharedReceiver` are `Send`); the
//!   local form is made on the executor that runs both ends.

use glommio::channels::local_channel::{LocalReceiver, LocalSender};
use glommio::channels::shared_channel::{ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// Set while the txn log of this thread has an append in flight (kept by its `LogSlot`).
pub type LogWriting = Rc<Cell<bool>>;

/// A sending end before its executor connects it.
pub enum Tx<T: Send + 'static> {
    Thread(SharedSender<T>),
    Local(LocalSender<T>),
}

/// A receiving end before its executor connects it.
pub enum Rx<T: Send + 'static> {
    Thread(SharedReceiver<T>),
    Local(LocalReceiver<T>, LogWriting),
}

/// A connected sending end.
pub enum Sender<T: Send + 'static> {
    Thread(ConnectedSender<T>),
    Local(LocalSender<T>),
}

/// A connected receiving end.
pub enum Receiver<T: Send + 'static> {
    Thread(ConnectedReceiver<T>),
    Local(LocalReceiver<T>, LogWriting),
}

/// The receiving end is gone: the item was not sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

impl<T: Send + 'static> Tx<T> {
    /// A shared end waits here until its receiver has connected too.
    pub async fn connect(self) -> Sender<T> {
        match self {
            Tx::Thread(s) => Sender::Thread(s.connect().await),
            Tx::Local(s) => Sender::Local(s),
        }
    }
}

impl<T: Send + 'static> Rx<T> {
    /// A shared end waits here until its sender has connected too.
    pub async fn connect(self) -> Receiver<T> {
        match self {
            Rx::Thread(r) => Receiver::Thread(r.connect().await),
            Rx::Local(r, writing) => Receiver::Local(r, writing),
        }
    }
}

impl<T: Send + 'static> Sender<T> {
    /// Sends `item`, waiting while the channel is full.
    pub async fn send(&self, item: T) -> Result<(), Closed> {
        match self {
            Sender::Thread(s) => s.send(item).await.map_err(|_| Closed),
            Sender::Local(s) => s.send(item).await.map_err(|_| Closed),
        }
    }
}

impl<T: Send + 'static> Receiver<T> {
    /// The next item, or `None` once every sender is gone and the channel is empty. A local
    /// item taken while the log writes is handed over after the next reactor poll.
    pub async fn recv(&self) -> Option<T> {
        match self {
            Receiver::Thread(r) => r.recv().await,
            Receiver::Local(r, writing) => {
                let item = r.recv().await;
                if writing.get() {
                    // A timer fires only at a reactor poll.
                    glommio::timer::sleep(Duration::from_micros(POLL_WAIT_US)).await;
                }
                item
            }
        }
    }
}

/// The shortest timer: it fires at the executor's next reactor poll.
const POLL_WAIT_US: u64 = 1;

/// A local pair, for a client core on the pipeline's executor (call it there); `writing` is
/// the flag the pipeline's log slot shares.
pub fn local<T: Send + 'static>(depth: usize, writing: &LogWriting) -> (Tx<T>, Rx<T>) {
    let (tx, rx) = glommio::channels::local_channel::new_bounded(depth);
    (Tx::Local(tx), Rx::Local(rx, writing.clone()))
}

/// A shared pair, for a client core on a thread of its own.
pub fn shared<T: Send + 'static>(depth: usize) -> (SharedSender<T>, SharedReceiver<T>) {
    glommio::channels::shared_channel::new_bounded(depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A local channel hands each item to its receiver in order, ends when the sender is
    /// dropped, makes a sender wait (without losing anything) while it is full, and still
    /// hands items over while the log writes.
    #[test]
    fn a_local_link_keeps_order_bounds_and_ends() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let writing = LogWriting::default();
                let (tx, rx) = local::<u32>(2, &writing);
                let (tx, rx) = (tx.connect().await, rx.connect().await);
                let got = Rc::new(RefCell::new(Vec::new()));
                let sent = Rc::new(RefCell::new(0u32));
                let sender = {
                    let sent = sent.clone();
                    glommio::spawn_local(async move {
                        for i in 0..5 {
                            tx.send(i).await.expect("receiver alive");
                            *sent.borrow_mut() += 1;
                        }
                    })
                };
                // The sender fills the two slots, then waits for room.
                glommio::executor().yield_task_queue_now().await;
                assert_eq!(*sent.borrow(), 2, "a bounded local link holds its depth");
                while let Some(i) = rx.recv().await {
                    got.borrow_mut().push(i);
                }
                sender.await;
                assert_eq!(*got.borrow(), vec![0, 1, 2, 3, 4]);
                // While the log writes, an item is still handed over (after the next poll).
                writing.set(true);
                let (tx, rx) = local::<u32>(1, &writing);
                let (tx, rx) = (tx.connect().await, rx.connect().await);
                tx.send(5).await.expect("receiver alive");
                assert_eq!(rx.recv().await, Some(5));
                drop(rx);
                assert_eq!(tx.send(7).await, Err(Closed));
            })
            .expect("executor")
            .join()
            .expect("test body");
    }
}
