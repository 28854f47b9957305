//! SASL DIGEST-MD5 (RFC 2831), sans-IO, both sides, with qop=auth only (authentication, no
//! integrity or confidentiality layer): what ZooKeeper's Java server (the JDK's DigestMD5Server
//! created with protocol `zookeeper` and server name `zk-sasl-md5`) and its clients (the JDK's
//! DigestMD5Client, pure-sasl for kazoo) speak.
//!
//! The exchange: the client's first token is empty; the server answers a challenge (realm,
//! nonce, qop="auth", charset=utf-8, algorithm=md5-sess); the client answers a digest
//! response; the server checks it and answers `rspauth=…`, after which it knows the user; the
//! client checks rspauth and is done (it sends nothing more).
//! Rules: no I/O, no clock, no randomness (the caller passes the nonce / cnonce); nothing a
//! peer sends panics; tokens are bounded (`TOKEN_BYTES_MAX`); passwords never appear in an
//! error; digests are compared in constant time.

use md5::{Digest, Md5};

/// The realm (and server name) ZooKeeper uses for DIGEST-MD5.
pub const ZK_REALM: &str = "zk-sasl-md5";
/// The protocol (service) ZooKeeper's DIGEST-MD5 digest-uri names.
pub const ZK_PROTOCOL: &str = "zookeeper";
/// Largest token either side accepts (RFC 2831: a challenge is at most 2048 bytes, a
/// response at most 4096).
pub const TOKEN_BYTES_MAX: usize = 4096;
/// Directives in one token at most.
pub const DIRECTIVES_MAX: usize = 32;

/// Why an exchange failed. The text never holds a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestError {
    /// The token is not a directive list (unbalanced quotes, no `=`, too long, not UTF-8).
    Malformed(&'static str),
    /// A directive the step needs is absent.
    Missing(&'static str),
    /// A directive has a value this side cannot take (names the directive).
    Unacceptable(&'static str),
    /// A directive appears twice where RFC 2831 allows it once.
    Repeated(&'static str),
    /// The first client token of an exchange was not empty.
    InitialResponse,
    /// The user is not known to the server.
    UnknownUser(String),
    /// The digest does not match (a wrong password, or a tampered exchange).
    WrongResponse(String),
    /// The server's rspauth does not prove it knows the password.
    WrongServerProof,
    /// A token after the exchange ended (or after it failed).
    Finished,
}

impl std::fmt::Display for DigestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DigestError::Malformed(why) => write!(f, "DIGEST-MD5: malformed token: {why}"),
            DigestError::Missing(d) => write!(f, "DIGEST-MD5: missing directive {d}"),
            DigestError::Unacceptable(d) => write!(f, "DIGEST-MD5: unacceptable value of {d}"),
            DigestError::Repeated(d) => write!(f, "DIGEST-MD5: directive {d} given twice"),
            DigestError::InitialResponse => write!(f, "DIGEST-MD5: the client's first token must be empty"),
            DigestError::UnknownUser(u) => write!(f, "DIGEST-MD5: unknown user {u:?}"),
            DigestError::WrongResponse(u) => write!(f, "DIGEST-MD5: wrong response (password) for user {u:?}"),
            DigestError::WrongServerProof => write!(f, "DIGEST-MD5: the server's rspauth does not match"),
            DigestError::Finished => write!(f, "DIGEST-MD5: the exchange has already ended"),
        }
    }
}

impl std::error::Error for DigestError {}

/// One parsed token: `name=value` pairs in order, quoted values unquoted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Directives(Vec<(String, String)>);

