//! SASL GSSAPI (Kerberos V5, RFC 4752) over the system's GSSAPI library (MIT krb5's
//! `libgssapi_krb5.so.2`, loaded with dlopen when a JAAS `Server` section names
//! `Krb5LoginModule`, so a server without Kerberos needs no krb5 installed), server side for
//! client connections as ZooKeeper's (the JDK's GssKrb5Server with qop `auth`), and the client
//! side (the tests', and any Rust caller's).
//!
//! The exchange (server): GSS context tokens until the context is established (the last
//! output token, if any, is sent and answered by an empty token); then the server sends a
//! wrapped 4-byte offer — security layers (only 1, "no security layer": ZooKeeper's qop
//! `auth`) and a maximum message size — the client answers with a wrapped choice (layer,
//! size, optional authzid); the server checks it chose layer 1, and the client's principal is
//! authenticated. The final answer is a null token.
//! Rules: every call into the library may read the keytab and write the replay cache, so a
//! caller on a glommio core runs `GssServer::step` on the blocking pool; a context moves
//! between threads but is used by one at a time (`Send`, not `Sync`); every buffer and handle
//! the library gives is released; nothing a client sends panics; tokens are bounded
//! (`GSS_TOKEN_BYTES_MAX`); errors carry the library's own status text.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The library loaded (MIT krb5's GSSAPI).
pub const GSSAPI_LIBRARY: &str = "libgssapi_krb5.so.2";
/// The SASL mechanism name.
pub const MECHANISM_GSSAPI: &str = "GSSAPI";
/// Largest token either side accepts (a Kerberos AP-REQ with a PAC fits easily).
pub const GSS_TOKEN_BYTES_MAX: usize = 64 * 1024;
/// The maximum message size the server offers (no security layer: nothing is wrapped after
/// the exchange; the JDK offers 65536 too).
const MAX_MESSAGE_BYTES: u32 = 65536;
/// RFC 4752 security layer bit: no security layer.
const LAYER_NONE: u8 = 1;

type OmUint32 = u32;

#[repr(C)]
struct Buffer {
    length: usize,
    value: *mut c_void,
}

impl Buffer {
    fn empty() -> Buffer {
        Buffer { length: 0, value: std::ptr::null_mut() }
    }

    fn of(bytes: &[u8]) -> Buffer {
        Buffer { length: bytes.len(), value: bytes.as_ptr() as *mut c_void }
    }
}

/// MIT's `gss_key_value_element_desc` / `gss_key_value_set_desc` (credential store options).
#[repr(C)]
struct KeyValueElement {
    key: *const c_char,
    value: *const c_char,
}

#[repr(C)]
struct KeyValueSet {
    count: OmUint32,
    elements: *const KeyValueElement,
}

#[repr(C)]
struct OidDesc {
    length: OmUint32,
    elements: *mut c_void,
}

type Oid = *mut OidDesc;
type Handle = *mut c_void;

const GSS_S_COMPLETE: OmUint32 = 0;
const GSS_S_CONTINUE_NEEDED: OmUint32 = 1;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
const GSS_C_INITIATE: c_int = 1;
const GSS_C_ACCEPT: c_int = 2;
const GSS_C_INDEFINITE: OmUint32 = 0xffff_ffff;
const GSS_C_MUTUAL_FLAG: OmUint32 = 2;
const GSS_C_INTEG_FLAG: OmUint32 = 32;

fn gss_error(major: OmUint32) -> bool {
    major & 0xffff_0000 != 0
}

type AcquireCred = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    OmUint32,
    *mut c_void,
    c_int,
    *mut Handle,
    *mut c_void,
    *mut OmUint32,
) -> OmUint32;
type AcquireCredFrom = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    OmUint32,
    *mut c_void,
    c_int,
    *const KeyValueSet,
    *mut Handle,
    *mut c_void,
    *mut OmUint32,
) -> OmUint32;
type ImportName = unsafe extern "C" fn(*mut OmUint32, *const Buffer, Oid, *mut Handle) -> OmUint32;
type AcceptSecContext = unsafe extern "C" fn(
    *mut OmUint32,
    *mut Handle,
    Handle,
    *const Buffer,
    *mut c_void,
    *mut Handle,
    *mut Oid,
    *mut Buffer,
    *mut OmUint32,
    *mut OmUint32,
    *mut Handle,
) -> OmUint32;
type InitSecContext = unsafe extern "C" fn(
    *mut OmUint32,
    Handle,
    *mut Handle,
    Handle,
    Oid,
    OmUint32,
    OmUint32,
    *mut c_void,
    *const Buffer,
    *mut Oid,
    *mut Buffer,
    *mut OmUint32,
    *mut OmUint32,
) -> OmUint32;
type DisplayName = unsafe extern "C" fn(*mut OmUint32, Handle, *mut Buffer, *mut Oid) -> OmUint32;
type Wrap =
    unsafe extern "C" fn(*mut OmUint32, Handle, c_int, OmUint32, *const Buffer, *mut c_int, *mut Buffer) -> OmUint32;
