//! Quorum SASL on one peer connection (`quorum.auth.*`, `sasl/quorum.rs`): the exchange that
//! runs right after the hello, both ways on the one connection, before it carries messages.
//! The dialing member is the learner (SASL client): it sends the first auth frame and waits
//! for the answer; the accepting member is the server: it reads the first frame's head, and
//! an auth frame opens the exchange (a message frame means the dialer does not authenticate).
//! Rules:
//! - Only bounded auth frames (`PEER_AUTH_FRAME_BYTES_MAX`) are read, each after its 5-byte
//!   head said it is one; the whole exchange is bounded in time (`PEER_AUTH_TIMEOUT_MS`) and
//!   rounds (`PEER_AUTH_ROUNDS_MAX`); an accepting member runs at most
//!   `quorum.cnxn.threads.size` exchanges at once. Nothing else is buffered for a connection
//!   before it passed.
//! - ZooKeeper's semantics: a server that requires SASL (`serverRequireSasl`) refuses a dialer
//!   that does not authenticate or fails; one that does not require lets it through with a
//!   warning. A learner that requires SASL (`learnerRequireSasl`) drops a connection the
//!   other member did not authenticate; one that does not goes on with a warning. A member
//!   without quorum SASL answers an auth frame with `NotSasl`.
//! - Kerberos: every library call runs on the blocking pool (keytab, replay cache, KDC); an
//!   accepted learner's principal must name the `server.N` host of the server its hello names.
//! - The caller logs (rate-limited) the error texts returned here; they never hold a password.

use crate::proto::peer::{auth_frame_len, decode_auth_body, encode_auth_frame, AuthStatus, PEER_AUTH_FRAME_BYTES_MAX};
use crate::sasl::digest_md5::{self, ClientStep, ServerStep};
use crate::sasl::gssapi::{self, GssClient, GssServer};
use crate::sasl::quorum::{QuorumMechanism, QuorumSasl};
use crate::zab::Sid;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How long a whole quorum-auth exchange may take, either side.
pub const PEER_AUTH_TIMEOUT_MS: u64 = 5_000;
/// Auth frames one side reads in one exchange at most (DIGEST-MD5 needs 2 each way; ZooKeeper
/// allows 5 rounds).
pub const PEER_AUTH_ROUNDS_MAX: usize = 5;

/// A member's quorum SASL on its peer port, with the count of exchanges under way on the
/// accepting side (`quorum.cnxn.threads.size`).
pub struct PeerSasl {
    pub sasl: Arc<QuorumSasl>,
    authenticating: Cell<usize>,
    /// Each member's `server.N` hosts as written: under Kerberos, the host of the service
    /// principal a learner asks for, and the host an accepted learner's principal must name.
    /// They follow the committed membership (`set_hosts`).
    hosts: RefCell<BTreeMap<Sid, Vec<String>>>,
}

impl PeerSasl {
    pub fn new(sasl: Arc<QuorumSasl>, hosts: BTreeMap<Sid, Vec<String>>) -> PeerSasl {
        PeerSasl { sasl, authenticating: Cell::new(0), hosts: RefCell::new(hosts) }
    }

    /// A committed reconfiguration gave `sid` these hosts (Some) or removed it (None).
    pub fn set_hosts(&self, sid: Sid, hosts: Option<Vec<String>>) {
        match hosts {
            Some(h) => self.hosts.borrow_mut().insert(sid, h),
            None => self.hosts.borrow_mut().remove(&sid),
        };
    }

    /// `sid`'s `server.N` hosts now (None: no member has that id).
    fn hosts_of(&self, sid: Sid) -> Option<Vec<String>> {
        self.hosts.borrow().get(&sid).cloned()
    }
}

/// A learner's mechanism state (Kerberos: whether its security-layer choice was sent).
enum LearnerSide {
    Digest(digest_md5::Client),
    Gss(Box<GssClient>, bool),
}

