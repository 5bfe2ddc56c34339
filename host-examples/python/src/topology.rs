//! `Topology`, `TopologyBuilder` and `Server`: clusters from a machine list, a
//! topology file, or built in code.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gangway_core::{DomainId, RackGrouping, Topology, TopologyBuilder};
use gangway_plugin_sdk::Level;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;

/// An immutable cluster topology: cluster > racks > servers > GPUs (or more
/// levels). Build one with `uniform`, `from_machine_list`, `from_file`,
/// `from_toml`, `from_racks` or a `TopologyBuilder`.
#[pyclass(frozen, name = "Topology", module = "gangway")]
#[derive(Clone)]
pub(crate) struct PyTopology {
    pub(crate) inner: Topology,
}

/// One server of a topology.
#[pyclass(frozen, get_all, name = "Server", module = "gangway")]
#[derive(Clone)]
pub(crate) struct PyServer {
    /// Its index in the topology (what `Scheduler.server_down` also accepts).
    id: u32,
    /// Its name, unique in the topology.
    name: String,
    /// Its GPUs.
    gpus: u32,
    /// The name of its rack (the domain one level below the cluster), if the
    /// topology has racks.
    rack: Option<String>,
    /// Its enclosing domains from the cluster down to its direct parent.
    domains: Vec<String>,
    /// The type of its GPUs (`gpu` on a topology without types).
    gpu_type: String,
}

#[pymethods]
impl PyServer {
    fn __repr__(&self) -> String {
        format!(
            "Server(id={}, name={:?}, gpus={}, rack={:?})",
            self.id, self.name, self.gpus, self.rack
        )
    }
}

fn grouping(name: &str, rack_size: u32) -> PyResult<RackGrouping> {
    RackGrouping::named(name, rack_size).ok_or_else(|| {
        PyValueError::new_err(format!(
            "rack_grouping {name:?}: expected one of {:?}",
            RackGrouping::NAMES
        ))
    })
}

impl PyTopology {
    fn server_info(&self, id: u32, s: &gangway_core::Server) -> PyServer {
        let domains = &self.inner.domains();
        let name_of = |d: &DomainId| {
            domains
                .get(d.0 as usize)
                .map(|d| d.name.clone())
                .unwrap_or_default()
        };
        let rack = s
            .ancestors
            .iter()
            .find(|d| domains.get(d.0 as usize).map(|d| d.level) == Some(Level(1)))
            .map(name_of);
        PyServer {
            id,
            name: s.name.clone(),
            gpus: s.gpus,
            rack,
            domains: s.ancestors.iter().map(name_of).collect(),
            gpu_type: self
                .inner
                .gpu_types()
                .get(s.gpu_type.index())
                .map(|t| t.name.clone())
                .unwrap_or_default(),
        }
    }
}