type Unwrap =
    unsafe extern "C" fn(*mut OmUint32, Handle, *const Buffer, *mut Buffer, *mut c_int, *mut OmUint32) -> OmUint32;
type ReleaseBuffer = unsafe extern "C" fn(*mut OmUint32, *mut Buffer) -> OmUint32;
type ReleaseHandle = unsafe extern "C" fn(*mut OmUint32, *mut Handle) -> OmUint32;
type DeleteSecContext = unsafe extern "C" fn(*mut OmUint32, *mut Handle, *mut Buffer) -> OmUint32;
type DisplayStatus = unsafe extern "C" fn(*mut OmUint32, OmUint32, c_int, Oid, *mut OmUint32, *mut Buffer) -> OmUint32;
type RegisterAcceptorIdentity = unsafe extern "C" fn(*const c_char) -> OmUint32;

/// The library's entry points.
struct Lib {
    acquire_cred: AcquireCred,
    acquire_cred_from: AcquireCredFrom,
    import_name: ImportName,
    accept_sec_context: AcceptSecContext,
    init_sec_context: InitSecContext,
    display_name: DisplayName,
    wrap: Wrap,
    unwrap: Unwrap,
    release_buffer: ReleaseBuffer,
    release_name: ReleaseHandle,
    release_cred: ReleaseHandle,
    delete_sec_context: DeleteSecContext,
    display_status: DisplayStatus,
    register_acceptor_identity: RegisterAcceptorIdentity,
    nt_principal: Oid,
    nt_hostbased_service: Oid,
}

// SAFETY: the entry points and the OID constants are process-wide and immutable; MIT's
// GSSAPI is thread-safe for distinct handles.
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

/// Why GSSAPI failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GssError {
    /// The library could not be loaded (krb5 not installed).
    Load(String),
    /// A GSSAPI call failed: the call and the library's status text.
    Call { call: &'static str, status: String },
    /// The peer broke RFC 4752 (a wrong security layer, a token in the wrong place).
    Protocol(String),
    /// A token over `GSS_TOKEN_BYTES_MAX`.
    TooLarge(usize),
    /// A token after the exchange ended.
    Finished,
}

impl std::fmt::Display for GssError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GssError::Load(why) => {
                write!(f, "GSSAPI: cannot load {GSSAPI_LIBRARY} (install krb5's libgssapi-krb5-2): {why}")
            }
            GssError::Call { call, status } => write!(f, "GSSAPI: {call}: {status}"),
            GssError::Protocol(why) => write!(f, "GSSAPI: {why}"),
            GssError::TooLarge(n) => write!(f, "GSSAPI: a token of {n} bytes (at most {GSS_TOKEN_BYTES_MAX})"),
            GssError::Finished => write!(f, "GSSAPI: the exchange has already ended"),
        }
    }
}

