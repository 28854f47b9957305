//! JAAS login configuration files, as the JDK's ConfigFile reads them for ZooKeeper:
//! `Name { module.Class flag key=value ...; ... };` sections, `//` and `/* */` comments,
//! values as words or double-quoted strings (with `\` escapes), flags required / requisite /
//! sufficient / optional. ZooKeeper's DIGEST-MD5 users are the `user_<name>="<password>"`
//! options of a `DigestLoginModule` in the `Server` section; a client's are `username` and
//! `password` in the `Client` section.
//! Rules: pure over the text (the caller reads the file, once, at start); an error names the
//! line; a password never appears in an error or a Debug print.

use std::collections::HashMap;

/// ZooKeeper's login module for DIGEST-MD5 (server and client sections).
pub const DIGEST_LOGIN_MODULE: &str = "org.apache.zookeeper.server.auth.DigestLoginModule";
/// The JDK's Kerberos login module (a `Server` section with it means SASL GSSAPI).
pub const KRB5_LOGIN_MODULE: &str = "com.sun.security.auth.module.Krb5LoginModule";
/// The section a ZooKeeper server reads (`zookeeper.sasl.serverconfig`'s default).
pub const SERVER_SECTION: &str = "Server";
/// The section a ZooKeeper client reads (`zookeeper.sasl.clientconfig`'s default).
pub const CLIENT_SECTION: &str = "Client";
/// A JAAS file larger than this is refused (it holds a few users, not a database).
pub const JAAS_FILE_BYTES_MAX: usize = 1024 * 1024;

/// The control flag of a login module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    Required,
    Requisite,
    Sufficient,
    Optional,
}

/// One login module line of a section.
#[derive(Clone, PartialEq, Eq)]
pub struct Module {
    pub class: String,
    pub flag: Flag,
    /// Options in file order.
    pub options: Vec<(String, String)>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Module")
            .field("class", &self.class)
            .field("flag", &self.flag)
            .field("option_keys", &keys)
            .finish()
    }
}

/// A parsed file: its sections by name, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jaas {
    pub sections: Vec<(String, Vec<Module>)>,
}

/// Why a file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JaasError {
    /// A syntax error at a line (1-based).
    Syntax { line: usize, why: String },
    /// Two sections with one name (the JDK refuses them too).
    DuplicateSection(String),
    /// The section the caller needs is absent.
    NoSection(String),
    /// The section has no DigestLoginModule (e.g. only Kerberos, which ringkeeper lacks).
    NoDigestModule(String),
    /// A DigestLoginModule without what it needs (names the section and what).
    Incomplete { section: String, why: String },
    /// Larger than `JAAS_FILE_BYTES_MAX`.
    TooLarge,
}

impl std::fmt::Display for JaasError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JaasError::Syntax { line, why } => write!(f, "line {line}: {why}"),
            JaasError::DuplicateSection(s) => write!(f, "section {s} is given twice"),
            JaasError::NoSection(s) => write!(f, "no JAAS section named '{s}'"),
            JaasError::NoDigestModule(s) => {
                write!(f, "section '{s}' has no {DIGEST_LOGIN_MODULE} (nor, for a server section, {KRB5_LOGIN_MODULE})")
            }
            JaasError::Incomplete { section, why } => write!(f, "section '{section}': {why}"),
            JaasError::TooLarge => write!(f, "larger than {JAAS_FILE_BYTES_MAX} bytes"),
        }
    }
}

impl std::error::Error for JaasError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Punct(char),
}

/// Splits the text (block comments already blanked) into tokens with their line numbers.
fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, JaasError> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    let syntax = |line, why: &str| JaasError::Syntax { line, why: why.to_string() };
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '"' => {
                let start = line;
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(syntax(start, "unterminated quoted string")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(c) => s.push(c),
                            None => return Err(syntax(start, "unterminated quoted string")),
                        },
                        Some('\n') => {
                            line += 1;
                            s.push('\n');
                        }
                        Some(c) => s.push(c),
                    }
                }
                out.push((Token::Quoted(s), start));
            }
            '{' | '}' | ';' | '=' => out.push((Token::Punct(c), line)),
            _ => {
                let mut w = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || matches!(n, '{' | '}' | ';' | '=' | '"') {
                        break;
                    }
                    w.push(n);
                    chars.next();
                }
                out.push((Token::Word(w), line));
            }
        }
    }
    Ok(out)
}

