//! [`Room`] models per GPU type, for reclaim policies that take the types
//! (contract 2.2): a gang runs on one type, so only stops on servers of a
//! type it may use make room for it.

use crate::gpu_types::TypesView;
use crate::ids::{GpuTypeId, ServerId};
use crate::slots::ReclaimView;
use crate::view::ServerState;

use super::Room;

/// A [`Room`] of the reclaim view's servers of each GPU type (and one of
/// all of them), each made when first asked.
///
/// A server's type is the one the host gave ([`TypesView::servers`]);
/// from a host that gave none, that of a running job on it, and a server
/// no typed job runs on is in no type's model (a model may then stop more
/// than the host needs, never less).
///
/// ```
/// use gangway_plugin_sdk::room::TypedRooms;
/// use gangway_plugin_sdk::*;
///
/// let server = |id, free| ServerState { id: ServerId(id), domain: 0, gpus: 8, free };
/// let view = ReclaimView {
///     cluster: ClusterSummary { server_level: Level(1), ..ClusterSummary::default() },
///     servers: vec![server(0, 8), server(1, 4)],
///     ..ReclaimView::default()
/// };
/// let types = TypesView { servers: vec![GpuTypeId(1), GpuTypeId(0)], ..TypesView::default() };
/// let mut rooms = TypedRooms::new(&view, Some(&types));
/// assert_eq!(rooms.of(Some(GpuTypeId(0))).free(ServerId(1)), 4);
/// assert_eq!(rooms.of(Some(GpuTypeId(0))).free(ServerId(0)), 0, "of type 1");
/// assert_eq!(rooms.of(None).free(ServerId(0)), 8);
/// ```
pub struct TypedRooms<'v> {
    view: &'v ReclaimView,
    /// (server, type) of every server whose type is known, by server.
    typed: Vec<(ServerId, GpuTypeId)>,
    /// The models made so far: of all servers first, then of each type by
    /// type index.
    models: Vec<Option<Room>>,
}

impl<'v> TypedRooms<'v> {
    /// The models of `view`'s servers, typed by `types` (`None`: every
    /// server of one type).
    pub fn new(view: &'v ReclaimView, types: Option<&TypesView>) -> TypedRooms<'v> {
        let mut typed = Vec::new();
        if let Some(types) = types {
            if types.servers.is_empty() {
                for j in &view.running {
                    if let Some(t) = types.job(j.id).and_then(|t| t.running) {
                        typed.extend(j.parts.iter().map(|(s, _)| (*s, t)));
                    }
                }
            } else {
                typed.extend(
                    view.servers
                        .iter()
                        .zip(&types.servers)
                        .map(|(s, t)| (s.id, *t)),
                );
            }
        }
        crate::sort::by_key(&mut typed, |(s, t)| [u64::from(s.0), u64::from(t.0), 0]);
        typed.dedup_by_key(|(s, _)| *s);
        TypedRooms {
            view,
            typed,
            models: Vec::new(),
        }
    }

    /// The type of server `id`, if known.
    pub fn server_type(&self, id: ServerId) -> Option<GpuTypeId> {
        self.typed
            .binary_search_by_key(&id, |(s, _)| *s)
            .ok()
            .and_then(|i| self.typed.get(i))
            .map(|(_, t)| *t)
    }

    /// The model of the servers of type `t` (of all servers for `None`):
    /// servers of other types are in it with no free GPUs.
    pub fn of(&mut self, t: Option<GpuTypeId>) -> &mut Room {
        let at = t.map_or(0, |t| t.index() + 1);
        if self.models.len() <= at {
            self.models.resize_with(at + 1, || None);
        }
        let view = self.view;
        let servers: Option<Vec<ServerState>> = match &self.models[at] {
            Some(_) => None,
            None => Some(
                view.servers
                    .iter()
                    .map(|s| ServerState {
                        free: if t.is_none_or(|t| self.server_type(s.id) == Some(t)) {
                            s.free
                        } else {
                            0
                        },
                        ..*s
                    })
                    .collect(),
            ),
        };
        let model = &mut self.models[at];
        model.get_or_insert_with(|| {
            Room::new(&servers.unwrap_or_default(), view.cluster.server_level)
        })
    }
}