impl std::error::Error for GssError {}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns a thread-local C string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated, valid until the next dl call on this thread.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn load() -> Result<Lib, String> {
    let name = CString::new(GSSAPI_LIBRARY).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a valid C string; the handle is kept for the process's life.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dlerror_text());
    }
    let sym = |s: &str| -> Result<*mut c_void, String> {
        let c = CString::new(s).map_err(|e| e.to_string())?;
        // SAFETY: a valid handle and C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!("{s}: {}", dlerror_text()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol is the function of that name in MIT's gssapi.h, with the signature
    // its type alias spells; the OID symbols are `gss_OID` variables (pointers) read once.
    unsafe {
        Ok(Lib {
            acquire_cred: std::mem::transmute::<*mut c_void, AcquireCred>(sym("gss_acquire_cred")?),
            acquire_cred_from: std::mem::transmute::<*mut c_void, AcquireCredFrom>(sym("gss_acquire_cred_from")?),
            import_name: std::mem::transmute::<*mut c_void, ImportName>(sym("gss_import_name")?),
            accept_sec_context: std::mem::transmute::<*mut c_void, AcceptSecContext>(sym("gss_accept_sec_context")?),
            init_sec_context: std::mem::transmute::<*mut c_void, InitSecContext>(sym("gss_init_sec_context")?),
            display_name: std::mem::transmute::<*mut c_void, DisplayName>(sym("gss_display_name")?),
            wrap: std::mem::transmute::<*mut c_void, Wrap>(sym("gss_wrap")?),
            unwrap: std::mem::transmute::<*mut c_void, Unwrap>(sym("gss_unwrap")?),
            release_buffer: std::mem::transmute::<*mut c_void, ReleaseBuffer>(sym("gss_release_buffer")?),
            release_name: std::mem::transmute::<*mut c_void, ReleaseHandle>(sym("gss_release_name")?),
            release_cred: std::mem::transmute::<*mut c_void, ReleaseHandle>(sym("gss_release_cred")?),
            delete_sec_context: std::mem::transmute::<*mut c_void, DeleteSecContext>(sym("gss_delete_sec_context")?),
            display_status: std::mem::transmute::<*mut c_void, DisplayStatus>(sym("gss_display_status")?),
            register_acceptor_identity: std::mem::transmute::<*mut c_void, RegisterAcceptorIdentity>(sym(
                "krb5_gss_register_acceptor_identity",
            )?),
            nt_principal: *(sym("GSS_KRB5_NT_PRINCIPAL_NAME")? as *const Oid),
            nt_hostbased_service: *(sym("GSS_C_NT_HOSTBASED_SERVICE")? as *const Oid),
        })
    }
}

fn lib() -> Result<&'static Lib, GssError> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| GssError::Load(e.clone()))
}

impl Lib {
    /// The library's text for a status pair.
    fn status(&self, major: OmUint32, minor: OmUint32) -> String {
        let mut parts = Vec::new();
        for (code, kind) in [(major, GSS_C_GSS_CODE), (minor, GSS_C_MECH_CODE)] {
            if code == 0 {
                continue;
            }
            let mut ctx: OmUint32 = 0;
            for _ in 0..8 {
                let (mut m, mut buf) = (0, Buffer::empty());
                // SAFETY: valid out-pointers; the buffer is released below.
                let r = unsafe { (self.display_status)(&mut m, code, kind, std::ptr::null_mut(), &mut ctx, &mut buf) };
                if gss_error(r) {
                    break;
                }
                parts.push(String::from_utf8_lossy(self.take(&mut buf).as_slice()).into_owned());
                if ctx == 0 {
                    break;
                }
            }
        }
        if parts.is_empty() {
            format!("major {major:#x}, minor {minor:#x}")
        } else {
            parts.join(": ")
        }
    }

    /// Copies and releases a buffer the library filled.
    fn take(&self, buf: &mut Buffer) -> Vec<u8> {
        let out = if buf.value.is_null() || buf.length == 0 {
            Vec::new()
        } else {
            // SAFETY: the library filled `length` bytes at `value`.
            unsafe { std::slice::from_raw_parts(buf.value as *const u8, buf.length) }.to_vec()
        };
        let mut m = 0;
        // SAFETY: a buffer the library allocated (or an empty one, which it ignores).
        unsafe { (self.release_buffer)(&mut m, buf) };
        out
    }

    fn check(&self, call: &'static str, major: OmUint32, minor: OmUint32) -> Result<(), GssError> {
        if gss_error(major) {
            Err(GssError::Call { call, status: self.status(major, minor) })
        } else {
            Ok(())
        }
    }

    fn import_name(&self, name: &str, kind: Oid) -> Result<Handle, GssError> {
        let (mut minor, mut out) = (0, std::ptr::null_mut());
        let major = unsafe { (self.import_name)(&mut minor, &Buffer::of(name.as_bytes()), kind, &mut out) };
        self.check("gss_import_name", major, minor)?;
        Ok(out)
    }

