//! A helper for reclaim and defragment policies: a model of the servers'
//! free GPUs that answers "which running jobs must go for this gang to fit
//! within its spread limit?" the way the core will check it.
//!
//! The model groups servers as the limit allows (one server, the servers of
//! one domain just above the servers, or the whole cluster), adds the GPUs
//! of chosen running jobs to the free ones, and takes the gang's GPUs from
//! the chosen group largest holes first, so later questions see what
//! earlier answers used.

mod typed;

pub use typed::TypedRooms;

use std::ops::Range;

use rustc_hash::FxHashMap as HashMap;

use crate::ids::{JobId, Level, ServerId};
use crate::view::{RunningJob, ServerState, SpreadLimit};

/// How a spread limit groups the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    /// Each server alone.
    Server,
    /// The servers of one domain just above the servers.
    Domain,
    /// The whole cluster.
    Whole,
}

/// The servers' free GPUs, as a reclaim or defragment policy plans.
///
/// ```
/// use gangway_plugin_sdk::room::Room;
/// use gangway_plugin_sdk::*;
///
/// let servers: Vec<ServerState> = (0..2)
///     .map(|i| ServerState { id: ServerId(i), domain: 0, gpus: 8, free: 2 })
///     .collect();
/// let victim = RunningJob { id: JobId(7), gpus: 6, parts: vec![(ServerId(1), 6)], ..RunningJob::default() };
/// let mut room = Room::new(&servers, Level(2));
/// // 8 GPUs on one server: free 2 on server 1 plus the victim's 6.
/// let stop = room.make_room(8, SpreadLimit::level(Level(2)), &[&victim]).unwrap();
/// assert_eq!(stop, vec![JobId(7)]);
/// // Now server 1 is taken by the gang: nothing is left for another.
/// assert!(room.make_room(8, SpreadLimit::level(Level(2)), &[]).is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Room {
    server_level: Level,
    free: Vec<u32>,
    domain: Vec<u32>,
    index: ServerIndex,
    /// Each grouping's groups, made the first time a question needs them
    /// (they depend only on the servers, not on their free GPUs).
    groups: [Option<Groups>; 3],
    /// Scratch for a question: GPUs freed per server, all zero between
    /// questions.
    extra: Vec<u32>,
}

/// The servers of a [`Room`] grouped one way.
#[derive(Clone, Debug, Default)]
struct Groups {
    /// Server positions in group order.
    servers: Vec<usize>,
    /// Each group's key and its range of `servers`, in key order.
    ranges: Vec<(u64, Range<usize>)>,
    /// Each server's group, by server position.
    group_of: Vec<usize>,
    /// Whether each server is a group of its own, group `i` being server
    /// `i`.
    single: bool,
}

/// Where each server of a [`Room`] sits in its lists, by id.
#[derive(Clone, Debug)]
enum ServerIndex {
    /// Ids no larger than a few times the servers' count (as hosts number
    /// servers): a table by id, `u32::MAX` where no server has that id.
    Dense(Vec<u32>),
    /// Any other ids.
    Hashed(HashMap<ServerId, usize>),
}

impl ServerIndex {
    fn new(servers: &[ServerState]) -> ServerIndex {
        let top = servers.iter().map(|s| s.id.0 as usize).max().unwrap_or(0);
        if top < servers.len().saturating_mul(4).max(64) {
            let mut table = vec![u32::MAX; top + 1];
            // A repeated id names its last server, as a map built in order would.
            for (i, s) in servers.iter().enumerate() {
                table[s.id.0 as usize] = i as u32;
            }
            ServerIndex::Dense(table)
        } else {
            ServerIndex::Hashed(servers.iter().enumerate().map(|(i, s)| (s.id, i)).collect())
        }
    }

    /// The position of server `id`, if the room has it.
    fn get(&self, id: &ServerId) -> Option<usize> {
        match self {
            ServerIndex::Dense(table) => table
                .get(id.0 as usize)
                .filter(|i| **i != u32::MAX)
                .map(|i| *i as usize),
            ServerIndex::Hashed(map) => map.get(id).copied(),
        }
    }
}

