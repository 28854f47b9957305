//! Facts about the host that io_uring needs, shared by the server's start-up checks and the
//! client's glommio driver: the locked-memory limit (RLIMIT_MEMLOCK) glommio's rings and
//! buffers count against.
//! Rules: only ever raises a limit (the soft one up to the hard one, or both where the
//! process may); says what it could not do instead of failing later inside glommio.

/// The locked memory glommio asks of every executor, whatever its buffers (its reactor
/// refuses to start below this).
pub const GLOMMIO_MEMLOCK_MIN_BYTES: u64 = 512 * 1024;

/// The locked-memory limit is below what is needed and cannot be raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemlockTooLow {
    /// The locked memory needed, in bytes.
    pub needed_bytes: u64,
    /// The soft limit found, in bytes.
    pub soft_bytes: u64,
    /// The hard limit found, in bytes.
    pub hard_bytes: u64,
}

/// Raises RLIMIT_MEMLOCK to at least `needed` bytes if it is lower. Ok(Some(old soft limit))
/// when it raised it, Ok(None) when it was high enough (or cannot be read).
pub fn raise_memlock(needed: u64) -> Result<Option<u64>, MemlockTooLow> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Ok(None);
    }
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= needed {
        return Ok(None);
    }
    let target = if lim.rlim_max == libc::RLIM_INFINITY { needed } else { needed.min(lim.rlim_max) };
    let raised = libc::rlimit { rlim_cur: target, rlim_max: lim.rlim_max };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 && target >= needed {
        return Ok(Some(lim.rlim_cur));
    }
    // Root may raise the hard limit too.
    let raised = libc::rlimit { rlim_cur: needed, rlim_max: needed.max(lim.rlim_max) };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) } == 0 {
        return Ok(Some(lim.rlim_cur));
    }
    Err(MemlockTooLow { needed_bytes: needed, soft_bytes: lim.rlim_cur, hard_bytes: lim.rlim_max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_already_high_enough_is_left_alone() {
        let mut before = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut before) }, 0);
        assert_eq!(raise_memlock(0), Ok(None));
        let mut after = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut after) }, 0);
        assert_eq!((before.rlim_cur, before.rlim_max), (after.rlim_cur, after.rlim_max));
    }
}