#[pymethods]
impl PyTopology {
    /// `racks` racks of `servers_per_rack` servers with `gpus_per_server`
    /// GPUs each; servers are named `r{rack}-s{server}`.
    #[staticmethod]
    fn uniform(racks: u32, servers_per_rack: u32, gpus_per_server: u32) -> PyResult<Self> {
        Topology::uniform(racks, servers_per_rack, gpus_per_server)
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// A Philly machine list (CSV, the official or the revised format),
    /// grouped into racks by `rack_grouping` (`"same-sku"` or
    /// `"consecutive"`) of `rack_size` servers, as `replay --machines` does.
    #[staticmethod]
    #[pyo3(signature = (path, rack_grouping = "same-sku", rack_size = 32))]
    fn from_machine_list(
        path: std::path::PathBuf,
        rack_grouping: &str,
        rack_size: u32,
    ) -> PyResult<Self> {
        let g = grouping(rack_grouping, rack_size)?;
        Topology::from_machine_list(&path, g)
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// Like `from_machine_list`, from text; `name` names it in errors.
    #[staticmethod]
    #[pyo3(signature = (text, rack_grouping = "same-sku", rack_size = 32, name = "<machine list>"))]
    fn from_machine_list_text(
        text: &str,
        rack_grouping: &str,
        rack_size: u32,
        name: &str,
    ) -> PyResult<Self> {
        let g = grouping(rack_grouping, rack_size)?;
        Topology::from_machine_list_str(name, text, g)
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// A topology file (TOML naming domains and servers), as `replay --topology`.
    #[staticmethod]
    fn from_file(path: std::path::PathBuf) -> PyResult<Self> {
        Topology::from_file(&path)
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// Topology TOML from text; `name` names it in errors.
    #[staticmethod]
    #[pyo3(signature = (text, name = "<topology>"))]
    fn from_toml(text: &str, name: &str) -> PyResult<Self> {
        Topology::from_toml_str(name, text)
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// Racks of servers given in code: `{rack: {server: gpus}}` or
    /// `[(rack, [(server, gpus), ...]), ...]`, in order. A server given as
    /// `(gpus, gpu_type)` (in a dict) or `(server, gpus, gpu_type)` has GPUs
    /// of that type; `gpu_types` (`{name: memory_gb}`) gives types their
    /// memory (a type it does not list has 0: not known). Servers without a
    /// type are of the type `gpu`.
    #[staticmethod]
    #[pyo3(signature = (racks, gpu_types = None))]
    fn from_racks(
        racks: &Bound<'_, PyAny>,
        gpu_types: Option<BTreeMap<String, u32>>,
    ) -> PyResult<Self> {
        let racks: Vec<(String, Bound<'_, PyAny>)> = match racks.cast::<PyDict>() {
            Ok(d) => d.items().extract()?,
            Err(_) => racks.extract()?,
        };
        let memory = gpu_types.unwrap_or_default();
        let mut b = TopologyBuilder::new();
        let root = b.root();
        for (rack, servers) in racks {
            let r = b.add_domain(root, rack).map_err(errors::topology)?;
            for (name, gpus, gpu_type) in rack_servers(&servers)? {
                match gpu_type {
                    Some(t) => {
                        let id = match b.gpu_type(&t) {
                            Some(id) => id,
                            None => {
                                let gb = memory.get(&t).copied().unwrap_or(0);
                                b.add_gpu_type(t, gb).map_err(errors::topology)?
                            }
                        };
                        b.add_server_of_type(r, name, gpus, id)
                    }
                    None => b.add_server(r, name, gpus),
                }
                .map_err(errors::topology)?;
            }
        }
        b.build()
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }

    /// The GPU types, `(name, memory_gb)`, in id order (one, `gpu`, on a
    /// topology built without types).
    #[getter]
    fn gpu_types(&self) -> Vec<(String, u32)> {
        self.inner
            .gpu_types()
            .iter()
            .map(|t| (t.name.clone(), t.memory_gb))
            .collect()
    }

    /// Every server, in id order.
    #[getter]
    fn servers(&self) -> Vec<PyServer> {
        self.inner
            .servers()
            .iter()
            .enumerate()
            .map(|(i, s)| self.server_info(u32::try_from(i).unwrap_or(u32::MAX), s))
            .collect()
    }

    /// The server called `name`, or `None`.
    fn server(&self, name: &str) -> Option<PyServer> {
        let id = self.inner.server_by_name(name)?;
        let s = self.inner.server(id)?;
        Some(self.server_info(id.0, s))
    }

    /// Names of the racks (domains one level below the cluster), in id order.
    #[getter]
    fn racks(&self) -> Vec<String> {
        self.inner
            .domains_at(Level(1))
            .iter()
            .filter_map(|d| self.inner.domains().get(d.0 as usize))
            .map(|d| d.name.clone())
            .collect()
    }

    /// Names of the levels from the root down to the servers.
    #[getter]
    fn level_names(&self) -> Vec<String> {
        self.inner.level_names().to_vec()
    }

    /// GPUs in the whole cluster.
    #[getter]
    fn total_gpus(&self) -> u32 {
        self.inner.total_gpus()
    }

    fn __len__(&self) -> usize {
        self.inner.servers().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Topology({} servers, {} GPUs, {} racks)",
            self.inner.servers().len(),
            self.inner.total_gpus(),
            self.inner.domains_at(Level(1)).len()
        )
    }
}

/// Builds a topology domain by domain and server by server, for any number
/// of levels: `root` is the cluster, `add_domain(parent, name)` adds a domain
/// (a rack, a pod, ...) and returns its id, `add_server(parent, name, gpus)`
/// a server, and `build()` checks the shape and returns the `Topology`.
#[pyclass(frozen, name = "TopologyBuilder", module = "gangway")]
pub(crate) struct PyTopologyBuilder {
    inner: Mutex<Option<TopologyBuilder>>,
}

impl PyTopologyBuilder {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut TopologyBuilder) -> Result<T, gangway_core::TopologyError>,
    ) -> PyResult<T> {
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| errors::TopologyError::new_err("the builder was poisoned"))?;
        let b = guard
            .as_mut()
            .ok_or_else(|| errors::TopologyError::new_err("this builder was already built"))?;
        f(b).map_err(errors::topology)
    }
}

#[pymethods]
impl PyTopologyBuilder {
    /// An empty builder: one root domain `cluster`, levels cluster > rack > server.
    #[new]
    fn new() -> Self {
        PyTopologyBuilder {
            inner: Mutex::new(Some(TopologyBuilder::new())),
        }
    }

