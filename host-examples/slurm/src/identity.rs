//! Who is asking, and as whom a job runs: the Unix calls std does not wrap.
//!
//! * [`peer`]: the uid, gid and pid of the process at the other end of a
//!   Unix socket, from the kernel (`SO_PEERCRED`), not from anything the
//!   client says;
//! * [`user_by_uid`], [`user_by_name`], [`group_id`], [`groups_of`]: the
//!   system's user and group databases (NSS: files, LDAP, SSSD, ...);
//! * [`RunAs`]: a command started as another user, with that user's
//!   groups, before it runs (the daemon must be root);
//! * [`effective_uid`], [`raise_descriptor_limit`].
//!
//! This is the only module of the crate with `unsafe` code; each block says
//! why it is sound.

use std::ffi::{CStr, CString};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The credentials of a socket's peer, as the kernel recorded them when it
/// connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Its process id.
    pub pid: i32,
}

/// The peer credentials of `stream` (`SO_PEERCRED`).
#[allow(unsafe_code)]
pub fn peer(stream: &UnixStream) -> std::io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| std::io::Error::other("ucred size"))?;
    // SAFETY: the descriptor is a live socket owned by `stream`; `cred` and
    // `len` are valid for writes of the sizes given, and the kernel writes
    // at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        uid: cred.uid,
        gid: cred.gid,
        pid: cred.pid,
    })
}

/// This process's effective user id.
#[allow(unsafe_code)]
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises this process's soft limit on open descriptors to its hard limit
/// (systemd's default soft limit is 1,024, its hard one far higher) and
/// returns the soft limit now in force.
#[allow(unsafe_code)]
pub fn raise_descriptor_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for writes of an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit, only read by the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Ok(lim.rlim_cur)
}

/// A user of the system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixUser {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Home folder.
    pub home: String,
}

/// Buffer sizes tried for the `_r` lookups (a group with many members
/// needs a large one).
const LOOKUP_BUFFERS: [usize; 4] = [4 << 10, 64 << 10, 1 << 20, 16 << 20];

/// Runs a `getpw*_r` lookup with growing buffers.
#[allow(unsafe_code)]
fn passwd_lookup(
    call: impl Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> i32,
) -> Option<UnixUser> {
    for size in LOOKUP_BUFFERS {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero passwd is a valid value (null pointers, zero
        // ids); it is only read after the call filled it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&raw mut pwd, buf.as_mut_ptr(), buf.len(), &raw mut found);
        if rc == libc::ERANGE {
            continue;
        }
        if rc != 0 || found.is_null() {
            return None;
        }
        // SAFETY: on success the strings of `pwd` point into `buf`, which
        // is alive, and are NUL-terminated.
        let text = |p: *const libc::c_char| unsafe {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        return Some(UnixUser {
            name: text(pwd.pw_name),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home: text(pwd.pw_dir),
        });
    }
    None
}

/// The user with id `uid`, if the system knows it.
#[allow(unsafe_code)]
pub fn user_by_uid(uid: u32) -> Option<UnixUser> {
    passwd_lookup(|pwd, buf, len, found| {
        // SAFETY: the pointers come from `passwd_lookup`, valid for the
        // sizes given.
        unsafe { libc::getpwuid_r(uid, pwd, buf, len, found) }
    })
}

/// The user named `name`, if the system knows it.
#[allow(unsafe_code)]
pub fn user_by_name(name: &str) -> Option<UnixUser> {
    let cname = CString::new(name).ok()?;
    passwd_lookup(|pwd, buf, len, found| {
        // SAFETY: `cname` is NUL-terminated and outlives the call; the
        // other pointers come from `passwd_lookup`.
        unsafe { libc::getpwnam_r(cname.as_ptr(), pwd, buf, len, found) }
    })
}

/// The id of the group named `name`, if the system knows it.
#[allow(unsafe_code)]
pub fn group_id(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    for size in LOOKUP_BUFFERS {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero group is a valid value; it is only read after
        // the call filled it.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the size given and outlives
        // the call.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &raw mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &raw mut found,
            )
        };
        if rc == libc::ERANGE {
            continue;
        }
        return (rc == 0 && !found.is_null()).then_some(grp.gr_gid);
    }
    None
}

/// Every group `user` belongs to, its primary group first.
#[allow(unsafe_code)]
pub fn groups_of(user: &UnixUser) -> Vec<u32> {
    let Ok(cname) = CString::new(user.name.as_str()) else {
        return vec![user.gid];
    };
    let mut n: libc::c_int = 64;
    for _ in 0..8 {
        let mut groups = vec![0 as libc::gid_t; usize::try_from(n).unwrap_or(64)];
        let mut count = n;
        // SAFETY: `groups` has room for `count` ids; the call writes at
        // most that many and sets `count` to how many it has.
        let rc = unsafe {
            libc::getgrouplist(
                cname.as_ptr(),
                user.gid,
                groups.as_mut_ptr(),
                &raw mut count,
            )
        };
        if rc >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            if let Some(at) = groups.iter().position(|g| *g == user.gid) {
                groups.swap(0, at);
            } else {
                groups.insert(0, user.gid);
            }
            return groups;
        }
        n = count.max(n.saturating_mul(2));
    }
    vec![user.gid]
}

/// A user to run a command as: their uid, primary gid and groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group (the primary one included).
    pub groups: Vec<u32>,
}

impl RunAs {
    /// `user` with the groups the system gives them.
    pub fn user(user: &UnixUser) -> RunAs {
        RunAs {
            uid: user.uid,
            gid: user.gid,
            groups: groups_of(user),
        }
    }

    /// Makes `cmd` run as this user: between fork and exec the child sets
    /// its groups, then its gid, then its uid (in that order: each needs the
    /// privilege the next one gives up). Only root can; otherwise the
    /// command fails to start.
    #[allow(unsafe_code)]
    pub fn apply(&self, cmd: &mut Command) {
        let (uid, gid) = (self.uid, self.gid);
        let groups: Vec<libc::gid_t> = self.groups.clone();
        // SAFETY: the closure runs in the forked child before exec and only
        // makes three system calls (async-signal-safe) with data prepared
        // before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_groups_and_peers() {
        let root = user_by_uid(0).unwrap();
        assert_eq!(root.name, "root");
        assert_eq!(user_by_name("root").unwrap().uid, 0);
        assert!(user_by_name("no-such-user-gangway").is_none());
        assert_eq!(group_id("root"), Some(0));
        assert!(group_id("no-such-group-gangway").is_none());
        assert_eq!(groups_of(&root).first(), Some(&root.gid));
        let (a, b) = UnixStream::pair().unwrap();
        let p = peer(&a).unwrap();
        assert_eq!(p.uid, effective_uid());
        assert_eq!(i64::from(p.pid), i64::from(std::process::id()));
        drop(b);
    }
}