impl Directives {
    /// Parses RFC 2831's `#( name "=" ( token | quoted-string ) )` list: commas may repeat,
    /// linear white space around elements is skipped, `\` escapes one character in quotes.
    pub fn parse(token: &[u8]) -> Result<Directives, DigestError> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(DigestError::Malformed("longer than 4096 bytes"));
        }
        let text = std::str::from_utf8(token).map_err(|_| DigestError::Malformed("not UTF-8"))?;
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            while matches!(chars.peek(), Some(c) if c.is_ascii_whitespace() || *c == ',') {
                chars.next();
            }
            if chars.peek().is_none() {
                break;
            }
            let mut name = String::new();
            while let Some(&c) = chars.peek() {
                if c == '=' || c == ',' || c.is_ascii_whitespace() {
                    break;
                }
                name.push(c);
                chars.next();
            }
            while matches!(chars.peek(), Some(c) if c.is_ascii_whitespace()) {
                chars.next();
            }
            if chars.next() != Some('=') || name.is_empty() {
                return Err(DigestError::Malformed("expected name=value"));
            }
            while matches!(chars.peek(), Some(c) if c.is_ascii_whitespace()) {
                chars.next();
            }
            let mut value = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => return Err(DigestError::Malformed("unterminated quoted string")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => value.push(c),
                            None => return Err(DigestError::Malformed("unterminated quoted string")),
                        },
                        Some(c) => value.push(c),
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == ',' {
                        break;
                    }
                    value.push(c);
                    chars.next();
                }
                value.truncate(value.trim_end().len());
            }
            while matches!(chars.peek(), Some(c) if c.is_ascii_whitespace()) {
                chars.next();
            }
            match chars.next() {
                None | Some(',') => {}
                Some(_) => return Err(DigestError::Malformed("expected a comma between directives")),
            }
            if out.len() == DIRECTIVES_MAX {
                return Err(DigestError::Malformed("too many directives"));
            }
            out.push((name.to_ascii_lowercase(), value));
        }
        Ok(Directives(out))
    }

    /// The value of a directive allowed once; None if absent.
    pub fn once(&self, name: &'static str) -> Result<Option<&str>, DigestError> {
        let mut found = self.0.iter().filter(|(n, _)| n == name);
        let first = found.next().map(|(_, v)| v.as_str());
        if found.next().is_some() {
            return Err(DigestError::Repeated(name));
        }
        Ok(first)
    }

    fn required(&self, name: &'static str) -> Result<&str, DigestError> {
        self.once(name)?.ok_or(DigestError::Missing(name))
    }

    /// Every value of a directive that may repeat (realm in a challenge).
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().filter(move |(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A quoted-string: `"` and `\` escaped.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// RFC 2831 2.1.2.1: with charset=utf-8, a user name or password whose characters all fit
/// ISO 8859-1 is hashed in ISO 8859-1 (as the JDK does); otherwise in UTF-8.
fn latin1_or_utf8(s: &str) -> Vec<u8> {
    if s.chars().all(|c| (c as u32) < 256) {
        s.chars().map(|c| c as u8).collect()
    } else {
        s.as_bytes().to_vec()
    }
}

/// The inputs both sides hash (RFC 2831 2.1.2.1).
pub struct DigestInputs<'a> {
    /// The user name (`username` directive).
    pub username: &'a str,
    /// The realm (`realm` directive).
    pub realm: &'a str,
    /// The user's password (never sent).
    pub password: &'a str,
    /// The server's nonce.
    pub nonce: &'a str,
    /// The client's cnonce.
    pub cnonce: &'a str,
    /// The authorization identity, if the client sent `authzid` (it then enters A1).
    pub authzid: Option<&'a str>,
    /// The nonce count, 8 hex digits (`00000001` for the first response).
    pub nc: &'a str,
    /// The quality of protection: `auth`.
    pub qop: &'a str,
    /// The `digest-uri` directive, `protocol/server-name`.
    pub digest_uri: &'a str,
}

impl DigestInputs<'_> {
    /// H(A1) with algorithm=md5-sess.
    fn ha1(&self) -> [u8; 16] {
        let user = latin1_or_utf8(self.username);
        let password = latin1_or_utf8(self.password);
        let inner = md5(&[&user, b":", &latin1_or_utf8(self.realm), b":", &password]);
        let mut parts: Vec<&[u8]> = vec![&inner, b":", self.nonce.as_bytes(), b":", self.cnonce.as_bytes()];
        if let Some(z) = self.authzid {
            parts.push(b":");
            parts.push(z.as_bytes());
        }
        md5(&parts)
    }

    /// KD(HEX(H(A1)), nonce:nc:cnonce:qop:HEX(H(A2))) in lower-case hex; A2 is
    /// `AUTHENTICATE:uri` for the client's response and `:uri` for the server's rspauth.
    fn kd(&self, a2_prefix: &str) -> String {
        let ha2 = hex(&md5(&[a2_prefix.as_bytes(), self.digest_uri.as_bytes()]));
        let ha1 = hex(&self.ha1());
        let parts: [&[u8]; 11] = [
            ha1.as_bytes(),
            b":",
            self.nonce.as_bytes(),
            b":",
            self.nc.as_bytes(),
            b":",
            self.cnonce.as_bytes(),
            b":",
            self.qop.as_bytes(),
            b":",
            ha2.as_bytes(),
        ];
        hex(&md5(&parts))
    }

    /// The client's `response` directive.
    pub fn response(&self) -> String {
        self.kd("AUTHENTICATE:")
    }

    /// The server's `rspauth`.
    pub fn rspauth(&self) -> String {
        self.kd(":")
    }
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a server step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// A token for the client; the exchange goes on.
    Challenge(Vec<u8>),
    /// The client proved its password: the final token (rspauth) and the authenticated user.
    Authenticated {
        /// The final server token, `rspauth=...`.
        token: Vec<u8>,
        /// The authenticated user name.
        username: String,
    },
}

#[derive(Debug)]
enum ServerState {
    Start,
    Challenged { nonce: String },
    Ended,
}

/// The server side of one exchange.
#[derive(Debug)]
pub struct Server {
    realm: String,
    protocol: String,
    server_name: String,
    nonce: String,
    state: ServerState,
}

impl Server {
    /// ZooKeeper's server: realm and server name `zk-sasl-md5`, protocol `zookeeper`; `nonce`
    /// is the caller's fresh random value (printable, without quotes or commas).
    pub fn zookeeper(nonce: String) -> Server {
        Server::new(ZK_REALM, ZK_PROTOCOL, ZK_REALM, nonce)
    }

    /// A server with its own realm, protocol and server name (the digest-uri is
    /// `protocol/server_name`); `nonce` as in `zookeeper`.
    pub fn new(realm: &str, protocol: &str, server_name: &str, nonce: String) -> Server {
        Server {
            realm: realm.to_string(),
            protocol: protocol.to_string(),
            server_name: server_name.to_string(),
            nonce,
            state: ServerState::Start,
        }
    }

    /// Whether the exchange has ended (authenticated or failed).
    pub fn ended(&self) -> bool {
        matches!(self.state, ServerState::Ended)
    }

    /// Takes the client's next token; `password_of` looks a user's password up. Any error
    /// ends the exchange.
    pub fn step(
        &mut self,
        token: &[u8],
        password_of: impl Fn(&str) -> Option<String>,
    ) -> Result<ServerStep, DigestError> {
        let state = std::mem::replace(&mut self.state, ServerState::Ended);
        match state {
            ServerState::Start => {
                if !token.is_empty() {
                    return Err(DigestError::InitialResponse);
                }
                let challenge = format!(
                    "realm={},nonce={},qop=\"auth\",charset=utf-8,algorithm=md5-sess",
                    quoted(&self.realm),
                    quoted(&self.nonce)
                );
                self.state = ServerState::Challenged { nonce: self.nonce.clone() };
                Ok(ServerStep::Challenge(challenge.into_bytes()))
            }
            ServerState::Challenged { nonce } => self.check_response(token, &nonce, password_of),
            ServerState::Ended => Err(DigestError::Finished),
        }
    }

    fn check_response(
        &self,
        token: &[u8],
        nonce: &str,
        password_of: impl Fn(&str) -> Option<String>,
    ) -> Result<ServerStep, DigestError> {
        let d = Directives::parse(token)?;
        if let Some(charset) = d.once("charset")? {
            if !charset.eq_ignore_ascii_case("utf-8") {
                return Err(DigestError::Unacceptable("charset"));
            }
        }
        let username = d.required("username")?;
        let realm = d.once("realm")?.unwrap_or("");
        if !realm.is_empty() && realm != self.realm {
            return Err(DigestError::Unacceptable("realm"));
        }
        if d.required("nonce")? != nonce {
            return Err(DigestError::Unacceptable("nonce"));
        }
        let cnonce = d.required("cnonce")?;
        let nc = d.required("nc")?;
        if nc != "00000001" {
            return Err(DigestError::Unacceptable("nc"));
        }
        let qop = d.once("qop")?.unwrap_or("auth");
        if qop != "auth" {
            return Err(DigestError::Unacceptable("qop"));
        }
        let uri = d.required("digest-uri")?;
        let uri_ok = match uri.split_once('/') {
            Some((proto, rest)) => {
                let host = rest.split('/').next().unwrap_or("");
                proto == self.protocol && host.eq_ignore_ascii_case(&self.server_name)
            }
            None => false,
        };
        if !uri_ok {
            return Err(DigestError::Unacceptable("digest-uri"));
        }
        let response = d.required("response")?;
        let authzid = d.once("authzid")?;
        let password = password_of(username).ok_or_else(|| DigestError::UnknownUser(username.to_string()))?;
        let inputs =
            DigestInputs { username, realm, password: &password, nonce, cnonce, authzid, nc, qop, digest_uri: uri };
        if !same(&inputs.response(), &response.to_ascii_lowercase()) {
            return Err(DigestError::WrongResponse(username.to_string()));
        }
        let token = format!("rspauth={}", inputs.rspauth()).into_bytes();
        Ok(ServerStep::Authenticated { token, username: username.to_string() })
    }
}

/// What a client step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientStep {
    /// Send this token to the server.
    Send(Vec<u8>),
    /// The server proved it knows the password: authenticated, nothing more to send.
    Done,
}

#[derive(Debug)]
enum ClientState {
    Start,
    Responded { expect_rspauth: String },
    Ended,
}

/// The client side of one exchange.
#[derive(Debug)]
pub struct Client {
    username: String,
    password: String,
    protocol: String,
    server_name: String,
    cnonce: String,
    state: ClientState,
}

impl Client {
    /// A client of ZooKeeper (digest-uri `zookeeper/zk-sasl-md5`); `cnonce` is the caller's
    /// fresh random value (printable, without quotes or commas).
    pub fn zookeeper(username: &str, password: &str, cnonce: String) -> Client {
        Client::new(username, password, ZK_PROTOCOL, ZK_REALM, cnonce)
    }

    /// A client for any service (digest-uri `protocol/server_name`); `cnonce` as in `zookeeper`.
    pub fn new(username: &str, password: &str, protocol: &str, server_name: &str, cnonce: String) -> Client {
        Client {
            username: username.to_string(),
            password: password.to_string(),
            protocol: protocol.to_string(),
            server_name: server_name.to_string(),
            cnonce,
            state: ClientState::Start,
        }
    }

    /// The first token: empty (DIGEST-MD5 has no initial response).
    pub fn initial_token(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Takes the server's next token. Any error ends the exchange.
    pub fn step(&mut self, token: &[u8]) -> Result<ClientStep, DigestError> {
        match std::mem::replace(&mut self.state, ClientState::Ended) {
            ClientState::Start => {
                let d = Directives::parse(token)?;
                let nonce = d.required("nonce")?;
                if d.once("algorithm")? != Some("md5-sess") {
                    return Err(DigestError::Unacceptable("algorithm"));
                }
                let qops = d.once("qop")?.unwrap_or("auth");
                if !qops.split(',').any(|q| q.trim() == "auth") {
                    return Err(DigestError::Unacceptable("qop"));
                }
                let utf8 = match d.once("charset")? {
                    None => false,
                    Some(c) if c.eq_ignore_ascii_case("utf-8") => true,
                    Some(_) => return Err(DigestError::Unacceptable("charset")),
                };
                // The first realm offered (ZooKeeper offers one); none: the empty realm.
                let realm = d.all("realm").next().unwrap_or("").to_string();
                let digest_uri = format!("{}/{}", self.protocol, self.server_name);
                let inputs = DigestInputs {
                    username: &self.username,
                    realm: &realm,
                    password: &self.password,
                    nonce,
                    cnonce: &self.cnonce,
                    authzid: None,
                    nc: "00000001",
                    qop: "auth",
                    digest_uri: &digest_uri,
                };
                let mut out = String::new();
                if utf8 {
                    out.push_str("charset=utf-8,");
                }
                out.push_str(&format!("username={},", quoted(&self.username)));
                if d.all("realm").next().is_some() {
                    out.push_str(&format!("realm={},", quoted(&realm)));
                }
                out.push_str(&format!(
                    "nonce={},nc=00000001,cnonce={},digest-uri={},response={},qop=auth",
                    quoted(nonce),
                    quoted(&self.cnonce),
                    quoted(&digest_uri),
                    inputs.response()
                ));
                self.state = ClientState::Responded { expect_rspauth: inputs.rspauth() };
                Ok(ClientStep::Send(out.into_bytes()))
            }
            ClientState::Responded { expect_rspauth } => {
                let d = Directives::parse(token)?;
                let rspauth = d.required("rspauth")?;
                if same(&rspauth.to_ascii_lowercase(), &expect_rspauth) {
                    Ok(ClientStep::Done)
                } else {
                    Err(DigestError::WrongServerProof)
                }
            }
            ClientState::Ended => Err(DigestError::Finished),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2831 section 4, the IMAP example (user chris, password secret).
    const IMAP_CHALLENGE: &str =
        "realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",qop=\"auth\",algorithm=md5-sess,charset=utf-8";
    const IMAP_RESPONSE: &str =
        "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",\
        nc=00000001,cnonce=\"OA6MHXh6VqTrRk\",digest-uri=\"imap/elwood.innosoft.com\",\
        response=d388dad90d4bbd760a152321f2143af7,qop=auth";
    const IMAP_RSPAUTH: &str = "rspauth=ea40f60335c427b5527b84dbabcdfffd";

    fn chris(user: &str) -> Option<String> {
        (user == "chris").then(|| "secret".to_string())
    }

    #[test]
    fn rfc2831_imap_example_server_side() {
        let mut s = Server::new("elwood.innosoft.com", "imap", "elwood.innosoft.com", "OA6MG9tEQGm2hh".into());
        let ServerStep::Challenge(c) = s.step(b"", chris).unwrap() else { panic!("a challenge first") };
        let parsed = Directives::parse(&c).unwrap();
        assert_eq!(parsed.once("nonce").unwrap(), Some("OA6MG9tEQGm2hh"));
        assert_eq!(parsed.once("realm").unwrap(), Some("elwood.innosoft.com"));
        let step = s.step(IMAP_RESPONSE.as_bytes(), chris).unwrap();
        assert_eq!(
            step,
            ServerStep::Authenticated { token: IMAP_RSPAUTH.as_bytes().to_vec(), username: "chris".into() }
        );
        assert_eq!(s.step(b"", chris), Err(DigestError::Finished));
    }

    #[test]
    fn rfc2831_imap_example_client_side() {
        let mut c = Client::new("chris", "secret", "imap", "elwood.innosoft.com", "OA6MHXh6VqTrRk".into());
        assert!(c.initial_token().is_empty());
        let ClientStep::Send(resp) = c.step(IMAP_CHALLENGE.as_bytes()).unwrap() else { panic!("a response") };
        let ours = Directives::parse(&resp).unwrap();
        let theirs = Directives::parse(IMAP_RESPONSE.as_bytes()).unwrap();
        for name in ["charset", "username", "realm", "nonce", "nc", "cnonce", "digest-uri", "response", "qop"] {
            assert_eq!(ours.once(name).unwrap(), theirs.once(name).unwrap(), "{name}");
        }
        assert_eq!(c.step(IMAP_RSPAUTH.as_bytes()).unwrap(), ClientStep::Done);
    }

    #[test]
    fn rfc2831_acap_example() {
        let inputs = DigestInputs {
            username: "chris",
            realm: "elwood.innosoft.com",
            password: "secret",
            nonce: "OA9BSXrbuRhWay",
            cnonce: "OA9BSuZWMSpW8m",
            authzid: None,
            nc: "00000001",
            qop: "auth",
            digest_uri: "acap/elwood.innosoft.com",
        };
        assert_eq!(inputs.response(), "6084c6db3fede7352c551284490fd0fc");
        assert_eq!(inputs.rspauth(), "2f0b3d7c3c2e486600ef710726aa2eae");
    }

    fn users(u: &str) -> Option<String> {
        match u {
            "bob" => Some("bobpw".into()),
            "ünï" => Some("pässwörd".into()),
            _ => None,
        }
    }

    fn exchange(user: &str, password: &str) -> Result<String, DigestError> {
        let mut s = Server::zookeeper("n0nce+/=".into());
        let mut c = Client::zookeeper(user, password, "cn0nce".into());
        let ServerStep::Challenge(ch) = s.step(&c.initial_token(), users)? else { panic!("challenge") };
        let ClientStep::Send(resp) = c.step(&ch)? else { panic!("response") };
        match s.step(&resp, users)? {
            ServerStep::Authenticated { token, username } => {
                assert_eq!(c.step(&token)?, ClientStep::Done);
                Ok(username)
            }
            ServerStep::Challenge(_) => panic!("no second challenge"),
        }
    }

    #[test]
    fn our_client_and_server_agree_and_refuse_what_they_must() {
        assert_eq!(exchange("bob", "bobpw"), Ok("bob".into()));
        assert_eq!(exchange("ünï", "pässwörd"), Ok("ünï".into()));
        assert_eq!(exchange("bob", "nope"), Err(DigestError::WrongResponse("bob".into())));
        assert_eq!(exchange("eve", "x"), Err(DigestError::UnknownUser("eve".into())));
    }

    #[test]
    fn the_server_refuses_a_changed_exchange() {
        let respond = |edit: &dyn Fn(String) -> String| {
            let mut s = Server::zookeeper("abc".into());
            let mut c = Client::zookeeper("bob", "bobpw", "xyz".into());
            let ServerStep::Challenge(ch) = s.step(b"", users).unwrap() else { panic!() };
            let ClientStep::Send(r) = c.step(&ch).unwrap() else { panic!() };
            s.step(edit(String::from_utf8(r).unwrap()).as_bytes(), users)
        };
        assert!(matches!(respond(&|r| r), Ok(ServerStep::Authenticated { .. })));
        let bad = [
            ("nonce=\"abc\"", "nonce=\"abd\"", DigestError::Unacceptable("nonce")),
            ("nc=00000001", "nc=00000002", DigestError::Unacceptable("nc")),
            ("qop=auth", "qop=auth-int", DigestError::Unacceptable("qop")),
            ("zookeeper/zk-sasl-md5", "imap/zk-sasl-md5", DigestError::Unacceptable("digest-uri")),
            ("realm=\"zk-sasl-md5\"", "realm=\"other\"", DigestError::Unacceptable("realm")),
            ("cnonce=\"xyz\"", "cnonce=\"xyy\"", DigestError::WrongResponse("bob".into())),
            ("username=\"bob\"", "username=\"bob\",username=\"eve\"", DigestError::Repeated("username")),
        ];
        for (from, to, want) in bad {
            assert_eq!(respond(&|r| r.replace(from, to)), Err(want), "{from} -> {to}");
        }
        assert_eq!(respond(&|_| "username=\"bob\"".into()), Err(DigestError::Missing("nonce")));
        let mut s = Server::zookeeper("abc".into());
        assert_eq!(s.step(b"x", users), Err(DigestError::InitialResponse));
        assert!(s.ended());
    }

    #[test]
    fn an_authzid_enters_a1() {
        let base = DigestInputs {
            username: "bob",
            realm: ZK_REALM,
            password: "pw",
            nonce: "n",
            cnonce: "c",
            authzid: None,
            nc: "00000001",
            qop: "auth",
            digest_uri: "zookeeper/zk-sasl-md5",
        };
        let with = DigestInputs { authzid: Some("bob"), ..base };
        let without = DigestInputs { authzid: None, ..with };
        assert_ne!(with.response(), without.response());
    }

    #[test]
    fn the_client_checks_the_server_proof() {
        let mut s = Server::zookeeper("abc".into());
        let mut c = Client::zookeeper("bob", "bobpw", "xyz".into());
        let ServerStep::Challenge(ch) = s.step(b"", users).unwrap() else { panic!() };
        let _ = c.step(&ch).unwrap();
        assert_eq!(c.step(b"rspauth=00000000000000000000000000000000"), Err(DigestError::WrongServerProof));
        let mut c = Client::zookeeper("bob", "bobpw", "xyz".into());
        assert_eq!(c.step(b"realm=\"x\",nonce=\"n\",algorithm=md5"), Err(DigestError::Unacceptable("algorithm")));
    }

    #[test]
    fn directives_parse_quotes_escapes_and_refuse_garbage() {
        let d = Directives::parse(b" a = \"x\\\"y,z\" ,, B=tok , c=\"\"").unwrap();
        assert_eq!(d.once("a").unwrap(), Some("x\"y,z"));
        assert_eq!(d.once("b").unwrap(), Some("tok"));
        assert_eq!(d.once("c").unwrap(), Some(""));
        assert_eq!(Directives::parse(b""), Ok(Directives::default()));
        for bad in [&b"a"[..], b"a=\"x", b"=x", b"a=\"x\"y", b"a=\"x\\", &[0xff, b'=', b'1']] {
            assert!(Directives::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Directives::parse(&vec![b'a'; TOKEN_BYTES_MAX + 1]).is_err());
        let many: String = (0..=DIRECTIVES_MAX).map(|i| format!("k{i}=v,")).collect();
        assert!(Directives::parse(many.as_bytes()).is_err());
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