    fn display_name(&self, name: Handle) -> Result<String, GssError> {
        let (mut minor, mut buf) = (0, Buffer::empty());
        let major = unsafe { (self.display_name)(&mut minor, name, &mut buf, std::ptr::null_mut()) };
        self.check("gss_display_name", major, minor)?;
        String::from_utf8(self.take(&mut buf))
            .map_err(|_| GssError::Protocol("a principal name that is not UTF-8".into()))
    }

    fn wrap(&self, ctx: Handle, data: &[u8]) -> Result<Vec<u8>, GssError> {
        let (mut minor, mut conf, mut out) = (0, 0, Buffer::empty());
        let major = unsafe { (self.wrap)(&mut minor, ctx, 0, 0, &Buffer::of(data), &mut conf, &mut out) };
        self.check("gss_wrap", major, minor)?;
        Ok(self.take(&mut out))
    }

    fn unwrap(&self, ctx: Handle, data: &[u8]) -> Result<Vec<u8>, GssError> {
        let (mut minor, mut conf, mut qop, mut out) = (0, 0, 0, Buffer::empty());
        let major = unsafe { (self.unwrap)(&mut minor, ctx, &Buffer::of(data), &mut out, &mut conf, &mut qop) };
        self.check("gss_unwrap", major, minor)?;
        Ok(self.take(&mut out))
    }
}

/// A Kerberos identity's credentials from a keytab: an acceptor (a service: the JAAS
/// `Server` / `QuorumServer` section, the keytab registered process-wide as the JDK's
/// Krb5LoginModule would) or an initiator (quorum SASL's learner: the `QuorumLearner` section,
/// its tickets in a memory credential cache of this process).
pub struct Credential {
    cred: Handle,
    pub principal: String,
}

/// A service's credentials (`Credential::acceptor`).
pub type Acceptor = Credential;
/// A learner's credentials (`Credential::initiator`).
pub type Initiator = Credential;

// SAFETY: a credential handle is immutable once acquired; MIT's GSSAPI allows using it from
// several threads.
unsafe impl Send for Credential {}
unsafe impl Sync for Credential {}

impl Drop for Credential {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            let mut m = 0;
            unsafe { (l.release_cred)(&mut m, &mut self.cred) };
        }
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("principal", &self.principal).finish()
    }
}

impl Credential {
    /// Registers `keytab` as the acceptor keytab and acquires credentials for `principal`
    /// (which must be in it). Reads the keytab: at start, off any core.
    pub fn acceptor(keytab: &str, principal: &str) -> Result<Credential, GssError> {
        let l = lib()?;
        let path = CString::new(keytab).map_err(|_| GssError::Protocol("a keytab path with a NUL".into()))?;
        let major = unsafe { (l.register_acceptor_identity)(path.as_ptr()) };
        l.check("krb5_gss_register_acceptor_identity", major, 0)?;
        let mut name = l.import_name(principal, l.nt_principal)?;
        let (mut minor, mut cred) = (0, std::ptr::null_mut());
        let major = unsafe {
            (l.acquire_cred)(
                &mut minor,
                name,
                GSS_C_INDEFINITE,
                std::ptr::null_mut(),
                GSS_C_ACCEPT,
                &mut cred,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let mut m = 0;
        unsafe { (l.release_name)(&mut m, &mut name) };
        l.check("gss_acquire_cred", major, minor)?;
        Ok(Credential { cred, principal: principal.to_string() })
    }
}

impl Credential {
    /// Credentials for `principal` from `keytab` (gss_acquire_cred_from with a client keytab
    /// and a memory ccache). Reads the keytab; tickets are fetched from the KDC when first used.
    pub fn initiator(keytab: &str, principal: &str) -> Result<Credential, GssError> {
        let l = lib()?;
        let nul = |_| GssError::Protocol("a keytab path or principal with a NUL".into());
        let (k1, v1) = (CString::new("client_keytab").map_err(nul)?, CString::new(keytab).map_err(nul)?);
        let ccache = format!("MEMORY:ringkeeper-{}-{principal}", std::process::id());
        let (k2, v2) = (CString::new("ccache").map_err(nul)?, CString::new(ccache).map_err(nul)?);
        let elements = [
            KeyValueElement { key: k1.as_ptr(), value: v1.as_ptr() },
            KeyValueElement { key: k2.as_ptr(), value: v2.as_ptr() },
        ];
        let store = KeyValueSet { count: 2, elements: elements.as_ptr() };
        let mut name = l.import_name(principal, l.nt_principal)?;
        let (mut minor, mut cred) = (0, std::ptr::null_mut());
        let major = unsafe {
            (l.acquire_cred_from)(
                &mut minor,
                name,
                GSS_C_INDEFINITE,
                std::ptr::null_mut(),
                GSS_C_INITIATE,
                &store,
                &mut cred,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let mut m = 0;
        unsafe { (l.release_name)(&mut m, &mut name) };
        l.check("gss_acquire_cred_from", major, minor)?;
        Ok(Credential { cred, principal: principal.to_string() })
    }
}

/// A security context handle, deleted on drop.
struct Context(Handle);

// SAFETY: a context is used by one thread at a time (its owner), and may move between them.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.0.is_null() {
            if let Ok(l) = lib() {
                let mut m = 0;
                unsafe { (l.delete_sec_context)(&mut m, &mut self.0, std::ptr::null_mut()) };
            }
        }
    }
}

enum ServerState {
    Accepting,
    /// Established; its last token sent: the client answers with an empty token.
    AwaitingEmpty {
        principal: String,
    },
    /// The security-layer offer sent.
    AwaitingChoice {
        principal: String,
    },
    Ended,
}

/// What a server step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// A token for the client; the exchange goes on.
    Challenge(Vec<u8>),
    /// The client is authenticated as this principal (answered with a null token).
    Authenticated { principal: String },
}

