//! zkCli's command language, parsed into typed commands: the shell's line splitting (words,
//! or '…' / "…" quoted strings), each command's flags in the manner of the commons-cli parser
//! zkCli uses (flags anywhere, `-sw` bundles, `-v5` / `-v 5` / `-v=5` values, a lone
//! negative number as a value), its usage line, and the checks zkCli makes before it talks
//! to a server (create's flag combinations, TTL range, numbers), with zkCli's messages.
//! Rules: pure (no I/O, no client); every malformed input is a `ParseError`, never a panic;
//! what reaches a server (paths, ACLs) is checked later by `exec` and `acl`.

use std::collections::BTreeMap;

use crate::client::types::{AddWatchMode, CreateMode, WatcherType, TTL_MS_MAX};

use super::acl::{parse_acl, AclSpec};

/// deleteall's default number of deletes in one multi (zkCli's `-b` default).
pub const DELETEALL_BATCH_DEFAULT: usize = 1000;

/// One command of the shell, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Create(Create),
    Get {
        path: String,
        stat: bool,
        watch: bool,
    },
    Set {
        path: String,
        data: String,
        stat: bool,
        version: i32,
    },
    Ls {
        path: String,
        stat: bool,
        watch: bool,
        recursive: bool,
    },
    Stat {
        path: String,
        watch: bool,
    },
    Delete {
        path: String,
        version: i32,
    },
    DeleteAll {
        path: String,
        batch: usize,
    },
    Sync {
        path: String,
    },
    AddWatch {
        path: String,
        mode: AddWatchMode,
    },
    RemoveWatches {
        path: String,
        watcher_type: WatcherType,
    },
    GetAcl {
        path: String,
        stat: bool,
    },
    SetAcl {
        path: String,
        acl: AclSpec,
        stat: bool,
        version: i32,
        recursive: bool,
    },
    AddAuth {
        scheme: String,
        auth: Option<String>,
    },
    WhoAmI,
    /// `None`: every ephemeral of the session.
    GetEphemerals {
        path: Option<String>,
    },
    GetAllChildrenNumber {
        path: String,
    },
    /// zkCli's `setquota -n|-b|-N|-B val path`: one limit per call.
    SetQuota {
        path: String,
        field: QuotaField,
        value: i64,
    },
    ListQuota {
        path: String,
    },
    /// `None`: the whole quota goes; else that one limit is unset.
    DelQuota {
        path: String,
        field: Option<QuotaField>,
    },
    /// `client`: only the client connection string the config names (`-c`).
    Config {
        client: bool,
        watch: bool,
        stat: bool,
    },
    /// zkCli's reconfig: incremental (`-add`, `-remove`) or bulk (`-members`, or `-file`'s
    /// server lines), from config version `version` (`-v`, hexadecimal; -1 for any).
    Reconfig {
        stat: bool,
        version: i64,
        joining: Option<String>,
        leaving: Option<String>,
        members: Option<String>,
        file: Option<String>,
    },
    /// `None`: the current server list again.
    Connect {
        servers: Option<String>,
    },
    Close,
    History,
    /// `None` (a bare `redo`) does nothing, as in zkCli.
    Redo {
        index: Option<i64>,
    },
    /// `None` prints the setting.
    PrintWatches {
        on: Option<bool>,
    },
    Version,
    Quit,
}

/// One limit of a quota: `-n` count, `-b` bytes (soft), `-N`, `-B` (hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaField {
    Count,
    Bytes,
    CountHard,
    BytesHard,
}

impl QuotaField {
    const FLAGS: [(char, QuotaField); 4] = [
        ('n', QuotaField::Count),
        ('b', QuotaField::Bytes),
        ('N', QuotaField::CountHard),
        ('B', QuotaField::BytesHard),
    ];

    /// The one quota flag of a command (zkCli's option group: at most one).
    fn of(w: &Words) -> Result<Option<(char, QuotaField)>, ParseError> {
        let mut given = QuotaField::FLAGS.into_iter().filter(|(c, _)| w.has(*c));
        match (given.next(), given.next()) {
            (Some((first, _)), Some((second, _))) => Err(ParseError::AlreadySelected(second, first)),
            (one, _) => Ok(one),
        }
    }

    pub fn is_count(self) -> bool {
        matches!(self, QuotaField::Count | QuotaField::CountHard)
    }
}

/// `create`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Create {
    pub path: String,
    /// `None`: no data argument, the node's data is null (zkCli's `get` prints "null").
    pub data: Option<String>,
    /// `None`: world:anyone:cdrwa.
    pub acl: Option<AclSpec>,
    pub mode: CreateMode,
    pub ttl_ms: Option<i64>,
}