/// The `bound` largest values among some servers' free GPUs and their sum,
/// kept as values grow.
#[derive(Debug, Default)]
struct Top {
    /// (value, server position), at most `bound` of them.
    entries: Vec<(u64, usize)>,
    bound: usize,
    sum: u64,
}

impl Top {
    /// The largest `bound` of `values` (zeros left out: they add nothing).
    fn new(values: impl Iterator<Item = (u64, usize)>, bound: usize) -> Top {
        let mut entries: Vec<(u64, usize)> = values.filter(|(v, _)| *v > 0).collect();
        if entries.len() > bound {
            // Largest first (which of equal values are kept does not
            // change the sum, nor any sum after a raise).
            crate::sort::by_key(&mut entries, |(v, _)| [!*v, 0, 0]);
            entries.truncate(bound);
        }
        let sum = entries.iter().map(|(v, _)| v).sum();
        Top {
            entries,
            bound,
            sum,
        }
    }

    /// Server `i`'s value grew to `value`.
    fn raise(&mut self, i: usize, value: u64) {
        if let Some(e) = self.entries.iter_mut().find(|(_, s)| *s == i) {
            self.sum = self.sum - e.0 + value;
            e.0 = value;
        } else if self.entries.len() < self.bound {
            if value > 0 {
                self.entries.push((value, i));
                self.sum += value;
            }
        } else if let Some(low) = self.entries.iter_mut().min_by_key(|(v, _)| *v)
            && value > low.0
        {
            self.sum = self.sum - low.0 + value;
            *low = (value, i);
        }
    }
}

/// An answer of [`Room::make_room`]: the jobs to free in one group.
#[derive(Debug)]
struct Answer {
    /// The jobs to free, in the order given.
    jobs: Vec<JobId>,
    /// GPUs they hold.
    freed: u64,
    /// The position of the last among the candidates.
    last: usize,
    /// The group's key.
    key: u64,
    /// GPUs they free on each server (by position).
    freed_by_server: Vec<(usize, u32)>,
    /// The group's range of its grouping's servers.
    group: Range<usize>,
}

/// Scratch for trying the groups of one question: GPUs freed per server
/// (by position) by the jobs chosen in the group being tried, the
/// positions set, and the jobs chosen.
struct Trial {
    extra: Vec<u32>,
    touched: Vec<usize>,
    chosen: Vec<JobId>,
}

impl Trial {
    /// Nothing freed, nothing chosen.
    #[inline]
    fn reset(&mut self) {
        for i in self.touched.drain(..) {
            self.extra[i] = 0;
        }
        self.chosen.clear();
    }
}

impl Room {
    /// A model of `servers` (their free GPUs) in a topology whose servers
    /// are at `server_level`.
    pub fn new(servers: &[ServerState], server_level: Level) -> Room {
        Room {
            server_level,
            free: servers.iter().map(|s| s.free).collect(),
            domain: servers.iter().map(|s| s.domain).collect(),
            index: ServerIndex::new(servers),
            groups: Default::default(),
            extra: Vec::new(),
        }
    }

    /// Free GPUs of server `id` in the model.
    pub fn free(&self, id: ServerId) -> u32 {
        self.index.get(&id).map_or(0, |i| self.free[i])
    }

    /// How `limit` groups the servers: each server alone, by the domain
    /// just above the servers, or the whole cluster as one group.
    fn grouping(&self, limit: SpreadLimit) -> Grouping {
        if limit.level >= self.server_level {
            Grouping::Server
        } else if limit.level.0 + 1 == self.server_level.0 {
            Grouping::Domain
        } else {
            Grouping::Whole
        }
    }

    /// The key of server `i`'s group (groups are tried in key order).
    fn key(&self, i: usize, grouping: Grouping) -> u64 {
        match grouping {
            Grouping::Server => i as u64,
            Grouping::Domain => u64::from(self.domain[i]) << 32,
            Grouping::Whole => u64::MAX,
        }
    }