impl Jaas {
    /// Parses a whole file.
    pub fn parse(text: &str) -> Result<Jaas, JaasError> {
        if text.len() > JAAS_FILE_BYTES_MAX {
            return Err(JaasError::TooLarge);
        }
        let tokens = tokenize(&strip_block_comments(text)?)?;
        let mut it = tokens.into_iter().peekable();
        let mut jaas = Jaas::default();
        let last_line = text.lines().count().max(1);
        let syntax = |line: usize, why: String| JaasError::Syntax { line, why };
        while let Some((tok, line)) = it.next() {
            let Token::Word(name) = tok else {
                return Err(syntax(line, "expected a section name".into()));
            };
            match it.next() {
                Some((Token::Punct('{'), _)) => {}
                other => return Err(syntax(other.map_or(last_line, |t| t.1), format!("expected '{{' after {name}"))),
            }
            let mut modules = Vec::new();
            loop {
                let (tok, line) =
                    it.next().ok_or_else(|| syntax(last_line, format!("section {name} is not closed")))?;
                let class = match tok {
                    Token::Punct('}') => break,
                    Token::Word(w) => w,
                    _ => return Err(syntax(line, "expected a login module class name".into())),
                };
                let flag = match it.next() {
                    Some((Token::Word(f), l)) => match f.to_ascii_lowercase().as_str() {
                        "required" => Flag::Required,
                        "requisite" => Flag::Requisite,
                        "sufficient" => Flag::Sufficient,
                        "optional" => Flag::Optional,
                        _ => return Err(syntax(l, format!("unknown control flag {f}"))),
                    },
                    other => {
                        return Err(syntax(
                            other.map_or(last_line, |t| t.1),
                            format!("expected a control flag after {class}"),
                        ))
                    }
                };
                let mut options = Vec::new();
                loop {
                    let (tok, line) =
                        it.next().ok_or_else(|| syntax(last_line, format!("module {class} does not end with ';'")))?;
                    let key = match tok {
                        Token::Punct(';') => break,
                        Token::Word(k) => k,
                        _ => return Err(syntax(line, "expected an option name or ';'".into())),
                    };
                    match it.next() {
                        Some((Token::Punct('='), _)) => {}
                        _ => return Err(syntax(line, format!("expected '=' after option {key}"))),
                    }
                    let value = match it.next() {
                        Some((Token::Word(v) | Token::Quoted(v), _)) => v,
                        _ => return Err(syntax(line, format!("expected a value for option {key}"))),
                    };
                    options.push((key, value));
                }
                modules.push(Module { class, flag, options });
            }
            match it.next() {
                Some((Token::Punct(';'), _)) => {}
                other => {
                    return Err(syntax(other.map_or(last_line, |t| t.1), format!("expected ';' after section {name}")))
                }
            }
            if jaas.sections.iter().any(|(n, _)| *n == name) {
                return Err(JaasError::DuplicateSection(name));
            }
            jaas.sections.push((name, modules));
        }
        Ok(jaas)
    }

    pub fn section(&self, name: &str) -> Result<&[Module], JaasError> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.as_slice())
            .ok_or_else(|| JaasError::NoSection(name.to_string()))
    }

    fn digest_module(&self, section: &str) -> Result<&Module, JaasError> {
        self.section(section)?
            .iter()
            .find(|m| m.class == DIGEST_LOGIN_MODULE)
            .ok_or_else(|| JaasError::NoDigestModule(section.to_string()))
    }

    /// A server section's DIGEST-MD5 users: every `user_<name>` option (name → password).
    pub fn digest_users(&self, section: &str) -> Result<DigestUsers, JaasError> {
        let module = self.digest_module(section)?;
        let users: HashMap<String, String> = module
            .options
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("user_").map(|u| (u.to_string(), v.clone())))
            .collect();
        if users.is_empty() {
            return Err(JaasError::Incomplete {
                section: section.into(),
                why: "no user_<name>=\"<password>\" option".into(),
            });
        }
        Ok(DigestUsers(users))
    }

    /// The Kerberos identity of a section that names `Krb5LoginModule` (the JDK's): its
    /// `keyTab` and `principal` options; None without such a module.
    pub fn krb5_identity(&self, section: &str) -> Result<Option<(String, String)>, JaasError> {
        let Some(module) = self.section(section)?.iter().find(|m| m.class == KRB5_LOGIN_MODULE) else {
            return Ok(None);
        };
        let get = |key: &str| module.options.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        match (get("keyTab"), get("principal")) {
            (Some(k), Some(p)) => Ok(Some((k, p))),
            _ => Err(JaasError::Incomplete {
                section: section.into(),
                why: format!("{KRB5_LOGIN_MODULE} needs keyTab and principal options"),
            }),
        }
    }

    /// A client section's DIGEST-MD5 credentials (`username`, `password`).
    pub fn digest_credentials(&self, section: &str) -> Result<(String, String), JaasError> {
        let module = self.digest_module(section)?;
        let get = |key: &str| module.options.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        match (get("username"), get("password")) {
            (Some(u), Some(p)) => Ok((u, p)),
            _ => Err(JaasError::Incomplete {
                section: section.into(),
                why: "needs username and password options".into(),
            }),
        }
    }
}