/// Why a command line is not a command (the message is what zkCli prints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not one of the commands.
    NotFound(String),
    /// Too few arguments: the command's usage.
    Usage(&'static str, &'static str),
    UnrecognizedOption(String),
    MissingArgument(char),
    /// Two options of one group (setquota's -n/-b/-N/-B): the second and the first.
    AlreadySelected(char, char),
    /// Arguments that cannot go together or are out of range.
    Malformed(String),
}

impl ParseError {
    /// The process exit code zkCli uses for it.
    pub fn exit_code(&self) -> u8 {
        match self {
            ParseError::NotFound(_) => 127,
            _ => 1,
        }
    }
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::NotFound(c) => write!(f, "Command not found: {c}"),
            ParseError::Usage(name, "") => write!(f, "{name}"),
            ParseError::Usage(name, options) => write!(f, "{name} {options}"),
            // zkCli prints commons-cli's exception as Java's toString: class, then message.
            ParseError::UnrecognizedOption(o) => {
                write!(f, "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: {o}")
            }
            ParseError::MissingArgument(o) => {
                write!(f, "org.apache.commons.cli.MissingArgumentException: Missing argument for option: {o}")
            }
            ParseError::AlreadySelected(second, first) => write!(
                f,
                "org.apache.commons.cli.AlreadySelectedException: The option '{second}' was specified but an option \
                 from this group has already been selected: '{first}'"
            ),
            ParseError::Malformed(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Every command with its usage, in the order `usage` lists them.
pub const COMMANDS: &[(&str, &str)] = &[
    (
        "addWatch",
        "[-m mode] path # optional mode is one of [PERSISTENT, PERSISTENT_RECURSIVE] - default is PERSISTENT_RECURSIVE",
    ),
    ("addauth", "scheme auth"),
    ("close", ""),
    ("config", "[-c] [-w] [-s]"),
    ("connect", "host:port"),
    ("create", "[-s] [-e] [-c] [-t ttl] path [data] [acl]"),
    ("delete", "[-v version] path"),
    ("deleteall", "path [-b batch size]"),
    ("delquota", "[-n|-b|-N|-B] path"),
    ("exit", ""),
    ("get", "[-s] [-w] path"),
    ("getAcl", "[-s] path"),
    ("getAllChildrenNumber", "path"),
    ("getEphemerals", "path"),
    ("history", ""),
    ("listquota", "path"),
    ("ls", "[-s] [-w] [-R] path"),
    ("printwatches", "on|off"),
    ("quit", ""),
    (
        "reconfig",
        "[-s] [-v version] [[-file path] | [-members serverID=host:port1:port2;port3[,...]*]] | [-add \
         serverId=host:port1:port2;port3[,...]]* [-remove serverId[,...]*]",
    ),
    ("redo", "cmdno"),
    ("removewatches", "path [-c|-d|-a|-p|-r] [-l]"),
    ("set", "[-s] [-v version] path data"),
    ("setAcl", "[-s] [-v version] [-R] path acl"),
    ("setquota", "-n|-b|-N|-B val path"),
    ("stat", "[-w] path"),
    ("sync", "path"),
    ("version", ""),
    ("whoami", ""),
];

/// The list of commands printed for an unknown one (to stderr, as zkCli does).
pub fn usage() -> String {
    let mut s = String::from("ringkeeper cli --server host:port[,host:port...][/chroot] [--timeout ms] cmd args\n");
    for (name, options) in COMMANDS {
        s.push_str(&format!("\t{name} {options}\n"));
    }
    s
}

/// A command's usage error.
fn usage_of(name: &str) -> ParseError {
    match COMMANDS.iter().find(|(n, _)| *n == name) {
        Some((n, o)) => ParseError::Usage(n, o),
        None => ParseError::NotFound(name.to_string()),
    }
}

fn is_space(c: char) -> bool {
    // Java's \s
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

/// Splits a shell line into words as zkCli does: a word runs to the next whitespace; a word
/// that starts with ' or " runs to the matching quote (spaces included) and loses its
/// quotes. An opening quote without its closing one starts no quoted word: it becomes part
/// of a plain word (with the blank before it, as zkCli's pattern backtracks), or is skipped
/// at the start of the line.
pub fn split_line(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let ws_start = i;
        while i < chars.len() && is_space(chars[i]) {
            i += 1;
        }
        if i == chars.len() {
            break;
        }
        let c = chars[i];
        let plain_from = |start: usize| {
            let mut end = start + 1;
            while end < chars.len() && !is_space(chars[end]) {
                end += 1;
            }
            end
        };
        if c == '"' || c == '\'' {
            if let Some(close) = chars[i + 1..].iter().position(|&x| x == c) {
                let end = i + 1 + close;
                words.push(chars[i + 1..end].iter().collect());
                i = end + 1;
            } else if i > ws_start {
                // The pattern backtracks: the last blank starts a plain word.
                let end = plain_from(i);
                words.push(chars[i - 1..end].iter().collect());
                i = end;
            } else {
                i += 1;
            }
        } else {
            let end = plain_from(i);
            words.push(chars[i..end].iter().collect());
            i = end;
        }
    }
    words
}

/// The flags one command accepts: `flags` take no value, `valued` take one.
struct Spec {
    flags: &'static str,
    valued: &'static str,
}

/// A command's words after flag parsing: its positional arguments (the command name first,
/// as in zkCli) and its flags.
#[derive(Debug, Default)]
struct Words {
    args: Vec<String>,
    flags: Vec<char>,
    values: BTreeMap<char, String>,
}

impl Words {
    fn has(&self, c: char) -> bool {
        self.flags.contains(&c) || self.values.contains_key(&c)
    }

    fn value(&self, c: char) -> Option<&str> {
        self.values.get(&c).map(String::as_str)
    }

    fn arg(&self, i: usize) -> Option<&str> {
        self.args.get(i).map(String::as_str)
    }
}

/// zkCli's `ReconfigCommand.parse`: long options, each value lowercased as zkCli does, the
/// modes checked against each other in its order.
fn parse_reconfig(words: &[String]) -> Result<Command, ParseError> {
    let (mut stat, mut values) = (false, BTreeMap::new());
    let mut it = words.iter().skip(1);
    while let Some(w) = it.next() {
        match w.as_str() {
            "-s" => stat = true,
            "-v" | "-file" | "-members" | "-add" | "-remove" => {
                let name = &w[1..];
                let v =
                    it.next().ok_or_else(|| ParseError::Malformed(format!("Missing argument for option: {name}")))?;
                values.entry(name).or_insert_with(|| v.clone());
            }
            o if o.starts_with('-') => return Err(ParseError::UnrecognizedOption(o.to_string())),
            _ => {}
        }
    }
    let usage = COMMANDS.iter().find(|(n, _)| *n == "reconfig").map_or("", |(_, u)| u);
    let any = |k: &str| values.contains_key(k);
    if !(any("file") || any("members")) && !any("add") && !any("remove") {
        return Err(ParseError::Usage("reconfig", usage));
    }
    let version = match values.get("v") {
        None => -1,
        Some(v) => i64::from_str_radix(v, 16)
            .map_err(|_| ParseError::Malformed("-v must be followed by a long (configuration version)".into()))?,
    };
    if (any("file") || any("members")) && (any("add") || any("remove")) {
        return Err(ParseError::Malformed(
            "Can't use -file or -members together with -add or -remove (mixing incremental and non-incremental modes \
             is not allowed)"
                .into(),
        ));
    }
    if any("file") && any("members") {
        return Err(ParseError::Malformed(
            "Can't use -file and -members together (conflicting non-incremental modes)".into(),
        ));
    }
    let lower = |k: &str| values.get(k).map(|v: &String| v.to_lowercase());
    Ok(Command::Reconfig {
        stat,
        version,
        joining: lower("add"),
        leaving: lower("remove"),
        members: lower("members"),
        file: values.get("file").cloned(),
    })
}

fn is_negative_number(s: &str) -> bool {
    s.strip_prefix('-').is_some_and(|d| !d.is_empty() && d.parse::<f64>().is_ok())
}

impl Spec {
    fn known(&self, c: char) -> bool {
        self.flags.contains(c) || self.valued.contains(c)
    }

    /// Whether a word would be taken as a flag of this command.
    fn is_flag(&self, word: &str) -> bool {
        match word.strip_prefix('-') {
            Some(rest) if !rest.is_empty() => {
                rest.starts_with('-') || rest.chars().next().is_some_and(|c| self.known(c))
            }
            _ => false,
        }
    }

    fn parse(&self, words: &[String]) -> Result<Words, ParseError> {
        let mut out = Words::default();
        let mut pending: Option<char> = None;
        let mut only_args = false;
        for w in words {
            if only_args {
                out.args.push(w.clone());
                continue;
            }
            if let Some(c) = pending {
                if !self.is_flag(w) || is_negative_number(w) {
                    out.values.entry(c).or_insert_with(|| w.clone());
                    pending = None;
                    continue;
                }
                return Err(ParseError::MissingArgument(c));
            }
            if w == "--" {
                only_args = true;
            } else if w == "-" || !w.starts_with('-') {
                out.args.push(w.clone());
            } else if w.starts_with("--") {
                return Err(ParseError::UnrecognizedOption(w.clone()));
            } else {
                pending = self.flag_word(w, &mut out)?;
            }
        }
        match pending {
            Some(c) => Err(ParseError::MissingArgument(c)),
            None => Ok(out),
        }
    }

    /// One word starting with '-': a flag, `-x=value`, or a bundle such as `-sw` / `-v5`.
    /// Returns the flag still waiting for its value.
    fn flag_word(&self, w: &str, out: &mut Words) -> Result<Option<char>, ParseError> {
        let body = &w[1..];
        let unknown = || ParseError::UnrecognizedOption(w.to_string());
        if let Some((name, value)) = body.split_once('=') {
            let mut cs = name.chars();
            return match (cs.next(), cs.next()) {
                (Some(c), None) if self.valued.contains(c) => {
                    out.values.entry(c).or_insert_with(|| value.to_string());
                    Ok(None)
                }
                _ => Err(unknown()),
            };
        }
        for (i, c) in body.char_indices() {
            if self.valued.contains(c) {
                let rest = &body[i + c.len_utf8()..];
                if rest.is_empty() {
                    return Ok(Some(c));
                }
                out.values.entry(c).or_insert_with(|| rest.to_string());
                return Ok(None);
            }
            if !self.flags.contains(c) {
                return Err(unknown());
            }
            out.flags.push(c);
        }
        Ok(None)
    }
}

fn int_option(w: &Words, c: char) -> Result<Option<i32>, ParseError> {
    match w.value(c) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i32>()
            .map(Some)
            .map_err(|_| ParseError::Malformed(format!("-{c} argument must be an int value"))),
    }
}

/// `-v version`, or ANY_VERSION (-1).
fn version(w: &Words) -> Result<i32, ParseError> {
    Ok(int_option(w, 'v')?.unwrap_or(crate::client::types::ANY_VERSION))
}

/// Warns about zkCli's deprecated trailing `watch` argument (`get path watch`).
fn deprecated_watch(w: &Words, name: &str, form: &str) -> Option<String> {
    (w.args.len() > 2).then(|| format!("'{name} path [watch]' has been deprecated. Please use '{form}' instead."))
}

/// A command with the warnings zkCli prints before running it (deprecated forms, bad ACL
/// entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub command: Command,
    pub warnings: Vec<String>,
}

