//! One step smaller views, for shrinking a failing view to the smallest
//! that still fails ([`super::SlotViews::smaller`]). Each slot lists its own
//! candidates with these helpers: whole virtual clusters first (with their
//! jobs, the later VCs renumbered so ids stay positions), then halves of a
//! list, then each single entry.

use crate::ids::VcId;

/// `list`'s two halves (if it has two entries or more), then `list`
/// without each single entry, the last first.
///
/// ```
/// use gangway_plugin_sdk::testing::shrink::smaller_lists;
///
/// assert_eq!(
///     smaller_lists(&[1, 2, 3]),
///     vec![vec![1], vec![2, 3], vec![1, 2], vec![1, 3], vec![2, 3]]
/// );
/// assert!(smaller_lists::<u8>(&[]).is_empty());
/// ```
pub fn smaller_lists<T: Clone>(list: &[T]) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    if list.len() >= 2 {
        let half = list.len() / 2;
        out.push(list[..half].to_vec());
        out.push(list[half..].to_vec());
    }
    for i in (0..list.len()).rev() {
        let mut shorter = list.to_vec();
        shorter.remove(i);
        out.push(shorter);
    }
    out
}

/// `vc`'s id once VC `dropped` is gone: the later ones move down by one.
///
/// ```
/// use gangway_plugin_sdk::VcId;
/// use gangway_plugin_sdk::testing::shrink::renumbered;
///
/// assert_eq!(renumbered(VcId(3), VcId(1)), VcId(2));
/// assert_eq!(renumbered(VcId(0), VcId(1)), VcId(0));
/// ```
pub fn renumbered(vc: VcId, dropped: VcId) -> VcId {
    if vc.0 > dropped.0 { VcId(vc.0 - 1) } else { vc }
}

/// Every list of `vcs` with one VC dropped (the last first), each with the
/// dropped VC's id, the later ids renumbered by `id`/`set_id`.
pub fn without_each_vc<T: Clone>(
    vcs: &[T],
    id: impl Fn(&T) -> VcId,
    set_id: impl Fn(&mut T, VcId),
) -> Vec<(VcId, Vec<T>)> {
    (0..vcs.len())
        .rev()
        .map(|k| {
            let dropped = id(&vcs[k]);
            let mut rest = vcs.to_vec();
            rest.remove(k);
            for v in &mut rest {
                let new = renumbered(id(v), dropped);
                set_id(v, new);
            }
            (dropped, rest)
        })
        .collect()
}

/// Every list of `servers` with one server dropped that hosts none of
/// `running` (the last first): a server a running job is on stays, so
/// every job's parts keep their servers.
pub fn unused_servers_dropped(
    servers: &[crate::ServerState],
    running: &[crate::RunningJob],
) -> Vec<Vec<crate::ServerState>> {
    (0..servers.len())
        .rev()
        .filter(|i| {
            let id = servers[*i].id;
            !running
                .iter()
                .any(|j| j.parts.iter().any(|(s, _)| *s == id))
        })
        .map(|i| {
            let mut rest = servers.to_vec();
            rest.remove(i);
            rest
        })
        .collect()
}