impl LearnerSide {
    /// The next token to send (`None`: done, for DIGEST-MD5's verified rspauth). A Kerberos
    /// step calls the library, which may read a keytab or ask the KDC: on the blocking pool.
    async fn step(self, token: Vec<u8>) -> (LearnerSide, Result<Option<Vec<u8>>, String>) {
        match self {
            LearnerSide::Digest(mut c) => {
                let r = match c.step(&token) {
                    Ok(ClientStep::Send(t)) => Ok(Some(t)),
                    Ok(ClientStep::Done) => Ok(None),
                    Err(e) => Err(e.to_string()),
                };
                (LearnerSide::Digest(c), r)
            }
            LearnerSide::Gss(mut c, chosen) => {
                let (c, r) = super::offcore::run(move || {
                    let r = c.step(&token);
                    (c, r)
                })
                .await;
                match r {
                    Ok(gssapi::ClientStep::Send(t)) => (LearnerSide::Gss(c, chosen), Ok(Some(t))),
                    Ok(gssapi::ClientStep::Chosen(t)) => (LearnerSide::Gss(c, true), Ok(Some(t))),
                    Err(e) => (LearnerSide::Gss(c, chosen), Err(e.to_string())),
                }
            }
        }
    }
}

/// How the learner side ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub enum LearnerOutcome {
    /// Both members proved they know the secret.
    Authenticated,
    /// Not authenticated, and this member does not require it (the reason, for a warning).
    Unauthenticated(String),
}

/// How the server side ended without a refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerOutcome {
    /// The dialer authenticated as this user.
    Authenticated(String),
    /// Let through without authentication (this member does not require it): why, for a
    /// warning, or None where this member has no quorum SASL.
    Unauthenticated(Option<String>),
}

/// `f` within `PEER_AUTH_TIMEOUT_MS`, else an error saying so.
async fn within<T>(f: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    let deadline = async {
        glommio::timer::sleep(Duration::from_millis(PEER_AUTH_TIMEOUT_MS)).await;
        Err(format!("no quorum SASL exchange within {PEER_AUTH_TIMEOUT_MS} ms"))
    };
    futures_lite::future::or(f, deadline).await
}

async fn send<S: AsyncWrite + Unpin>(stream: &mut S, status: AuthStatus, token: &[u8]) -> Result<(), String> {
    let mut b = BytesMut::new();
    encode_auth_frame(&mut b, status, token);
    stream.write_all(&b).await.map_err(|e| format!("writing an auth frame: {e}"))?;
    stream.flush().await.map_err(|e| format!("writing an auth frame: {e}"))
}

async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Result<[u8; 5], String> {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).await.map_err(|e| format!("connection ended during quorum auth: {e}"))?;
    Ok(head)
}

/// The body (status, token) of an auth frame whose head said it is `len` bytes long.
async fn read_body<S: AsyncRead + Unpin>(stream: &mut S, len: usize) -> Result<(AuthStatus, Vec<u8>), String> {
    debug_assert!(len <= PEER_AUTH_FRAME_BYTES_MAX);
    let mut body = vec![0u8; len - 1];
    stream.read_exact(&mut body).await.map_err(|e| format!("connection ended during quorum auth: {e}"))?;
    let (status, token) = decode_auth_body(&body).map_err(|e| e.to_string())?;
    Ok((status, token.to_vec()))
}

/// One whole auth frame (an error if the next frame is not one).
async fn read_auth<S: AsyncRead + Unpin>(stream: &mut S) -> Result<(AuthStatus, Vec<u8>), String> {
    let head = read_head(stream).await?;
    match auth_frame_len(&head).map_err(|e| e.to_string())? {
        Some(len) => read_body(stream, len).await,
        None => Err("the other member sent a message instead of an auth frame".into()),
    }
}