/// Parses one command from its words (the command name first). `Ok(None)` for no words.
pub fn parse_words(words: &[String]) -> Result<Option<Parsed>, ParseError> {
    let Some(name) = words.first() else { return Ok(None) };
    let mut warnings = Vec::new();
    let spec = |flags, valued| Spec { flags, valued };
    let need = |w: &Words, n: usize| if w.args.len() < n { Err(usage_of(name)) } else { Ok(()) };
    let path = |w: &Words| w.arg(1).unwrap_or_default().to_string();
    let command = match name.as_str() {
        "create" => {
            let w = spec("esc", "t").parse(words)?;
            need(&w, 2)?;
            let (e, s, c) = (w.has('e'), w.has('s'), w.has('c'));
            if c && (e || s) {
                return Err(ParseError::Malformed(
                    "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.".into(),
                ));
            }
            let ttl = match w.value('t') {
                None => None,
                Some(v) => Some(
                    v.trim()
                        .parse::<i64>()
                        .map_err(|_| ParseError::Malformed("-t argument must be a long value".into()))?,
                ),
            };
            if ttl.is_some() && e {
                return Err(ParseError::Malformed("TTLs cannot be used with Ephemeral znodes".into()));
            }
            let mode = match (e, s, c, ttl.is_some()) {
                (true, true, _, _) => CreateMode::EphemeralSequential,
                (true, false, _, _) => CreateMode::Ephemeral,
                (false, true, _, true) => CreateMode::PersistentSequentialWithTtl,
                (false, true, _, false) => CreateMode::PersistentSequential,
                (false, false, true, _) => CreateMode::Container,
                (false, false, false, true) => CreateMode::PersistentWithTtl,
                (false, false, false, false) => CreateMode::Persistent,
            };
            if let Some(t) = ttl {
                if t <= 0 || t > TTL_MS_MAX {
                    return Err(ParseError::Malformed(format!(
                        "ttl must be positive and cannot be larger than: {TTL_MS_MAX}"
                    )));
                }
            }
            let acl = w.arg(3).map(parse_acl);
            if let Some(a) = &acl {
                warnings.extend(a.warnings.iter().cloned());
            }
            Command::Create(Create { path: path(&w), data: w.arg(2).map(str::to_string), acl, mode, ttl_ms: ttl })
        }
        "get" => {
            let w = spec("sw", "").parse(words)?;
            need(&w, 2)?;
            warnings.extend(deprecated_watch(&w, "get", "get [-s] [-w] path"));
            Command::Get { path: path(&w), stat: w.has('s'), watch: w.has('w') || w.args.len() > 2 }
        }
        "set" => {
            let w = spec("s", "v").parse(words)?;
            need(&w, 3)?;
            Command::Set { path: path(&w), data: w.args[2].clone(), stat: w.has('s'), version: version(&w)? }
        }
        "ls" => {
            let w = spec("swR", "").parse(words)?;
            need(&w, 2)?;
            warnings.extend(deprecated_watch(&w, "ls", "ls [-w] path"));
            Command::Ls {
                path: path(&w),
                stat: w.has('s'),
                watch: w.has('w') || w.args.len() > 2,
                recursive: w.has('R'),
            }
        }
        "stat" => {
            let w = spec("w", "").parse(words)?;
            need(&w, 2)?;
            warnings.extend(deprecated_watch(&w, "stat", "stat [-w] path"));
            Command::Stat { path: path(&w), watch: w.has('w') || w.args.len() > 2 }
        }
        "delete" => {
            let w = spec("", "v").parse(words)?;
            need(&w, 2)?;
            if w.args.len() > 2 {
                warnings.push(
                    "'delete path [version]' has been deprecated. Please use 'delete [-v version] path' instead."
                        .into(),
                );
            }
            Command::Delete { path: path(&w), version: version(&w)? }
        }
        "deleteall" => {
            let w = spec("", "b").parse(words)?;
            need(&w, 2)?;
            let batch = int_option(&w, 'b')?.map_or(DELETEALL_BATCH_DEFAULT, |b| usize::try_from(b).unwrap_or(0));
            // zkCli sends everything in one multi when the batch size is not positive.
            Command::DeleteAll { path: path(&w), batch: if batch == 0 { usize::MAX } else { batch } }
        }
        "sync" => {
            let w = spec("", "").parse(words)?;
            need(&w, 2)?;
            Command::Sync { path: path(&w) }
        }
        "addWatch" => {
            let w = spec("", "m").parse(words)?;
            if w.args.len() != 2 {
                return Err(usage_of(name));
            }
            let mode = match w.value('m').map(str::to_ascii_uppercase).as_deref() {
                None | Some("PERSISTENT_RECURSIVE") => AddWatchMode::PersistentRecursive,
                Some("PERSISTENT") => AddWatchMode::Persistent,
                Some(_) => return Err(usage_of(name)),
            };
            Command::AddWatch { path: path(&w), mode }
        }
        "removewatches" => {
            let w = spec("cdpral", "").parse(words)?;
            need(&w, 2)?;
            if w.has('l') {
                return Err(ParseError::Malformed(
                    "removewatches -l (remove locally without the server) is not supported by this client".into(),
                ));
            }
            let watcher_type = [
                ('c', WatcherType::Children),
                ('d', WatcherType::Data),
                ('p', WatcherType::Persistent),
                ('r', WatcherType::PersistentRecursive),
            ]
            .into_iter()
            .find(|(c, _)| w.has(*c))
            .map_or(WatcherType::Any, |(_, t)| t);
            Command::RemoveWatches { path: path(&w), watcher_type }
        }
        "setquota" => {
            let w = spec("", "nbNB").parse(words)?;
            let Some((flag, field)) = QuotaField::of(&w)? else { return Err(usage_of(name)) };
            need(&w, 2)?;
            let text = w.value(flag).unwrap_or_default().trim();
            let value =
                if field.is_count() { text.parse::<i32>().map(i64::from).ok() } else { text.parse::<i64>().ok() };
            let value = value.ok_or_else(|| {
                ParseError::Malformed("NumberFormatException happens when parsing the option value".into())
            })?;
            match field.is_count() {
                true if value <= 0 => {
                    return Err(ParseError::Malformed("the num quota must be greater than zero".into()))
                }
                false if value < 0 => {
                    return Err(ParseError::Malformed("the bytes quota must be greater than or equal to zero".into()))
                }
                _ => {}
            }
            Command::SetQuota { path: path(&w), field, value }
        }
        "listquota" => {
            let w = spec("", "").parse(words)?;
            need(&w, 2)?;
            Command::ListQuota { path: path(&w) }
        }
        "delquota" => {
            let w = spec("nbNB", "").parse(words)?;
            let field = QuotaField::of(&w)?.map(|(_, f)| f);
            need(&w, 2)?;
            Command::DelQuota { path: path(&w), field }
        }
        "getAcl" => {
            let w = spec("s", "").parse(words)?;
            need(&w, 2)?;
            Command::GetAcl { path: path(&w), stat: w.has('s') }
        }
        "setAcl" => {
            let w = spec("sR", "v").parse(words)?;
            need(&w, 3)?;
            let acl = parse_acl(&w.args[2]);
            warnings.extend(acl.warnings.iter().cloned());
            Command::SetAcl { path: path(&w), acl, stat: w.has('s'), version: version(&w)?, recursive: w.has('R') }
        }
        "addauth" => {
            let w = spec("", "").parse(words)?;
            need(&w, 2)?;
            Command::AddAuth { scheme: w.args[1].clone(), auth: w.arg(2).map(str::to_string) }
        }
        "whoami" => Command::WhoAmI,
        "getEphemerals" => {
            let w = spec("", "").parse(words)?;
            Command::GetEphemerals { path: w.arg(1).map(str::to_string) }
        }
        "getAllChildrenNumber" => {
            let w = spec("", "").parse(words)?;
            need(&w, 2)?;
            Command::GetAllChildrenNumber { path: path(&w) }
        }
        "config" => {
            let w = spec("cws", "").parse(words)?;
            Command::Config { client: w.has('c'), watch: w.has('w'), stat: w.has('s') }
        }
        "reconfig" => parse_reconfig(words)?,
        "connect" => Command::Connect { servers: words.get(1).cloned() },
        "close" => Command::Close,
        "history" => Command::History,
        "redo" => match words.get(1) {
            None => Command::Redo { index: None },
            Some(n) => Command::Redo {
                index: Some(
                    parse_java_int(n).ok_or_else(|| ParseError::Malformed(format!("redo: not a number: {n}")))?,
                ),
            },
        },
        "printwatches" => Command::PrintWatches { on: words.get(1).map(|v| v == "on") },
        "version" => Command::Version,
        "quit" | "exit" => Command::Quit,
        other => return Err(ParseError::NotFound(other.to_string())),
    };
    Ok(Some(Parsed { command, warnings }))
}

