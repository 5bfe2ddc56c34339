//! Who may do what: the caller of a request is who the kernel says
//! ([`crate::identity::peer`]), and each request is authorized by that uid.
//!
//! * anyone who can reach the socket may ask for `status` and `why`, but
//!   sees other users' jobs without their commands, working directories or
//!   environments;
//! * a user may submit to a VC they are a member of (`[[vc]]` `users` and
//!   `groups`, or Slurm's associations), and cancel their own jobs;
//! * admins (root, the daemon's own user, `access.admins` and members of
//!   `access.admin_groups`) may also swap and roll back policies and cancel
//!   anyone's job;
//! * a daemon that cannot run jobs as their submitters (it is not root)
//!   refuses submissions from other users.

use std::collections::BTreeMap;

use super::SlurmError;
use super::config::{Config, Membership, VcConfig};
use super::engine::Slurm;
use super::identity::{self, Peer, RunAs, UnixUser};

/// A caller, as the kernel and the user database say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The user (a uid the database does not know is `uid-N`).
    pub user: UnixUser,
    /// Every group they belong to.
    pub groups: Vec<u32>,
    /// Whether they are an admin.
    pub admin: bool,
}

impl Caller {
    /// How to run a command as this caller.
    pub fn run_as(&self) -> RunAs {
        RunAs {
            uid: self.user.uid,
            gid: self.user.gid,
            groups: self.groups.clone(),
        }
    }
}

/// The access rules of a configuration, with its names resolved.
#[derive(Clone, Debug)]
pub struct Access {
    /// The daemon's own uid.
    pub daemon_uid: u32,
    admins: Vec<String>,
    admin_groups: Vec<u32>,
    /// Per VC with a member list: its users and group ids.
    members: BTreeMap<String, (Vec<String>, Vec<u32>)>,
    membership: Membership,
}

impl Access {
    /// The rules of `cfg`; a group it names that the system does not know
    /// is an error.
    pub fn new(cfg: &Config) -> Result<Access, SlurmError> {
        let group = |name: &String| {
            identity::group_id(name).ok_or_else(|| SlurmError::Config {
                file: cfg.file.clone(),
                message: format!("group {name:?} does not exist on this host"),
            })
        };
        let admin_groups = cfg
            .access
            .admin_groups
            .iter()
            .map(group)
            .collect::<Result<_, _>>()?;
        let mut members = BTreeMap::new();
        for vc in cfg.vc.iter().filter(|v| v.restricted()) {
            let groups = vc
                .groups
                .iter()
                .flatten()
                .map(group)
                .collect::<Result<_, _>>()?;
            members.insert(
                vc.name.clone(),
                (vc.users.clone().unwrap_or_default(), groups),
            );
        }
        Ok(Access {
            daemon_uid: identity::effective_uid(),
            admins: cfg.access.admins.clone(),
            admin_groups,
            members,
            membership: cfg.access.vc_membership,
        })
    }

    /// Who `peer` is.
    pub fn caller(&self, peer: Peer) -> Caller {
        let user = identity::user_by_uid(peer.uid).unwrap_or_else(|| UnixUser {
            name: format!("uid-{}", peer.uid),
            uid: peer.uid,
            gid: peer.gid,
            home: String::new(),
        });
        let mut groups = identity::groups_of(&user);
        if !groups.contains(&peer.gid) {
            groups.push(peer.gid);
        }
        let admin = peer.uid == 0
            || peer.uid == self.daemon_uid
            || self.admins.contains(&user.name)
            || groups.iter().any(|g| self.admin_groups.contains(g));
        Caller {
            user,
            groups,
            admin,
        }
    }

    /// Whether this daemon can run jobs as users other than itself (it is
    /// root).
    pub fn can_switch_users(&self) -> bool {
        self.daemon_uid == 0
    }

