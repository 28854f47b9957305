//! ringkeeper-proto: ZooKeeper's client wire protocol (frames, jute records, requests,
//! replies, the connect handshake, opcodes and error codes), znode paths (`path`) and SASL
//! DIGEST-MD5 (`digest_md5`), shared by the client crate and the server (which adds the peer
//! protocol between servers, `ringkeeper::proto::peer`). Builds without any runtime.
//! Rules: no I/O here, only bytes in and bytes out; nothing decoded from the network panics or
//! allocates beyond the frame it came in; the only module that knows wire layouts.
//!
//! # Example
//!
//! A client encodes a getData request frame; the server splits it off its read buffer,
//! decodes it and answers; the client reads the ReplyHeader and decodes the body.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use ringkeeper_proto::reply::{decode_response, encode_reply};
//! use ringkeeper_proto::request::{decode_request, encode_request};
//! use ringkeeper_proto::frame::JUTE_MAX_BUFFER_DEFAULT_BYTES;
//! use ringkeeper_proto::{FrameDecoder, JuteReader, OpCode, ReplyHeader, Request, Response, Stat};
//!
//! // Client side: length prefix, RequestHeader{xid 7, type 4}, GetDataRequest.
//! let mut wire = BytesMut::new();
//! let req = Request::GetData { path: "/app/config".to_string(), watch: true };
//! encode_request(&mut wire, 7, &req);
//!
//! // Server side: frame it, then decode header and record.
//! let mut frames = FrameDecoder::new(JUTE_MAX_BUFFER_DEFAULT_BYTES);
//! let frame = frames.next_frame(&mut wire).unwrap().expect("a whole frame");
//! assert!(wire.is_empty());
//! let (hdr, decoded) = decode_request(frame).unwrap();
//! assert_eq!((hdr.xid, hdr.opcode), (7, OpCode::GetData.code()));
//! assert_eq!(decoded, req);
//!
//! // The server answers err 0 with a GetDataResponse.
//! let stat = Stat { version: 2, data_length: 5, ..Stat::default() };
//! let body = Response::GetData { data: Some(Bytes::from_static(b"hello")), stat };
//! let mut out = BytesMut::new();
//! encode_reply(&mut out, &ReplyHeader { xid: 7, zxid: 0x100, err: 0 }, &body);
//!
//! // Client side: frame, ReplyHeader, then the body of the op the xid was sent with.
//! let frame = frames.next_frame(&mut out).unwrap().expect("a whole frame");
//! let mut r = JuteReader::new(frame);
//! let reply = ReplyHeader::read(&mut r).unwrap();
//! assert_eq!((reply.xid, reply.zxid, reply.err), (7, 0x100, 0));
//! assert_eq!(decode_response(OpCode::GetData, r.into_rest()).unwrap(), body);
//! ```

#![warn(missing_docs)]

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
