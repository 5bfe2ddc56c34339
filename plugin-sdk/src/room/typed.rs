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
/// A server's type is the one the host gave ([`TypesView::servers`]: a
/// host gives them to every reclaim policy built with this SDK that takes
/// the types). A server whose type is not given has no free GPUs in any
/// type's model (a model may then stop more than the host needs, never
/// less).
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
    /// The type of each server of the view, in its order (`None`: not
    /// known).
    typed: Vec<Option<GpuTypeId>>,
    /// The models made so far: of all servers first, then of each type by
    /// type index.
    models: Vec<Option<Room>>,
}

impl<'v> TypedRooms<'v> {
    /// The models of `view`'s servers, typed by `types` (`None`: every
    /// server of one type).
    pub fn new(view: &'v ReclaimView, types: Option<&TypesView>) -> TypedRooms<'v> {
        let given = types.map_or(&[][..], |t| &t.servers);
        let typed = view
            .servers
            .iter()
            .zip(given)
            .map(|(_, t)| Some(*t))
            .collect();
        TypedRooms {
            view,
            typed,
            models: Vec::new(),
        }
    }

    /// The type of server `id`, if known.
    pub fn server_type(&self, id: ServerId) -> Option<GpuTypeId> {
        let at = self.view.servers.binary_search_by_key(&id, |s| s.id).ok()?;
        self.typed.get(at).copied().flatten()
    }

    /// The model of the servers of type `t` (of all servers for `None`):
    /// servers of other types are in it with no free GPUs.
    pub fn of(&mut self, t: Option<GpuTypeId>) -> &mut Room {
        let at = t.map_or(0, |t| t.index() + 1);
        if self.models.len() <= at {
            self.models.resize_with(at + 1, || None);
        }
        let (view, typed) = (self.view, &self.typed);
        self.models[at].get_or_insert_with(|| {
            let Some(t) = t else {
                return Room::new(&view.servers, view.cluster.server_level);
            };
            let servers: Vec<ServerState> = view
                .servers
                .iter()
                .enumerate()
                .map(|(i, s)| ServerState {
                    free: if typed.get(i).copied().flatten() == Some(t) {
                        s.free
                    } else {
                        0
                    },
                    ..*s
                })
                .collect();
            Room::new(&servers, view.cluster.server_level)
        })
    }
}
