//! The txn log beside a pipeline loop, as ZooKeeper's SyncRequestProcessor runs beside its
//! request processors: an append and its fdatasync run in a task of their own while the loop
//! goes on taking in acks, proposals and requests. What arrives meanwhile forms the next
//! batch, written as soon as the one in flight is durable: an idle log writes a lone txn at
//! once, a busy one writes in each batch what arrived during the previous fdatasync (adaptive
//! batching, no timer on the write path).
//! Rules: at most one append is in flight; while it is, the task owns the writer and nothing
//! else can touch the log (truncations, rolls, snapshot installs and close take the writer
//! from `idle()`, and wait for the append first with `settle()`); each finished append is
//! reported once (`finished`), in the order appends were started, with the batch the caller
//! attached to it; a result is never dropped.

use super::core_link::LogWriting;
#[cfg(test)]
use super::log_writer::SyncMode;
use super::log_writer::TxnLogWriter;
use bytes::Bytes;
use glommio::sync::Semaphore;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;

/// What a finished append hands back: the writer and the result of its write.
type Landed = Rc<RefCell<Option<(TxnLogWriter, io::Result<()>)>>>;

/// The txn log writer, idle or writing one batch in a task of its own. `B` is what the caller
/// needs back when the batch is durable (what to acknowledge or answer).
pub struct LogSlot<B> {
    writer: Option<TxnLogWriter>,
    /// The caller's batch of the append in flight.
    flight: Option<B>,
    landed: Landed,
    /// One permit per finished append (what `settle` waits for).
    done: Rc<Semaphore>,
    /// Wakes the caller's loop when an append finishes.
    wake: Rc<Semaphore>,
    /// Set from an append's start until its I/O has completed (a client core on this thread
    /// reads it: `core_link::local`).
    writing: LogWriting,
}

impl<B> LogSlot<B> {
    /// `writing` starts false (no append in flight) and is shared with whoever reads it.
    pub fn new(writer: TxnLogWriter, wake: Rc<Semaphore>, writing: LogWriting) -> LogSlot<B> {
        LogSlot {
            writer: Some(writer),
            flight: None,
            landed: Rc::new(RefCell::new(None)),
            done: Rc::new(Semaphore::new(0)),
            wake,
            writing,
        }
    }

    /// The writer, when no append is in flight.
    pub fn idle(&mut self) -> Option<&mut TxnLogWriter> {
        self.writer.as_mut()
    }

    pub fn busy(&self) -> bool {
        self.flight.is_some()
    }

    /// Starts writing `records` (one batch, one fdatasync; the writer splits a batch over
    /// ringkeeper.batchBytesMax itself). The caller's loop is woken when it is durable.
    pub fn start(&mut self, records: Vec<Bytes>, batch: B) {
        assert!(self.flight.is_none(), "a log append started while another is in flight");
        let mut writer = self.writer.take().expect("an idle log slot holds its writer");
        self.flight = Some(batch);
        let (landed, done, wake) = (self.landed.clone(), self.done.clone(), self.wake.clone());
        let writing = self.writing.clone();
        writing.set(true);
        glommio::spawn_local(async move {
            let result = writer.append(&records).await;
            writing.set(false);
            *landed.borrow_mut() = Some((writer, result));
            done.signal(1);
            wake.signal(1);
        })
        .detach();
    }

    /// The append that finished since the last call, with its batch and result; the writer is
    /// idle again. None while the append is still in flight or none was started.
    pub fn finished(&mut self) -> Option<(B, io::Result<()>)> {
        let (writer, result) = self.landed.borrow_mut().take()?;
        // The permit `settle` would have waited for; the result is taken here instead.
        let _ = self.done.try_acquire(1);
        self.writer = Some(writer);
        let batch = self.flight.take().expect("a finished append has the batch it was started with");
        Some((batch, result))
    }

    /// Waits for the append in flight, if any, and returns it as `finished` does.
    pub async fn settle(&mut self) -> Option<(B, io::Result<()>)> {
        self.flight.as_ref()?;
        if self.landed.borrow().is_none() {
            // The task signals once, after it stored its result; the semaphore is never closed.
            let _ = self.done.acquire(1).await;
        }
        self.finished()
    }

    /// Waits for the append in flight, then closes the log (the server is stopping: nothing
    /// waits for that append's outcome any more; a failure of it is logged, never dropped
    /// unseen). Returns the batch of that append, and the close's result.
    pub async fn close(mut self) -> (Option<B>, io::Result<()>) {
        let last = match self.settle().await {
            Some((batch, Err(e))) => {
                tracing::warn!("the last txn log append before stopping failed: {e}");
                Some(batch)
            }
            Some((batch, Ok(()))) => Some(batch),
            None => None,
        };
        let closed = match self.writer.take() {
            Some(w) => w.close().await,
            None => Ok(()),
        };
        (last, closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::recovery::recover;
    use glommio::LocalExecutorBuilder;
    use std::cell::Cell;

    fn record(zxid: i64) -> Bytes {
        crate::server::log_writer::tests::txn(zxid, 100)
    }

    /// An append runs beside the caller: the writer is out of reach while it is in flight (the
    /// shared `writing` flag up), other tasks run meanwhile, each outcome (a refused append
    /// included) comes back once with its batch, and close waits for the last one.
    #[test]
    fn appends_run_beside_the_loop_and_report_each_outcome_once() {
        let dir = std::env::temp_dir().join(format!("rk-logtask-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (data, logs) = (dir.join("data"), dir.join("log"));
        std::fs::create_dir_all(&logs).unwrap();
        let (d, l) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d, &l).unwrap();
                let writer = TxnLogWriter::open(&l, &rec.tail, 1, 64 * 1024, SyncMode::Fdatasync).await.unwrap();
                let wake = Rc::new(Semaphore::new(0));
                let writing = LogWriting::default();
                let mut slot: LogSlot<&'static str> = LogSlot::new(writer, wake.clone(), writing.clone());
                assert!(!slot.busy() && slot.idle().is_some() && slot.finished().is_none());
                slot.start(vec![record(1), record(2)], "first");
                assert!(slot.busy() && slot.idle().is_none());
                assert!(writing.get(), "the shared flag is up while the append's I/O is out");
                // The caller's loop is not blocked: another task runs while the write is out.
                let ran = Rc::new(Cell::new(false));
                let r = ran.clone();
                glommio::spawn_local(async move { r.set(true) }).detach();
                wake.acquire(1).await.unwrap();
                assert!(ran.get(), "a task ran while the append was in flight");
                let (batch, result) = slot.finished().expect("the append landed and woke the caller");
                assert_eq!(batch, "first");
                result.unwrap();
                assert!(!writing.get(), "and down once it has landed");
                assert!(slot.finished().is_none(), "an outcome is reported once");
                assert!(!slot.busy() && slot.idle().is_some());
                // A refused append (a zxid out of order) is reported too, never dropped.
                slot.start(vec![record(7)], "gap");
                let (batch, result) = slot.settle().await.unwrap();
                assert_eq!(batch, "gap");
                assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidInput);
                assert!(slot.settle().await.is_none(), "nothing in flight");
                slot.start(vec![record(3)], "last");
                let (last, closed) = slot.close().await;
                closed.unwrap();
                assert_eq!(last, Some("last"), "close waits for the append in flight");
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        assert_eq!((rec.last_zxid, rec.records.len()), (3, 3));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
