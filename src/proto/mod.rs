//! The client wire protocol: frames, jute records, opcodes and error codes.
//! Rules: no I/O here, only bytes in and bytes out; nothing decoded from the network panics or
//! allocates beyond the frame it came in; the only module that knows wire layouts.

pub mod error;
pub mod frame;
pub mod jute;
pub mod opcode;
pub mod records;

pub use error::ErrorCode;
pub use opcode::OpCode;
pub use records::{Acl, Id, Stat};
