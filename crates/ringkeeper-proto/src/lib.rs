//! ringkeeper-proto: ZooKeeper's client wire protocol (frames, jute records, requests,
//! replies, the connect handshake, opcodes and error codes), znode paths (`path`) and SASL
//! DIGEST-MD5 (`digest_md5`), shared by the client crate and the server (which adds the peer
//! protocol between servers, `ringkeeper::proto::peer`). Builds without any runtime.
//! Rules: no I/O here, only bytes in and bytes out; nothing decoded from the network panics or
//! allocates beyond the frame it came in; the only module that knows wire layouts.

pub mod connect;
pub mod digest_md5;
pub mod error;
pub mod frame;
pub mod jute;
pub mod opcode;
pub mod path;
pub mod records;
pub mod reply;
pub mod request;

pub use connect::{ConnectRequest, ConnectResponse};
pub use error::ErrorCode;
pub use frame::{FrameDecoder, FrameError};
pub use jute::{JuteError, JuteReader};
pub use opcode::OpCode;
pub use records::{Acl, ClientInfo, Id, MultiHeader, Stat, WatcherEvent};
pub use reply::{MultiReadResult, MultiResult, ReplyHeader, Response};
pub use request::{Request, RequestError, RequestHeader};