/// Java's `Integer.decode`: decimal, `0x`/`#` hex, leading-0 octal, optional sign.
fn parse_java_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) =
        body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")).or_else(|| body.strip_prefix('#'))
    {
        i64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        i64::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse::<i64>().ok()?
    };
    if body.starts_with(['-', '+']) {
        return None;
    }
    Some(if neg { -v } else { v })
}

/// Parses one shell line; `Ok(None)` for a blank line.
pub fn parse_line(line: &str) -> Result<Option<Parsed>, ParseError> {
    parse_words(&split_line(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    fn cmd(line: &str) -> Command {
        parse_line(line).expect("parses").expect("a command").command
    }

    fn err(line: &str) -> String {
        parse_line(line).expect_err("an error").to_string()
    }

    #[test]
    fn lines_split_like_zkcli() {
        assert_eq!(split_line("  create  /a   b "), words(&["create", "/a", "b"]));
        assert_eq!(split_line("create /a \"hello world\" 'x y'"), words(&["create", "/a", "hello world", "x y"]));
        assert_eq!(split_line("create /a \"\""), words(&["create", "/a", ""]));
        // A word that merely contains a quote keeps it.
        assert_eq!(split_line("set /a it's"), words(&["set", "/a", "it's"]));
        // An unclosed quote: the pattern backtracks onto the blank before it.
        assert_eq!(split_line("set /a \"abc"), words(&["set", "/a", " \"abc"]));
        assert_eq!(split_line("\"abc"), words(&["abc"]));
        assert_eq!(split_line("\t"), Vec::<String>::new());
        assert_eq!(parse_line("   ").unwrap(), None);
    }

    #[test]
    fn create_modes_and_their_rules() {
        let c = |l| match cmd(l) {
            Command::Create(c) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(c("create /a").mode, CreateMode::Persistent);
        assert_eq!(c("create /a").data, None);
        assert_eq!(c("create /a ''").data.as_deref(), Some(""));
        assert_eq!(c("create -s -e /a x").mode, CreateMode::EphemeralSequential);
        assert_eq!(c("create -es /a x").mode, CreateMode::EphemeralSequential);
        assert_eq!(c("create /a x -e").mode, CreateMode::Ephemeral, "flags may follow the arguments");
        assert_eq!(c("create -c /a").mode, CreateMode::Container);
        let t = c("create -t 500 -s /a d");
        assert_eq!((t.mode, t.ttl_ms), (CreateMode::PersistentSequentialWithTtl, Some(500)));
        assert_eq!(c("create -t5000 /a").ttl_ms, Some(5000));
        assert_eq!(c("create -t=7 /a").ttl_ms, Some(7));
        let a = c("create /a d world:anyone:r").acl.expect("acl");
        assert_eq!(a.acl.len(), 1);
        assert_eq!(
            err("create -c -s /a"),
            "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential."
        );
        assert_eq!(err("create -t abc /a"), "-t argument must be a long value");
        assert_eq!(err("create -t 5 -e /a"), "TTLs cannot be used with Ephemeral znodes");
        assert_eq!(err("create -t 0 /a"), "ttl must be positive and cannot be larger than: 1099511627775");
        assert_eq!(err("create -t 1099511627776 /a"), "ttl must be positive and cannot be larger than: 1099511627775");
        assert_eq!(err("create"), "create [-s] [-e] [-c] [-t ttl] path [data] [acl]");
        assert_eq!(err("create -t"), "org.apache.commons.cli.MissingArgumentException: Missing argument for option: t");
        assert_eq!(err("create -x /a"), "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -x");
        assert_eq!(
            err("create -sx /a"),
            "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -sx"
        );
        assert_eq!(
            err("create --long /a"),
            "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: --long"
        );
        // -- ends the flags: a data value that starts with '-'.
        assert_eq!(c("create -- /a -e").data.as_deref(), Some("-e"));
    }

    #[test]
    fn reads_writes_and_versions() {
        assert_eq!(cmd("get -s -w /a"), Command::Get { path: "/a".into(), stat: true, watch: true });
        assert_eq!(cmd("get -sw /a"), Command::Get { path: "/a".into(), stat: true, watch: true });
        let p = parse_line("get /a watch").unwrap().unwrap();
        assert_eq!(p.command, Command::Get { path: "/a".into(), stat: false, watch: true });
        assert_eq!(
            p.warnings,
            vec!["'get path [watch]' has been deprecated. Please use 'get [-s] [-w] path' instead."]
        );
        assert_eq!(err("get"), "get [-s] [-w] path");
        assert_eq!(
            cmd("set -v 3 /a data"),
            Command::Set { path: "/a".into(), data: "data".into(), stat: false, version: 3 }
        );
        assert_eq!(
            cmd("set /a data -s -v -1"),
            Command::Set { path: "/a".into(), data: "data".into(), stat: true, version: -1 }
        );
        assert_eq!(err("set /a"), "set [-s] [-v version] path data");
        assert_eq!(err("set -v x /a d"), "-v argument must be an int value");
        assert_eq!(
            err("set -v -s /a d"),
            "org.apache.commons.cli.MissingArgumentException: Missing argument for option: v"
        );
        // A negative number where no flag waits is an unknown flag, as in commons-cli.
        assert_eq!(err("set /a -5"), "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -5");
        assert_eq!(cmd("delete -v 2 /a"), Command::Delete { path: "/a".into(), version: 2 });
        assert_eq!(cmd("delete /a"), Command::Delete { path: "/a".into(), version: -1 });
        assert_eq!(cmd("deleteall /a"), Command::DeleteAll { path: "/a".into(), batch: 1000 });
        assert_eq!(cmd("deleteall /a -b 0"), Command::DeleteAll { path: "/a".into(), batch: usize::MAX });
        assert_eq!(err("deleteall /a -b q"), "-b argument must be an int value");
        assert_eq!(cmd("ls -R -s -w /"), Command::Ls { path: "/".into(), stat: true, watch: true, recursive: true });
        assert_eq!(err("ls -r /"), "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -r");
        assert_eq!(err("ls"), "ls [-s] [-w] [-R] path");
        assert_eq!(cmd("stat -w /a"), Command::Stat { path: "/a".into(), watch: true });
        assert_eq!(cmd("sync /a"), Command::Sync { path: "/a".into() });
        assert_eq!(err("sync"), "sync path");
    }

    #[test]
    fn watches_acls_and_session_commands() {
        assert_eq!(
            cmd("addWatch /a"),
            Command::AddWatch { path: "/a".into(), mode: AddWatchMode::PersistentRecursive }
        );
        assert_eq!(
            cmd("addWatch -m persistent /a"),
            Command::AddWatch { path: "/a".into(), mode: AddWatchMode::Persistent }
        );
        assert!(err("addWatch -m bogus /a").starts_with("addWatch [-m mode] path"));
        assert!(err("addWatch /a /b").starts_with("addWatch [-m mode] path"));
        assert_eq!(
            cmd("removewatches /a"),
            Command::RemoveWatches { path: "/a".into(), watcher_type: WatcherType::Any }
        );
        assert_eq!(
            cmd("removewatches /a -d"),
            Command::RemoveWatches { path: "/a".into(), watcher_type: WatcherType::Data }
        );
        assert_eq!(
            cmd("removewatches /a -c -d"),
            Command::RemoveWatches { path: "/a".into(), watcher_type: WatcherType::Children }
        );
        assert!(err("removewatches /a -l").contains("not supported"));
        assert_eq!(cmd("getAcl -s /a"), Command::GetAcl { path: "/a".into(), stat: true });
        match cmd("setAcl -R -v 4 /a world:anyone:r,ip:127.0.0.1:cdrwa") {
            Command::SetAcl { path, acl, stat, version, recursive } => {
                assert_eq!((path.as_str(), stat, version, recursive), ("/a", false, 4, true));
                assert_eq!(acl.acl.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        let p = parse_line("setAcl /a bad").unwrap().unwrap();
        assert_eq!(p.warnings, vec!["bad does not have the form scheme:id:perm"]);
        assert_eq!(err("setAcl /a"), "setAcl [-s] [-v version] [-R] path acl");
        assert_eq!(cmd("addauth digest u:p"), Command::AddAuth { scheme: "digest".into(), auth: Some("u:p".into()) });
        assert_eq!(err("addauth"), "addauth scheme auth");
        assert_eq!(cmd("whoami"), Command::WhoAmI);
        assert_eq!(cmd("getEphemerals"), Command::GetEphemerals { path: None });
        assert_eq!(cmd("getEphemerals /a"), Command::GetEphemerals { path: Some("/a".into()) });
        assert_eq!(err("getAllChildrenNumber"), "getAllChildrenNumber path");
        assert_eq!(cmd("config -c -s"), Command::Config { client: true, watch: false, stat: true });
        assert_eq!(cmd("connect h:1"), Command::Connect { servers: Some("h:1".into()) });
        let rc =
            |stat, version, joining: Option<&str>, leaving: Option<&str>, members: Option<&str>| Command::Reconfig {
                stat,
                version,
                joining: joining.map(str::to_string),
                leaving: leaving.map(str::to_string),
                members: members.map(str::to_string),
                file: None,
            };
        assert_eq!(
            cmd("reconfig -s -v 1a -add server.4=H:1:2;3 -remove 5,6"),
            rc(true, 0x1a, Some("server.4=h:1:2;3"), Some("5,6"), None)
        );
        assert_eq!(cmd("reconfig -members server.1=h:1:2;3"), rc(false, -1, None, None, Some("server.1=h:1:2;3")));
        assert!(matches!(cmd("reconfig -file /x"), Command::Reconfig { file: Some(f), .. } if f == "/x"));
        assert!(err("reconfig").starts_with("reconfig [-s] [-v version]"));
        assert!(err("reconfig -s").starts_with("reconfig [-s] [-v version]"));
        assert!(err("reconfig -members a -add b").contains("mixing incremental and non-incremental"));
        assert!(err("reconfig -members a -file b").contains("conflicting non-incremental"));
        assert!(err("reconfig -v zz -remove 1").contains("-v must be followed by a long"));
        assert!(err("reconfig -remove").contains("Missing argument"));
        assert_eq!(cmd("redo 0x10"), Command::Redo { index: Some(16) });
        assert_eq!(cmd("redo 010"), Command::Redo { index: Some(8) });
        assert_eq!(cmd("redo -2"), Command::Redo { index: Some(-2) });
        assert_eq!(cmd("redo"), Command::Redo { index: None });
        assert!(err("redo x").contains("not a number"));
        assert_eq!(cmd("printwatches off"), Command::PrintWatches { on: Some(false) });
        assert_eq!(cmd("exit"), Command::Quit);
        let e = parse_line("bogus").unwrap_err();
        assert_eq!((e.to_string().as_str(), e.exit_code()), ("Command not found: bogus", 127));
        assert_eq!(parse_line("get").unwrap_err().exit_code(), 1);
    }

    #[test]
    fn usage_lists_every_command_once() {
        let u = usage();
        for (name, _) in COMMANDS {
            assert_eq!(u.matches(&format!("\t{name} ")).count(), 1, "{name}");
        }
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.0).collect();
        let sorted = {
            let mut s = names.clone();
            s.sort_by_key(|n| n.to_string());
            s
        };
        assert_eq!(names, sorted, "listed in zkCli's (sorted) order");
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
    }
}