/// The learner (dialing) side, right after this member's hello to `to`.
pub async fn learner<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    p: &PeerSasl,
    to: Sid,
) -> Result<LearnerOutcome, String> {
    let sasl = &p.sasl;
    let require = sasl.keys.learner_require;
    let not_authenticated = |why: String| {
        if require {
            Err(format!("{why} (quorum.auth.learnerRequireSasl)"))
        } else {
            Ok(LearnerOutcome::Unauthenticated(why))
        }
    };
    let exchange = async {
        let (mut side, first) = match &sasl.mechanism {
            QuorumMechanism::DigestMd5 { .. } => {
                let c = sasl.learner_exchange().ok_or("no DIGEST-MD5 credentials")?;
                let first = c.initial_token();
                (LearnerSide::Digest(c), first)
            }
            QuorumMechanism::Kerberos { initiator, .. } => {
                // `_HOST` is the first host of the peer's server.N line (its other addresses,
                // if any, are other routes to the same member).
                let host =
                    p.hosts_of(to).and_then(|h| h.into_iter().next()).ok_or_else(|| format!("no server.{to} line"))?;
                let target = sasl.service_principal_of(&host);
                let c = GssClient::with_initiator(initiator.clone(), &target).map_err(|e| e.to_string())?;
                let (side, first) = LearnerSide::Gss(Box::new(c), false).step(Vec::new()).await;
                (side, first?.ok_or("no first GSSAPI token")?)
            }
        };
        send(stream, AuthStatus::InProgress, &first).await?;
        for _ in 0..PEER_AUTH_ROUNDS_MAX {
            let (status, token) = read_auth(stream).await?;
            match status {
                AuthStatus::NotSasl => return Ok(Err("the other member has no quorum SASL".to_string())),
                AuthStatus::Error => {
                    return Ok(Err(format!("the other member refused our credentials (user {:?})", sasl.username())))
                }
                AuthStatus::InProgress => {
                    let (next, out) = side.step(token).await;
                    side = next;
                    match out? {
                        Some(t) => send(stream, AuthStatus::InProgress, &t).await?,
                        None => return Err("the exchange ended before the other member said so".into()),
                    }
                }
                AuthStatus::Success => {
                    return match side {
                        // DIGEST-MD5: the server's rspauth proves it knows the password.
                        LearnerSide::Digest(_) => match side.step(token).await.1? {
                            None => Ok(Ok(())),
                            Some(_) => Err("the other member said success too early".into()),
                        },
                        // Kerberos: the context proved the server (mutual authentication).
                        LearnerSide::Gss(_, true) if token.is_empty() => Ok(Ok(())),
                        LearnerSide::Gss(..) => Err("the other member said success too early".into()),
                    };
                }
            }
        }
        Err(format!("no end after {PEER_AUTH_ROUNDS_MAX} auth frames"))
    };
    match within(exchange).await {
        Ok(Ok(())) => Ok(LearnerOutcome::Authenticated),
        Ok(Err(why)) | Err(why) => not_authenticated(why),
    }
}

/// The server (accepting) side, right after the dialer's hello was accepted: reads the first
/// frame's head; returns the outcome and the head's bytes when they open a message frame
/// (the caller reads on from them), or a refusal's reason.
pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    peer_sasl: Option<&PeerSasl>,
    sid: Sid,
) -> Result<(ServerOutcome, Option<[u8; 5]>), String> {
    let require = peer_sasl.is_some_and(|p| p.sasl.keys.server_require);
    // A member that requires SASL wants the exchange at once; otherwise the first frame may
    // come whenever the dialer has something to say.
    let head = if require { within(read_head(stream)).await? } else { read_head(stream).await? };
    let Some(len) = auth_frame_len(&head).map_err(|e| e.to_string())? else {
        return match peer_sasl {
            Some(_) if require => Err("it did not authenticate (quorum.auth.serverRequireSasl)".into()),
            Some(_) => Ok((ServerOutcome::Unauthenticated(Some("it did not authenticate".into())), Some(head))),
            None => Ok((ServerOutcome::Unauthenticated(None), Some(head))),
        };
    };
    let Some(p) = peer_sasl else {
        // No quorum SASL here: say so, and read on (the dialer goes on unless it requires).
        within(async {
            read_body(stream, len).await?;
            send(stream, AuthStatus::NotSasl, &[]).await
        })
        .await?;
        let head = read_head(stream).await?;
        if auth_frame_len(&head).map_err(|e| e.to_string())?.is_some() {
            return Err("a second auth frame after NotSasl".into());
        }
        return Ok((ServerOutcome::Unauthenticated(None), Some(head)));
    };
    let max = p.sasl.keys.authenticating_max;
    if p.authenticating.get() >= max {
        return Err(format!("{max} peer connections are authenticating already (quorum.cnxn.threads.size)"));
    }
    p.authenticating.set(p.authenticating.get() + 1);
    let outcome = within(exchange_as_server(stream, p, sid, len)).await;
    p.authenticating.set(p.authenticating.get() - 1);
    match outcome {
        Ok(user) => Ok((ServerOutcome::Authenticated(user), None)),
        Err(why) if require => Err(format!("{why} (quorum.auth.serverRequireSasl)")),
        Err(why) => Ok((ServerOutcome::Unauthenticated(Some(why)), None)),
    }
}

/// A server's mechanism state.
enum ServerSide {
    Digest(digest_md5::Server),
    Gss(Box<GssServer>),
}