/// The server side of one SASL GSSAPI exchange.
pub struct GssServer {
    acceptor: std::sync::Arc<Acceptor>,
    ctx: Context,
    state: ServerState,
}

impl GssServer {
    pub fn new(acceptor: std::sync::Arc<Acceptor>) -> GssServer {
        GssServer { acceptor, ctx: Context(std::ptr::null_mut()), state: ServerState::Accepting }
    }

    /// Takes the client's next token. Blocking (keytab, replay cache): off the cores. Any
    /// error ends the exchange.
    pub fn step(&mut self, token: &[u8]) -> Result<ServerStep, GssError> {
        if token.len() > GSS_TOKEN_BYTES_MAX {
            self.state = ServerState::Ended;
            return Err(GssError::TooLarge(token.len()));
        }
        let l = lib()?;
        match std::mem::replace(&mut self.state, ServerState::Ended) {
            ServerState::Accepting => {
                let (mut minor, mut src, mut out, mut flags, mut time) =
                    (0, std::ptr::null_mut(), Buffer::empty(), 0, 0);
                let major = unsafe {
                    (l.accept_sec_context)(
                        &mut minor,
                        &mut self.ctx.0,
                        self.acceptor.cred,
                        &Buffer::of(token),
                        std::ptr::null_mut(),
                        &mut src,
                        std::ptr::null_mut(),
                        &mut out,
                        &mut flags,
                        &mut time,
                        std::ptr::null_mut(),
                    )
                };
                let out = l.take(&mut out);
                let principal = if src.is_null() {
                    None
                } else {
                    let p = l.display_name(src);
                    let mut m = 0;
                    unsafe { (l.release_name)(&mut m, &mut src) };
                    Some(p)
                };
                l.check("gss_accept_sec_context", major, minor)?;
                if major & 0xffff == GSS_S_CONTINUE_NEEDED {
                    self.state = ServerState::Accepting;
                    return Ok(ServerStep::Challenge(out));
                }
                let principal = principal.ok_or_else(|| GssError::Protocol("no client principal".into()))??;
                if !out.is_empty() {
                    self.state = ServerState::AwaitingEmpty { principal };
                    return Ok(ServerStep::Challenge(out));
                }
                self.offer(l, principal)
            }
            ServerState::AwaitingEmpty { principal } => {
                if !token.is_empty() {
                    return Err(GssError::Protocol("a token where the empty answer belongs".into()));
                }
                self.offer(l, principal)
            }
            ServerState::AwaitingChoice { principal } => {
                let choice = l.unwrap(self.ctx.0, token)?;
                let Some(&layer) = choice.first() else {
                    return Err(GssError::Protocol("an empty security layer choice".into()));
                };
                if choice.len() < 4 || layer != LAYER_NONE {
                    return Err(GssError::Protocol(format!(
                        "the client chose security layer {layer:#x}; only 1 (none, qop auth) is offered"
                    )));
                }
                Ok(ServerStep::Authenticated { principal })
            }
            ServerState::Ended => Err(GssError::Finished),
        }
    }