    /// Why `caller` may not submit to `vc`, if they may not: not a member,
    /// or this daemon cannot run their job as them.
    pub fn may_submit(&self, caller: &Caller, vc: &VcConfig, slurm: &Slurm) -> Result<(), String> {
        if caller.user.uid != self.daemon_uid && !self.can_switch_users() {
            return Err(format!(
                "this daemon runs as uid {} (not root), so it cannot run a job as you ({}): \
                 jobs would run as the daemon's user; ask the operator to run it as root, \
                 or to use native mode (mode = \"native\", your own sbatch)",
                self.daemon_uid, caller.user.name
            ));
        }
        self.is_member(&caller.user.name, &caller.groups, &vc.name, slurm)
    }

    /// Why `user` (in `groups`) is not a member of VC `vc`, if not.
    pub fn is_member(
        &self,
        user: &str,
        groups: &[u32],
        vc: &str,
        slurm: &Slurm,
    ) -> Result<(), String> {
        match self.membership {
            Membership::Config => match self.members.get(vc) {
                None => Ok(()),
                Some((users, gids)) => {
                    if users.iter().any(|u| u == user) || groups.iter().any(|g| gids.contains(g)) {
                        Ok(())
                    } else {
                        Err(format!(
                            "{user} is not a member of virtual cluster {vc:?} (its [[vc]] users and groups)"
                        ))
                    }
                }
            },
            Membership::Slurm => match slurm.has_association(user, vc) {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!(
                    "{user} has no association with Slurm account {vc:?} (sacctmgr)"
                )),
                Err(e) => Err(format!(
                    "cannot check {user}'s association with account {vc:?}: {e}"
                )),
            },
        }
    }

    /// Whether `caller` may act on a job of `owner_uid` (cancel it, see
    /// its command).
    pub fn owns_or_admin(caller: &Caller, owner_uid: u32) -> bool {
        caller.admin || caller.user.uid == owner_uid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> Config {
        let text = format!(
            "state_dir = \"s\"\n{extra}\n[[vc]]\nname = \"open\"\n[[vc]]\nname = \"prod\"\nusers = [\"alice\"]\ngroups = [\"root\"]\n"
        );
        Config::parse(&text, "x.toml", Path::new("/")).unwrap()
    }

    fn caller(name: &str, uid: u32, groups: Vec<u32>, admin: bool) -> Caller {
        Caller {
            user: UnixUser {
                name: name.into(),
                uid,
                gid: groups.first().copied().unwrap_or(uid),
                home: String::new(),
            },
            groups,
            admin,
        }
    }

    #[test]
    fn members_admins_and_owners() {
        let access = Access::new(&config("[access]\nadmins = [\"ops\"]")).unwrap();
        let slurm = Slurm::new(None, None);
        let cfg = config("");
        let (open, prod) = (&cfg.vc[0], &cfg.vc[1]);
        let mallory = caller("mallory", 5001, vec![5001], false);
        let alice = caller("alice", 5002, vec![5002], false);
        let in_root_group = caller("carol", 5003, vec![5003, 0], false);
        assert!(
            access
                .is_member("mallory", &mallory.groups, &open.name, &slurm)
                .is_ok()
        );
        let e = access
            .is_member("mallory", &mallory.groups, &prod.name, &slurm)
            .unwrap_err();
        assert!(
            e.contains("not a member of virtual cluster \"prod\""),
            "{e}"
        );
        assert!(
            access
                .is_member("alice", &alice.groups, &prod.name, &slurm)
                .is_ok()
        );
        assert!(
            access
                .is_member("carol", &in_root_group.groups, &prod.name, &slurm)
                .is_ok()
        );
        assert!(Access::owns_or_admin(&alice, 5002));
        assert!(!Access::owns_or_admin(&mallory, 5002));
        assert!(
            access
                .caller(Peer {
                    uid: 0,
                    gid: 0,
                    pid: 1
                })
                .admin
        );
        let unknown = access.caller(Peer {
            uid: 4_000_000,
            gid: 7,
            pid: 1,
        });
        assert_eq!(unknown.user.name, "uid-4000000");
        assert!(!unknown.admin);
        let e =
            Access::new(&config("[access]\nadmin_groups = [\"no-such-group-gw\"]")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
