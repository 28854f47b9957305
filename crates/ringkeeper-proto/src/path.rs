//! Znode path rules (seed 000, wire-protocol §9): validation, parent and name.
//! Rules: pure functions on `&str`; the root is "/"; a valid path never ends with '/' (except
//! the root) and has no empty, "." or ".." segment and no forbidden character.

/// Why a path was rejected. Callers map this to BadArguments (or NoNode for reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// The path is the empty string.
    Empty,
    /// The path does not start with '/'.
    NotAbsolute,
    /// The path ends with '/' and is not the root.
    TrailingSlash,
    /// The path contains "//" (an empty segment).
    EmptySegment,
    /// A segment is "." or "..".
    RelativeSegment,
    /// A character ZooKeeper forbids: NUL, U+0001..U+001F,
    /// U+007F..U+009F, U+D800..U+F8FF or U+FFF0..U+FFFF.
    ForbiddenChar,
}

fn forbidden_char(c: char) -> bool {
    let u = c as u32;
    u == 0
        || (0x01..=0x1f).contains(&u)
        || (0x7f..=0x9f).contains(&u)
        || (0xd800..=0xf8ff).contains(&u)
        || (0xfff0..=0xffff).contains(&u)
}

/// Validates a full znode path as ZooKeeper's PathUtils does.
pub fn validate(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err(PathError::TrailingSlash);
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() {
            return Err(PathError::EmptySegment);
        }
        if segment == "." || segment == ".." {
            return Err(PathError::RelativeSegment);
        }
    }
    if path.chars().any(forbidden_char) {
        return Err(PathError::ForbiddenChar);
    }
    Ok(())
}

/// The parent of a path: "/" for a top-level node. The root has no parent.
pub fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last segment of a path ("" for the root).
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, name: &str) -> String {
    let mut s = String::with_capacity(parent.len() + 1 + name.len());
    s.push_str(parent);
    if parent != "/" {
        s.push('/');
    }
    s.push_str(name);
    s
}

/// Iterates the strict ancestors of a path, nearest first, ending with "/".
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut current = Some(path);
    std::iter::from_fn(move || {
        let p = parent(current?)?;
        current = Some(p);
        Some(p)
    })
}

/// Where ZooKeeper publishes the ensemble's dynamic configuration (`ZooDefs.CONFIG_NODE`).
pub const CONFIG_NODE: &str = "/zookeeper/config";

/// True for the nodes a client may never delete.
pub fn is_reserved(path: &str) -> bool {
    matches!(path, "/" | "/zookeeper" | "/zookeeper/quota" | "/zookeeper/config")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_follows_zookeeper_rules() {
        for ok in ["/", "/a", "/a/b", "/a.b/..c", "/zookeeper/x", "/é"] {
            assert_eq!(validate(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate(""), Err(PathError::Empty));
        assert_eq!(validate("a"), Err(PathError::NotAbsolute));
        assert_eq!(validate("/a/"), Err(PathError::TrailingSlash));
        assert_eq!(validate("/a//b"), Err(PathError::EmptySegment));
        assert_eq!(validate("/a/./b"), Err(PathError::RelativeSegment));
        assert_eq!(validate("/a/.."), Err(PathError::RelativeSegment));
        assert_eq!(validate("/a\u{0}b"), Err(PathError::ForbiddenChar));
        assert_eq!(validate("/a\u{1f}"), Err(PathError::ForbiddenChar));
        assert_eq!(validate("/a\u{85}"), Err(PathError::ForbiddenChar));
        assert_eq!(validate("/a\u{e000}"), Err(PathError::ForbiddenChar));
        assert_eq!(validate("/a\u{fff5}"), Err(PathError::ForbiddenChar));
    }

    #[test]
    fn parents_names_and_ancestors() {
        assert_eq!(parent("/"), None);
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/a/b/c"), Some("/a/b"));
        assert_eq!(name("/a/b"), "b");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        let a: Vec<&str> = ancestors("/a/b/c").collect();
        assert_eq!(a, vec!["/a/b", "/a", "/"]);
        assert!(ancestors("/").next().is_none());
    }
}