/// A server step's result: a challenge, or the final token and the authenticated name.
enum ServerStepped {
    Challenge(Vec<u8>),
    Authenticated(Vec<u8>, String),
}

impl ServerSide {
    /// Takes the learner's token (a Kerberos step on the blocking pool: keytab, replay cache).
    async fn step(self, token: Vec<u8>, sasl: &QuorumSasl) -> (ServerSide, Result<ServerStepped, String>) {
        match (self, &sasl.mechanism) {
            (ServerSide::Digest(mut s), QuorumMechanism::DigestMd5 { users, .. }) => {
                let r = match s.step(&token, |u| users.password(u)) {
                    Ok(ServerStep::Challenge(c)) => Ok(ServerStepped::Challenge(c)),
                    Ok(ServerStep::Authenticated { token, username }) => {
                        Ok(ServerStepped::Authenticated(token, username))
                    }
                    Err(e) => Err(e.to_string()),
                };
                (ServerSide::Digest(s), r)
            }
            (ServerSide::Gss(mut s), _) => {
                let (s, r) = super::offcore::run(move || {
                    let r = s.step(&token);
                    (s, r)
                })
                .await;
                let r = match r {
                    Ok(gssapi::ServerStep::Challenge(c)) => Ok(ServerStepped::Challenge(c)),
                    Ok(gssapi::ServerStep::Authenticated { principal }) => {
                        Ok(ServerStepped::Authenticated(Vec::new(), principal))
                    }
                    Err(e) => Err(e.to_string()),
                };
                (ServerSide::Gss(s), r)
            }
            (side, _) => (side, Err("mechanism mismatch".into())),
        }
    }
}

/// Under Kerberos, an accepted learner's principal (`service/host@REALM`) must name the host
/// of the server its hello says it is (ZooKeeper checks it against the ensemble's hosts).
fn principal_names_host(principal: &str, host: &str) -> Result<(), String> {
    let rest = principal.split_once('@').map_or(principal, |(r, _)| r);
    match rest.split_once('/') {
        Some((_, h)) if h.eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']')) => Ok(()),
        _ => Err(format!("its principal {principal:?} does not name {host}, the host of its server.N line")),
    }
}

/// The server exchange, the first frame's head read (`first_len`): the authenticated name, or
/// why not (the dialer is sent an Error frame then).
async fn exchange_as_server<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    p: &PeerSasl,
    sid: Sid,
    first_len: usize,
) -> Result<String, String> {
    let sasl = &p.sasl;
    let mut side = match &sasl.mechanism {
        QuorumMechanism::DigestMd5 { .. } => ServerSide::Digest(sasl.server_exchange()),
        QuorumMechanism::Kerberos { acceptor, .. } => ServerSide::Gss(Box::new(GssServer::new(acceptor.clone()))),
    };
    let mut first = Some(read_body(stream, first_len).await?);
    for _ in 0..PEER_AUTH_ROUNDS_MAX {
        let (status, token) = match first.take() {
            Some(f) => f,
            None => read_auth(stream).await?,
        };
        if status != AuthStatus::InProgress {
            return Err(format!("unexpected auth status {status:?} from the dialer"));
        }
        let (next, stepped) = side.step(token, sasl).await;
        side = next;
        let checked = stepped.and_then(|s| match s {
            ServerStepped::Authenticated(t, name) if matches!(side, ServerSide::Gss(_)) => {
                // Any host of its server.N line names the member.
                let hosts = p.hosts_of(sid).ok_or_else(|| format!("no server.{sid} line"))?;
                let mut named = Err(format!("no host on the server.{sid} line"));
                for host in &hosts {
                    named = principal_names_host(&name, host);
                    if named.is_ok() {
                        break;
                    }
                }
                named.map(|()| ServerStepped::Authenticated(t, name))
            }
            other => Ok(other),
        });
        match checked {
            Ok(ServerStepped::Challenge(c)) => send(stream, AuthStatus::InProgress, &c).await?,
            Ok(ServerStepped::Authenticated(t, name)) => {
                send(stream, AuthStatus::Success, &t).await?;
                return Ok(name);
            }
            Err(why) => {
                // Tell the dialer (it logs that it was refused), then report why.
                let _ = send(stream, AuthStatus::Error, b"authentication failed").await;
                return Err(why);
            }
        }
    }
    Err(format!("no end after {PEER_AUTH_ROUNDS_MAX} auth frames"))
}
