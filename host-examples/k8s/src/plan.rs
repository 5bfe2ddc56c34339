//! From a gang's placement (GPUs per node) to its pods: which pod goes to
//! which node with which GPU indices, and the plan written on every
//! Binding so that a restarted scheduler can finish a gang it had begun.
//!
//! Gangway places a gang as a number of GPUs per server; a pod cannot span
//! nodes, so each node's share must hold whole pods. When it does not (a
//! 4-GPU pod and a share of 6), the plan moves the gang's GPUs on the same
//! nodes onto free ones that do ([`fit`]); the host reports the new
//! placement to the core as the engine's truth.

use gangway_core::{Placement, ServerGpus, ServerId};

use super::objects::{indices_text, parse_indices};

/// One pod's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPlace {
    /// The pod's name (in the gang's namespace).
    pub pod: String,
    /// The node.
    pub node: String,
    /// GPU indices on the node (empty for a pod without GPUs).
    pub gpus: Vec<u32>,
}

/// Every pod's place: the whole gang.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// By pod, in the gang's pod order.
    pub places: Vec<PodPlace>,
}

impl Plan {
    /// The plan as written on Bindings: `pod=node:0,1;pod2=node2:` .
    pub fn text(&self) -> String {
        self.places
            .iter()
            .map(|p| format!("{}={}:{}", p.pod, p.node, indices_text(&p.gpus)))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Parses [`Plan::text`]; `None` if it is not one.
    pub fn parse(text: &str) -> Option<Plan> {
        let mut places = Vec::new();
        for item in text.split(';').filter(|s| !s.is_empty()) {
            let (pod, rest) = item.split_once('=')?;
            let (node, gpus) = rest.rsplit_once(':')?;
            if pod.is_empty() || node.is_empty() {
                return None;
            }
            places.push(PodPlace {
                pod: pod.to_string(),
                node: node.to_string(),
                gpus: parse_indices(gpus)?,
            });
        }
        (!places.is_empty()).then_some(Plan { places })
    }

    /// The place of a pod.
    pub fn place(&self, pod: &str) -> Option<&PodPlace> {
        self.places.iter().find(|p| p.pod == pod)
    }

    /// The gang's GPUs as a placement, through `server_of` (node name to
    /// server); `None` if a node is unknown or an index is out of range.
    pub fn placement(
        &self,
        server_of: impl Fn(&str) -> Option<(ServerId, u32)>,
    ) -> Option<Placement> {
        let mut parts: Vec<ServerGpus> = Vec::new();
        for p in &self.places {
            let (server, gpus) = server_of(&p.node)?;
            let mut mask = 0u64;
            for g in &p.gpus {
                if *g >= gpus {
                    return None;
                }
                mask |= 1 << g;
            }
            if mask == 0 {
                continue;
            }
            match parts.iter_mut().find(|x| x.server == server) {
                Some(x) => x.gpus |= mask,
                None => parts.push(ServerGpus { server, gpus: mask }),
            }
        }
        parts.sort_by_key(|x| x.server);
        (!parts.is_empty()).then_some(Placement { parts })
    }
}

/// A pod of the gang to place: its name and GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNeed {
    /// The pod's name.
    pub pod: String,
    /// GPUs it asks for (all GPU pods of a gang ask for the same number).
    pub gpus: u32,
}

/// The GPU indices of a mask, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |g| mask >> g & 1 == 1)
}

/// Places `pods` on `placement` (node names through `node_of`). Each
/// server's share must hold whole pods; when one does not, the GPUs are
/// taken again on the same servers from the share plus `spare(server)`
/// (free GPUs nobody holds), the servers with room for the most pods
/// first. Returns the plan and the placement it uses (the given one, or
/// the refitted one), or `None` when the servers cannot hold the pods.
pub fn fit(
    pods: &[PodNeed],
    placement: &Placement,
    node_of: impl Fn(ServerId) -> String,
    spare: impl Fn(ServerId) -> u64,
) -> Option<(Plan, Placement)> {
    let size = pods.iter().map(|p| p.gpus).max().unwrap_or(0);
    let gpu_pods: Vec<&PodNeed> = pods.iter().filter(|p| p.gpus > 0).collect();
    let zero_pods = pods.iter().filter(|p| p.gpus == 0);
    let fits = size > 0
        && placement
            .parts
            .iter()
            .all(|p| p.gpus.count_ones() % size == 0);
    let chosen: Vec<ServerGpus> = if size == 0 || fits {
        placement.parts.clone()
    } else {
        refit(gpu_pods.len(), size, placement, &spare)?
    };
    let mut places = Vec::with_capacity(pods.len());
    let mut slots = chosen.iter().flat_map(|part| {
        let idx: Vec<u32> = bits(part.gpus).collect();
        let node = node_of(part.server);
        idx.chunks(size.max(1) as usize)
            .map(|c| (node.clone(), c.to_vec()))
            .collect::<Vec<_>>()
    });
    for p in &gpu_pods {
        let (node, gpus) = slots.next()?;
        places.push(PodPlace {
            pod: p.pod.clone(),
            node,
            gpus,
        });
    }
    let first_node = chosen.first().map(|p| node_of(p.server))?;
    for p in zero_pods {
        places.push(PodPlace {
            pod: p.pod.clone(),
            node: first_node.clone(),
            gpus: Vec::new(),
        });
    }
    let mut parts = chosen;
    parts.sort_by_key(|p| p.server);
    Some((Plan { places }, Placement { parts }))
}