    /// The root domain's id (the cluster).
    #[getter]
    fn root(&self) -> PyResult<u32> {
        self.with(|b| Ok(b.root().0))
    }

    /// Names the levels from the root down to the servers.
    fn level_names(&self, names: Vec<String>) -> PyResult<()> {
        self.with(|b| {
            b.level_names(names);
            Ok(())
        })
    }

    /// Adds a domain under `parent` and returns its id.
    fn add_domain(&self, parent: u32, name: String) -> PyResult<u32> {
        self.with(|b| b.add_domain(DomainId(parent), name).map(|d| d.0))
    }

    /// Adds a server with `gpus` GPUs under `parent` and returns its id.
    fn add_server(&self, parent: u32, name: String, gpus: u32) -> PyResult<u32> {
        self.with(|b| b.add_server(DomainId(parent), name, gpus).map(|s| s.0))
    }

    /// Checks the shape and returns the topology (the builder is used up).
    fn build(&self) -> PyResult<PyTopology> {
        let b = self
            .inner
            .lock()
            .map_err(|_| errors::TopologyError::new_err("the builder was poisoned"))?
            .take()
            .ok_or_else(|| errors::TopologyError::new_err("this builder was already built"))?;
        b.build()
            .map(|inner| PyTopology { inner })
            .map_err(errors::topology)
    }
}

/// A rack's servers as `from_racks` takes them: `{server: gpus}`,
/// `{server: (gpus, type)}`, `[(server, gpus)]` or `[(server, gpus, type)]`.
fn rack_servers(servers: &Bound<'_, PyAny>) -> PyResult<Vec<(String, u32, Option<String>)>> {
    let entries: Vec<Bound<'_, PyAny>> = match servers.cast::<PyDict>() {
        Ok(d) => d
            .items()
            .iter()
            .map(|item| {
                let (name, what): (String, Bound<'_, PyAny>) = item.extract()?;
                let (gpus, t): (u32, Option<String>) = match what.extract::<u32>() {
                    Ok(g) => (g, None),
                    Err(_) => {
                        let (g, t): (u32, String) = what.extract()?;
                        (g, Some(t))
                    }
                };
                Ok((name, gpus, t).into_pyobject(servers.py())?.into_any())
            })
            .collect::<PyResult<_>>()?,
        Err(_) => servers.extract()?,
    };
    entries
        .iter()
        .map(|e| match e.extract::<(String, u32)>() {
            Ok((n, g)) => Ok((n, g, None)),
            Err(_) => e.extract::<(String, u32, Option<String>)>(),
        })
        .collect()
}