/// Replaces `/* … */` comments by spaces (keeping newlines, so line numbers stay true), outside
/// quoted strings.
fn strip_block_comments(text: &str) -> Result<String, JaasError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let mut in_quote = false;
    let mut in_line_comment = false;
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            in_line_comment = false;
            out.push(c);
            continue;
        }
        if in_line_comment {
            out.push(c);
            continue;
        }
        if in_quote {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    if n == '\n' {
                        line += 1;
                    }
                    out.push(n);
                }
            } else if c == '"' {
                in_quote = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_quote = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'/') => {
                in_line_comment = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let start = line;
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        None => return Err(JaasError::Syntax { line: start, why: "unterminated /* comment".into() }),
                        Some('/') if prev == '*' => break,
                        Some('\n') => {
                            line += 1;
                            out.push('\n');
                            prev = '\n';
                        }
                        Some(c) => prev = c,
                    }
                }
                out.push(' ');
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// DIGEST-MD5 users of a server (name → password); Debug shows names only.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestUsers(HashMap<String, String>);

impl DigestUsers {
    pub fn password(&self, user: &str) -> Option<String> {
        self.0.get(user).cloned()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for DigestUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        f.debug_tuple("DigestUsers").field(&names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZK_EXAMPLE: &str = r#"
// ZooKeeper's server and client sections, as its admin guide writes them
Server {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       user_super="adminsecret"
       user_bob="bob\"secret";
};
/* a block comment
   over lines; with { braces } and "quotes" */
Client {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       username="bob"
       password="bob\"secret";
};
QuorumServer { org.apache.zookeeper.server.auth.DigestLoginModule required user_test="test"; };
Krb { com.sun.security.auth.module.Krb5LoginModule REQUIRED useKeyTab=true keyTab="/k/x.keytab" storeKey=true principal="zk/h@R"; };
"#;

    #[test]
    fn parses_zookeepers_sections_comments_and_quotes() {
        let j = Jaas::parse(ZK_EXAMPLE).unwrap();
        let names: Vec<&str> = j.sections.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Server", "Client", "QuorumServer", "Krb"]);
        let users = j.digest_users("Server").unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.password("super").as_deref(), Some("adminsecret"));
        assert_eq!(users.password("bob").as_deref(), Some("bob\"secret"));
        assert_eq!(users.password("eve"), None);
        assert_eq!(j.digest_credentials("Client").unwrap(), ("bob".to_string(), "bob\"secret".to_string()));
        let krb = j.section("Krb").unwrap();
        assert_eq!(krb[0].flag, Flag::Required);
        assert_eq!(krb[0].options[0], ("useKeyTab".to_string(), "true".to_string()));
        assert_eq!(j.digest_users("Krb"), Err(JaasError::NoDigestModule("Krb".into())));
        assert_eq!(j.digest_users("Nope"), Err(JaasError::NoSection("Nope".into())));
        assert!(!format!("{users:?}{:?}", j.section("Server").unwrap()).contains("secret"));
    }

    #[test]
    fn refuses_broken_files_naming_the_line() {
        let cases = [
            ("Server {\n a.B required x=1\n};", 3),
            ("Server {\n a.B mandatory;\n};", 2),
            ("Server {\n a.B required x=\"open;\n};", 2),
            ("Server {\n a.B required x=1;\n}", 3),
            ("/* never closed\nServer {};", 1),
            ("Server\n a.B required;\n};", 2),
        ];
        for (text, line) in cases {
            match Jaas::parse(text) {
                Err(JaasError::Syntax { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(Jaas::parse("A { };\nA { };"), Err(JaasError::DuplicateSection("A".into())));
        let j = Jaas::parse("Server { org.apache.zookeeper.server.auth.DigestLoginModule required; };").unwrap();
        assert!(matches!(j.digest_users("Server"), Err(JaasError::Incomplete { .. })));
        assert!(matches!(j.digest_credentials("Server"), Err(JaasError::Incomplete { .. })));
        assert_eq!(Jaas::parse(&" ".repeat(JAAS_FILE_BYTES_MAX + 1)), Err(JaasError::TooLarge));
    }

    #[test]
    fn slashes_inside_values_and_quotes_are_not_comments() {
        let j = Jaas::parse("S { m.M optional path=/a/b/c p=\"x//y/*z*/\"; // c\n};").unwrap();
        let m = &j.section("S").unwrap()[0];
        assert_eq!(m.options, [("path".into(), "/a/b/c".into()), ("p".into(), "x//y/*z*/".into())]);
        assert_eq!(m.flag, Flag::Optional);
    }
}
