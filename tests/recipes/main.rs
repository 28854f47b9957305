//! The recipes of `crates/ringkeeper-client/src/recipes/` against a real ringkeeper server (one per test, see
//! `harness.rs`): each recipe's normal behaviour and the failure cases seed 001 designs for —
//! a lock holder's session expiring, a release waking one waiter only (counted), a leader
//! process killed, a create whose reply was lost, participants racing.

mod harness;

mod barriers;
mod election;
mod locks;
mod membership;
mod on_glommio;
mod queues;
mod two_phase;