    /// Every group of `grouping`, in key order.
    fn make_groups(&self, grouping: Grouping) -> Groups {
        let n = self.free.len();
        let mut servers: Vec<usize> = (0..n).collect();
        if grouping == Grouping::Domain {
            crate::sort::by_key(&mut servers, |i| [self.key(*i, grouping), *i as u64, 0]);
        }
        let mut ranges: Vec<(u64, Range<usize>)> = Vec::new();
        let mut group_of = vec![usize::MAX; n];
        for (at, i) in servers.iter().enumerate() {
            let key = self.key(*i, grouping);
            match ranges.last_mut() {
                Some((k, range)) if *k == key => range.end = at + 1,
                _ => ranges.push((key, at..at + 1)),
            }
            group_of[*i] = ranges.len() - 1;
        }
        Groups {
            servers,
            ranges,
            group_of,
            single: grouping == Grouping::Server,
        }
    }

    /// The running jobs among `candidates` to free (in the order given:
    /// earlier ones go first) so a gang of `gpus` fits within `limit`; an
    /// empty list if it fits already; `None` if it cannot fit. Of the
    /// groups that can hold it, the one needing the fewest jobs freed (then
    /// the fewest GPUs, then the one whose jobs come earliest in
    /// `candidates`, then the first) is chosen, and the model is updated:
    /// the freed GPUs are added and the gang's are taken. Its cost is linear
    /// in the servers and the candidates (and, under a bound on servers,
    /// in the servers with free GPUs for each job tried).
    pub fn make_room(
        &mut self,
        gpus: u32,
        limit: SpreadLimit,
        candidates: &[&RunningJob],
    ) -> Option<Vec<JobId>> {
        let grouping = self.grouping(limit);
        let slot = grouping as usize;
        let groups = match self.groups[slot].take() {
            Some(groups) => groups,
            None => self.make_groups(grouping),
        };
        let answer = self.make_room_in(&groups, gpus, limit, candidates);
        self.groups[slot] = Some(groups);
        answer
    }

    /// [`Room::make_room`] over the servers grouped as `groups`.
    fn make_room_in(
        &mut self,
        groups: &Groups,
        gpus: u32,
        limit: SpreadLimit,
        candidates: &[&RunningJob],
    ) -> Option<Vec<JobId>> {
        let need = u64::from(gpus);
        let bound = limit.max_servers as usize;
        // A group that holds the gang as it is needs no job freed: no answer
        // beats that, and of several such groups the first wins. Only when
        // there is none do the groups holding candidates need a closer look.
        let answer = match self.group_holding(groups, need, bound) {
            Some((key, range)) => Answer {
                jobs: Vec::new(),
                freed: 0,
                last: 0,
                key: *key,
                freed_by_server: Vec::new(),
                group: range.clone(),
            },
            None => {
                let inside = self.candidates_inside(&groups.group_of, candidates);
                self.best_freeing(groups, &inside, need, bound)?
            }
        };
        for (i, g) in &answer.freed_by_server {
            self.free[*i] = self.free[*i].saturating_add(*g);
        }
        let mut members: Vec<usize> = groups.servers[answer.group].to_vec();
        crate::sort::by_key(&mut members, |i| [!u64::from(self.free[*i]), *i as u64, 0]);
        let mut left = gpus;
        for i in members {
            if left == 0 {
                break;
            }
            let take = self.free[i].min(left);
            self.free[i] -= take;
            left -= take;
        }
        Some(answer.jobs)
    }