    /// The wrapped security-layer offer: layer 1 only, and the maximum message size.
    fn offer(&mut self, l: &Lib, principal: String) -> Result<ServerStep, GssError> {
        let size = MAX_MESSAGE_BYTES.to_be_bytes();
        let offer = l.wrap(self.ctx.0, &[LAYER_NONE, size[1], size[2], size[3]])?;
        self.state = ServerState::AwaitingChoice { principal };
        Ok(ServerStep::Challenge(offer))
    }
}

/// What a client step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientStep {
    Send(Vec<u8>),
    /// The choice sent: the server answers with a null token and the exchange is done.
    Chosen(Vec<u8>),
}

/// The client side of one SASL GSSAPI exchange (credentials from the default ccache,
/// `KRB5CCNAME`), to `service@host` (ZooKeeper: `zookeeper@<server host>`).
pub struct GssClient {
    target: Handle,
    ctx: Context,
    established: bool,
    /// Credentials of its own (quorum SASL), else the default ccache's.
    initiator: Option<std::sync::Arc<Initiator>>,
}

// SAFETY: as Context; the target name is owned and released on drop.
unsafe impl Send for GssClient {}

impl Drop for GssClient {
    fn drop(&mut self) {
        if let Ok(l) = lib() {
            let mut m = 0;
            unsafe { (l.release_name)(&mut m, &mut self.target) };
        }
    }
}

impl GssClient {
    pub fn new(service: &str, host: &str) -> Result<GssClient, GssError> {
        let l = lib()?;
        let target = l.import_name(&format!("{service}@{host}"), l.nt_hostbased_service)?;
        Ok(GssClient { target, ctx: Context(std::ptr::null_mut()), established: false, initiator: None })
    }

    /// A client with `initiator`'s credentials to the service principal `target`
    /// (`zkquorum/host1[@REALM]`).
    pub fn with_initiator(initiator: std::sync::Arc<Initiator>, target: &str) -> Result<GssClient, GssError> {
        let l = lib()?;
        let target = l.import_name(target, l.nt_principal)?;
        Ok(GssClient { target, ctx: Context(std::ptr::null_mut()), established: false, initiator: Some(initiator) })
    }

    /// The first token (`initial`) or the answer to the server's `token`.
    pub fn step(&mut self, token: &[u8]) -> Result<ClientStep, GssError> {
        let l = lib()?;
        if !self.established {
            let (mut minor, mut out, mut flags, mut time) = (0, Buffer::empty(), 0, 0);
            let input = Buffer::of(token);
            let major = unsafe {
                (l.init_sec_context)(
                    &mut minor,
                    self.initiator.as_ref().map_or(std::ptr::null_mut(), |i| i.cred),
                    &mut self.ctx.0,
                    self.target,
                    std::ptr::null_mut(),
                    GSS_C_MUTUAL_FLAG | GSS_C_INTEG_FLAG,
                    0,
                    std::ptr::null_mut(),
                    if token.is_empty() { std::ptr::null() } else { &input },
                    std::ptr::null_mut(),
                    &mut out,
                    &mut flags,
                    &mut time,
                )
            };
            let out = l.take(&mut out);
            l.check("gss_init_sec_context", major, minor)?;
            self.established = major & 0xffff == GSS_S_COMPLETE;
            return Ok(ClientStep::Send(out));
        }
        if token.is_empty() {
            return Ok(ClientStep::Send(Vec::new()));
        }
        let offer = l.unwrap(self.ctx.0, token)?;
        if offer.first().is_none_or(|&b| b & LAYER_NONE == 0) {
            return Err(GssError::Protocol("the server offers no 'none' security layer".into()));
        }
        Ok(ClientStep::Chosen(l.wrap(self.ctx.0, &[LAYER_NONE, 0, 0, 0])?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_loads_and_errors_carry_its_text() {
        // The build machines have krb5 (scripts/test.sh installs it).
        let l = lib().expect("libgssapi_krb5.so.2 loads");
        let text = l.status(0x000d_0000, 0); // GSS_S_FAILURE
        assert!(text.contains("failure"), "{text}");
        let err = Credential::acceptor("/nonexistent/krb5.keytab", "zookeeper/localhost@NO.SUCH.REALM").unwrap_err();
        assert!(matches!(err, GssError::Call { call: "gss_acquire_cred", .. }), "{err}");
    }
}