/// `count` pods of `size` GPUs on the servers of `placement`, each taking
/// its share first and then spare GPUs; servers with room for the most
/// pods first (fewest servers), ties by server id.
fn refit(
    count: usize,
    size: u32,
    placement: &Placement,
    spare: &impl Fn(ServerId) -> u64,
) -> Option<Vec<ServerGpus>> {
    let mut room: Vec<(ServerId, u64, u64)> = placement
        .parts
        .iter()
        .map(|p| (p.server, p.gpus, (p.gpus | spare(p.server)) & !p.gpus))
        .collect();
    room.sort_by_key(|(s, own, extra)| {
        (
            std::cmp::Reverse((own.count_ones() + extra.count_ones()) / size),
            *s,
        )
    });
    let mut left = count as u32;
    let mut out = Vec::new();
    for (server, own, extra) in room {
        if left == 0 {
            break;
        }
        let pods = ((own.count_ones() + extra.count_ones()) / size).min(left);
        if pods == 0 {
            continue;
        }
        let mut need = pods * size;
        let mut mask = 0u64;
        for g in bits(own).chain(bits(extra)) {
            if need == 0 {
                break;
            }
            mask |= 1 << g;
            need -= 1;
        }
        left -= pods;
        out.push(ServerGpus { server, gpus: mask });
    }
    (left == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn need(n: usize, gpus: u32) -> Vec<PodNeed> {
        (0..n)
            .map(|i| PodNeed {
                pod: format!("p{i}"),
                gpus,
            })
            .collect()
    }

    fn part(server: u32, gpus: u64) -> ServerGpus {
        ServerGpus {
            server: ServerId(server),
            gpus,
        }
    }

    #[test]
    fn even_shares_are_kept() {
        let placement = Placement {
            parts: vec![part(0, 0xff), part(3, 0x0f)],
        };
        let (plan, used) = fit(&need(3, 4), &placement, |s| format!("n{}", s.0), |_| 0).unwrap();
        assert_eq!(used, placement);
        assert_eq!(plan.text(), "p0=n0:0,1,2,3;p1=n0:4,5,6,7;p2=n3:0,1,2,3");
        assert_eq!(Plan::parse(&plan.text()).unwrap(), plan);
        let back = plan
            .placement(|n| Some((ServerId(n[1..].parse().unwrap()), 8)))
            .unwrap();
        assert_eq!(back, placement);
    }

    #[test]
    fn uneven_shares_are_refitted_on_the_same_servers() {
        // 8 GPUs of 4-GPU pods given as 6 + 2: server 1 has 2 spare GPUs.
        let placement = Placement {
            parts: vec![part(1, 0b0011_1111), part(2, 0b11)],
        };
        let spare = |s: ServerId| if s.0 == 1 { 0b1100_0000 } else { 0 };
        let (plan, used) = fit(&need(2, 4), &placement, |s| format!("n{}", s.0), spare).unwrap();
        assert_eq!(used.parts, vec![part(1, 0xff)]);
        assert_eq!(plan.places[1].gpus, [4, 5, 6, 7]);
        // Without spare GPUs they cannot hold two 4-GPU pods.
        assert!(fit(&need(2, 4), &placement, |s| format!("n{}", s.0), |_| 0).is_none());
    }

    #[test]
    fn pods_without_gpus_go_with_the_first_node() {
        let mut pods = need(1, 2);
        pods.push(PodNeed {
            pod: "launcher".into(),
            gpus: 0,
        });
        let placement = Placement {
            parts: vec![part(4, 0b1100)],
        };
        let (plan, _) = fit(&pods, &placement, |s| format!("n{}", s.0), |_| 0).unwrap();
        assert_eq!(plan.text(), "p0=n4:2,3;launcher=n4:");
        assert_eq!(
            Plan::parse("launcher=n4:").unwrap().places[0].gpus,
            Vec::<u32>::new()
        );
        assert!(Plan::parse("garbage").is_none());
        assert!(Plan::parse("a=n:x").is_none());
    }
}