    /// The first of `groups` that holds `need` GPUs as it is (on at most
    /// `bound` servers, if bound).
    #[inline]
    fn group_holding<'g>(
        &self,
        groups: &'g Groups,
        need: u64,
        bound: usize,
    ) -> Option<&'g (u64, Range<usize>)> {
        if groups.single {
            // (A server alone is within any bound on servers.)
            return self
                .free
                .iter()
                .position(|f| u64::from(*f) >= need)
                .and_then(|g| groups.ranges.get(g));
        }
        groups.ranges.iter().find(|(_, range)| {
            let members = &groups.servers[range.clone()];
            let base: u64 = members.iter().map(|i| u64::from(self.free[*i])).sum();
            base >= need
                && (bound == 0
                    || members.len() <= bound
                    || Top::new(
                        members.iter().map(|i| (u64::from(self.free[*i]), *i)),
                        bound,
                    )
                    .sum >= need)
        })
    }

    /// The candidates whose every part is in one group (by `group_of`), as
    /// (group, position among `candidates`, job), by group and then in the
    /// order given (positions are unique, so the order is total).
    #[inline]
    fn candidates_inside<'c>(
        &self,
        group_of: &[usize],
        candidates: &[&'c RunningJob],
    ) -> Vec<(usize, usize, &'c RunningJob)> {
        let mut inside: Vec<(usize, usize, &RunningJob)> = Vec::with_capacity(candidates.len());
        'candidates: for (at, j) in candidates.iter().enumerate() {
            let mut first = None;
            for (s, _) in &j.parts {
                let Some(i) = self.index.get(s) else {
                    continue 'candidates;
                };
                let g = group_of[i];
                if first.is_some_and(|f| f != g) {
                    continue 'candidates;
                }
                first = Some(g);
            }
            if let Some(g) = first {
                inside.push((g, at, j));
            }
        }
        crate::sort::by_key(&mut inside, |(g, at, _)| [*g as u64, *at as u64, 0]);
        inside
    }

    /// Of the groups holding candidates (`inside`, by group), the one where
    /// freeing the fewest jobs (then GPUs, then the earliest jobs, then the
    /// first group) makes room for `need` GPUs (on at most `bound` servers,
    /// if bound); `None` if none can.
    #[inline]
    fn best_freeing(
        &mut self,
        groups: &Groups,
        inside: &[(usize, usize, &RunningJob)],
        need: u64,
        bound: usize,
    ) -> Option<Answer> {
        let mut best: Option<Answer> = None;
        let mut trial = Trial {
            extra: std::mem::take(&mut self.extra),
            touched: Vec::new(),
            chosen: Vec::new(),
        };
        trial.extra.resize(self.free.len(), 0);
        let mut cursor = 0;
        while let Some((g, _, _)) = inside.get(cursor) {
            let g = *g;
            let first = cursor;
            while inside.get(cursor).is_some_and(|(h, _, _)| *h == g) {
                cursor += 1;
            }
            let (key, range) = &groups.ranges[g];
            let members = &groups.servers[range.clone()];
            let most = best.as_ref().map(|b| b.jobs.len());
            let Some((freed, last)) = self.try_group(
                members,
                &inside[first..cursor],
                need,
                bound,
                most,
                &mut trial,
            ) else {
                continue;
            };
            let better = best.as_ref().is_none_or(|b| {
                (trial.chosen.len(), freed, last, *key) < (b.jobs.len(), b.freed, b.last, b.key)
            });
            if better {
                best = Some(Answer {
                    jobs: trial.chosen.clone(),
                    freed,
                    last,
                    key: *key,
                    freed_by_server: trial
                        .touched
                        .iter()
                        .map(|i| (*i, trial.extra[*i]))
                        .collect(),
                    group: range.clone(),
                });
            }
        }
        trial.reset();
        self.extra = trial.extra;
        best
    }

    /// Frees `jobs` (one group's candidates, in order) in `trial` until the
    /// group's `members` hold `need` GPUs (on at most `bound` servers, if
    /// bound), stopping once as many jobs as the best answer's (`most`) are
    /// chosen: the GPUs the chosen jobs hold and the position of the last,
    /// if they make room.
    #[inline]
    fn try_group(
        &self,
        members: &[usize],
        jobs: &[(usize, usize, &RunningJob)],
        need: u64,
        bound: usize,
        most: Option<usize>,
        trial: &mut Trial,
    ) -> Option<(u64, usize)> {
        let bounded = bound != 0 && members.len() > bound;
        let base: u64 = members.iter().map(|i| u64::from(self.free[*i])).sum();
        trial.reset();
        // GPUs the chosen jobs hold (the tie-break), and those of their
        // parts (what a fit counts).
        let (mut freed, mut parts) = (0u64, 0u64);
        let mut last = 0usize;
        // Under a bound on servers, what counts is the `bound` members with
        // the most free GPUs: kept as they change (a member's free GPUs only
        // grow as jobs are freed, so one that drops out of them never comes
        // back unless its own count grows).
        let mut top = if bounded {
            Top::new(
                members.iter().map(|i| (u64::from(self.free[*i]), *i)),
                bound,
            )
        } else {
            Top::default()
        };
        let fits = |top: &Top, parts: u64| -> bool {
            if bounded {
                top.sum >= need
            } else {
                base + parts >= need
            }
        };
        let mut fit = fits(&top, parts);
        for (_, at, j) in jobs {
            // One more job cannot beat an answer with as few.
            if fit || most.is_some_and(|n| trial.chosen.len() >= n) {
                break;
            }
            last = *at;
            for (s, g) in &j.parts {
                if let Some(i) = self.index.get(s) {
                    if *g == 0 {
                        continue;
                    }
                    if trial.extra[i] == 0 {
                        trial.touched.push(i);
                    }
                    trial.extra[i] = trial.extra[i].saturating_add(*g);
                    parts += u64::from(*g);
                    if bounded {
                        top.raise(i, u64::from(self.free[i]) + u64::from(trial.extra[i]));
                    }
                }
            }
            trial.chosen.push(j.id);
            freed += u64::from(j.gpus);
            fit = fits(&top, parts);
        }
        fit.then_some((freed, last))
    }

    /// Marks `gpus` GPUs of server `id` taken (or, negative, freed) in the model.
    pub fn adjust(&mut self, id: ServerId, taken: i64) {
        if let Some(i) = self.index.get(&id) {
            let f = i64::from(self.free[i]) - taken;
            self.free[i] = u32::try_from(f.max(0)).unwrap_or(u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The first implementation (a hash map of groups per call, every
    /// member summed at each step), kept as the oracle the faster one must
    /// agree with.
    impl Room {
        /// The group a server belongs to for `limit`: itself, its domain, or
        /// the whole cluster.
        fn group_reference(&self, i: usize, limit: SpreadLimit) -> u64 {
            if limit.level >= self.server_level {
                i as u64
            } else if limit.level.0 + 1 == self.server_level.0 {
                u64::from(self.domain[i]) << 32
            } else {
                u64::MAX
            }
        }

        /// Whether `gpus` fit on the servers `members` (with their free GPUs
        /// after `extra` is added) within `limit`'s bound on servers.
        fn fits_reference(
            &self,
            members: &[usize],
            extra: &HashMap<usize, u32>,
            gpus: u32,
            limit: SpreadLimit,
        ) -> bool {
            let free = |i: &usize| u64::from(self.free[*i] + extra.get(i).copied().unwrap_or(0));
            if limit.max_servers == 0 || members.len() <= limit.max_servers as usize {
                return members.iter().map(free).sum::<u64>() >= u64::from(gpus);
            }
            let mut frees: Vec<u64> = members.iter().map(free).collect();
            crate::sort::by_key(&mut frees, |f| [!*f, 0, 0]);
            frees.iter().take(limit.max_servers as usize).sum::<u64>() >= u64::from(gpus)
        }

        /// The running jobs among `candidates` to free (in the order given:
        /// earlier ones go first) so a gang of `gpus` fits within `limit`; an
        /// empty list if it fits already; `None` if it cannot fit. Of the
        /// groups that can hold it, the one needing the fewest jobs freed (then
        /// the fewest GPUs, then the one whose jobs come earliest in
        /// `candidates`, then the first) is chosen, and the model is updated:
        /// the freed GPUs are added and the gang's are taken. Its cost is linear
        /// in the servers and the candidates.
        fn make_room_reference(
            &mut self,
            gpus: u32,
            limit: SpreadLimit,
            candidates: &[&RunningJob],
        ) -> Option<Vec<JobId>> {
            let mut groups: HashMap<u64, Vec<usize>> = HashMap::default();
            for i in 0..self.free.len() {
                groups
                    .entry(self.group_reference(i, limit))
                    .or_default()
                    .push(i);
            }
            // Each candidate lies wholly in one group, or is no use.
            let mut inside: HashMap<u64, Vec<(usize, &RunningJob)>> = HashMap::default();
            for (at, j) in candidates.iter().enumerate() {
                let mut keys = j
                    .parts
                    .iter()
                    .map(|(s, _)| self.index.get(s).map(|i| self.group_reference(i, limit)));
                let Some(Some(first)) = keys.next() else {
                    continue;
                };
                if keys.all(|k| k == Some(first)) {
                    inside.entry(first).or_default().push((at, j));
                }
            }
            type Choice = (usize, u32, usize, u64, Vec<JobId>, HashMap<usize, u32>);
            let mut best: Option<Choice> = None;
            let mut keys: Vec<u64> = groups.keys().copied().collect();
            crate::sort::by_key(&mut keys, |k| [*k, 0, 0]);
            for key in keys {
                let members = &groups[&key];
                let mut extra: HashMap<usize, u32> = HashMap::default();
                let mut chosen = Vec::new();
                let mut freed = 0u32;
                let mut last = 0usize;
                let mut fits = self.fits_reference(members, &extra, gpus, limit);
                for (at, j) in inside.get(&key).map(Vec::as_slice).unwrap_or_default() {
                    if fits {
                        break;
                    }
                    last = *at;
                    for (s, g) in &j.parts {
                        if let Some(i) = self.index.get(s) {
                            *extra.entry(i).or_insert(0) += g;
                        }
                    }
                    chosen.push(j.id);
                    freed += j.gpus;
                    fits = self.fits_reference(members, &extra, gpus, limit);
                }
                if !fits {
                    continue;
                }
                let better = best.as_ref().is_none_or(|(n, f, l, k, _, _)| {
                    (chosen.len(), freed, last, key) < (*n, *f, *l, *k)
                });
                if better {
                    best = Some((chosen.len(), freed, last, key, chosen, extra));
                }
            }
            let (_, _, _, key, chosen, extra) = best?;
            for (i, g) in &extra {
                self.free[*i] += g;
            }
            // Take the gang's GPUs from the group, largest holes first.
            let mut members = groups.remove(&key).unwrap_or_default();
            crate::sort::by_key(&mut members, |i| [!u64::from(self.free[*i]), *i as u64, 0]);
            let mut left = gpus;
            for i in members {
                if left == 0 {
                    break;
                }
                let take = self.free[i].min(left);
                self.free[i] -= take;
                left -= take;
            }
            Some(chosen)
        }
    }

    fn servers() -> impl Strategy<Value = Vec<ServerState>> {
        prop::collection::vec((0u32..3, 1u32..9, 0u32..9), 0..12).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (domain, gpus, free))| ServerState {
                    id: ServerId(i as u32),
                    domain,
                    gpus,
                    free: free.min(gpus),
                })
                .collect()
        })
    }

    fn jobs(n_servers: u32) -> impl Strategy<Value = Vec<RunningJob>> {
        prop::collection::vec(
            prop::collection::vec((0..n_servers.max(1) + 1, 1u32..5), 1..4),
            0..10,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, parts)| RunningJob {
                    id: JobId(i as u64),
                    gpus: parts.iter().map(|(_, g)| g).sum(),
                    parts: parts.into_iter().map(|(s, g)| (ServerId(s), g)).collect(),
                    ..RunningJob::default()
                })
                .collect()
        })
    }

    proptest! {
        /// A sequence of questions gets the same answers, and leaves the
        /// same model, as from the first implementation.
        #[test]
        fn agrees_with_the_first_implementation(
            servers in servers(),
            running in jobs(12),
            asks in prop::collection::vec((1u32..20, 0u8..3, 0u32..4), 1..5),
            server_level in 1u8..3,
        ) {
            let mut fast = Room::new(&servers, Level(server_level));
            let mut reference = fast.clone();
            let candidates: Vec<&RunningJob> = running.iter().collect();
            for (gpus, level, max_servers) in asks {
                let limit = SpreadLimit::new(Level(level), max_servers);
                let a = fast.make_room(gpus, limit, &candidates);
                let b = reference.make_room_reference(gpus, limit, &candidates);
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(&fast.free, &reference.free);
            }
        }
    }
}
