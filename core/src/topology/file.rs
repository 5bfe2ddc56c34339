//! Loading a topology file (TOML) that names domains and servers explicitly.
//!
//! ```toml
//! levels = ["cluster", "rack", "server"]   # optional
//!
//! [[domain]]
//! name = "rack-a"
//! servers = [ { name = "m0", gpus = 8 }, { name = "m1", gpus = 8 } ]
//!
//! [[domain]]
//! name = "rack-b"
//! servers = [ { name = "m2", gpus = 4 } ]
//! ```
//!
//! A domain holds either `servers` or nested `domain` tables (for more levels,
//! e.g. pods of racks); all servers must end at the same depth.
//!
//! GPU types are declared once and named by servers (a server without a
//! `type` has the default type, `gpu`, if no type is declared; once types
//! are declared every server names one):
//!
//! ```toml
//! [[gpu_type]]
//! name = "v100"
//! memory_gb = 32
//!
//! [[domain]]
//! name = "rack-a"
//! servers = [ { name = "m0", gpus = 8, type = "v100" } ]
//! ```

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::{DomainId, Topology, TopologyBuilder, TopologyError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    levels: Option<Vec<String>>,
    #[serde(default)]
    gpu_type: Vec<FileGpuType>,
    #[serde(default)]
    domain: Vec<FileDomain>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGpuType {
    name: Spanned<String>,
    #[serde(default)]
    memory_gb: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDomain {
    name: Spanned<String>,
    #[serde(default)]
    domain: Vec<FileDomain>,
    #[serde(default)]
    servers: Vec<FileServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    name: Spanned<String>,
    gpus: u32,
    #[serde(rename = "type")]
    gpu_type: Option<String>,
}

/// Adds file domain `d` under `parent`, with its servers and the domains
/// below it; `typed` says the file declares GPU types (then every server
/// names one). `at` turns an error into one naming the file's line.
fn add_domain(
    b: &mut TopologyBuilder,
    parent: DomainId,
    d: FileDomain,
    at: &dyn Fn(std::ops::Range<usize>, TopologyError) -> TopologyError,
    typed: bool,
) -> Result<(), TopologyError> {
    let span = d.name.span();
    let id = b
        .add_domain(parent, d.name.into_inner())
        .map_err(|e| at(span, e))?;
    for s in d.servers {
        let span = s.name.span();
        let name = s.name.into_inner();
        let unknown = |server: String, what: String| TopologyError::UnknownGpuType {
            server,
            gpu_type: what,
        };
        let added = match (&s.gpu_type, typed) {
            (None, false) => b.add_server(id, name, s.gpus),
            (Some(t), _) => match b.gpu_type(t) {
                Some(t) => b.add_server_of_type(id, name, s.gpus, t),
                None => Err(unknown(
                    name,
                    format!("{t:?} (declare it in a [[gpu_type]] table)"),
                )),
            },
            (None, true) => Err(unknown(
                name,
                "(none given; once types are declared every server names one)".into(),
            )),
        };
        added.map_err(|e| at(span, e))?;
    }
    for child in d.domain {
        add_domain(b, id, child, at, typed)?;
    }
    Ok(())
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |t| t.matches('\n').count()) + 1
}

impl Topology {
    /// Loads a topology file (TOML, format in this module's docs).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Topology, TopologyError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
            file: file.clone(),
            source,
        })?;
        Topology::from_toml_str(&file, &text)
    }

    /// Parses topology TOML from memory; `file` names it in errors.
    ///
    /// ```
    /// use gangway_core::Topology;
    /// let text = r#"
    /// [[domain]]
    /// name = "rack-a"
    /// servers = [ { name = "m0", gpus = 8 }, { name = "m1", gpus = 8 } ]
    /// "#;
    /// let topo = Topology::from_toml_str("topo.toml", text).unwrap();
    /// assert_eq!(topo.total_gpus(), 16);
    /// ```
    pub fn from_toml_str(file: &str, text: &str) -> Result<Topology, TopologyError> {
        let parsed: FileTopology = toml::from_str(text).map_err(|e| TopologyError::Parse {
            file: file.to_string(),
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            message: e.message().to_string(),
        })?;
        let mut b = TopologyBuilder::new();
        if let Some(levels) = parsed.levels {
            b.level_names(levels);
        }
        let root = b.root();
        let at = |span: std::ops::Range<usize>, e: TopologyError| match e {
            TopologyError::DuplicateName { .. }
            | TopologyError::TooManyGpus { .. }
            | TopologyError::DuplicateGpuType { .. }
            | TopologyError::TooManyGpuTypes
            | TopologyError::UnknownGpuType { .. } => TopologyError::Parse {
                file: file.to_string(),
                line: line_of(text, span.start),
                message: e.to_string(),
            },
            other => other,
        };
        let typed = !parsed.gpu_type.is_empty();
        for t in parsed.gpu_type {
            let span = t.name.span();
            b.add_gpu_type(t.name.into_inner(), t.memory_gb)
                .map_err(|e| at(span, e))?;
        }
        for d in parsed.domain {
            add_domain(&mut b, root, d, &at, typed)?;
        }
        b.build().map_err(|e| match e {
            TopologyError::Empty | TopologyError::UnevenDepth { .. } => TopologyError::Parse {
                file: file.to_string(),
                line: 1,
                message: e.to_string(),
            },
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_levels_load() {
        let text = r#"
levels = ["cluster", "pod", "rack", "server"]
[[domain]]
name = "pod0"
  [[domain.domain]]
  name = "r0"
  servers = [ { name = "a", gpus = 8 } ]
  [[domain.domain]]
  name = "r1"
  servers = [ { name = "b", gpus = 4 } ]
"#;
        let topo = Topology::from_toml_str("t.toml", text).unwrap();
        assert_eq!(topo.level_names(), ["cluster", "pod", "rack", "server"]);
        assert_eq!(topo.total_gpus(), 12);
    }

    #[test]
    fn errors_name_the_line() {
        let dup = "[[domain]]\nname = \"r0\"\nservers = [\n { name = \"a\", gpus = 8 },\n { name = \"a\", gpus = 8 },\n]\n";
        let err = Topology::from_toml_str("t.toml", dup)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.toml:5: duplicate name \"a\"");
        let bad = "[[domain]]\nname = \"r0\"\nservers = [ { name = \"a\", gpus = -1 } ]\n";
        let err = Topology::from_toml_str("t.toml", bad)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3: "), "{err}");
        let unknown = "[[domain]]\nname = \"r0\"\nracks = 3\n";
        let err = Topology::from_toml_str("t.toml", unknown)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3: unknown field"), "{err}");
        let empty = Topology::from_toml_str("t.toml", "")
            .unwrap_err()
            .to_string();
        assert_eq!(empty, "t.toml:1: the topology has no servers");
    }

    #[test]
    fn gpu_types_load_and_servers_must_name_declared_ones() {
        let text = r#"
[[gpu_type]]
name = "v100"
memory_gb = 32
[[gpu_type]]
name = "k80"
memory_gb = 12
[[domain]]
name = "r0"
servers = [ { name = "a", gpus = 8, type = "v100" }, { name = "b", gpus = 4, type = "k80" } ]
"#;
        let topo = Topology::from_toml_str("t.toml", text).unwrap();
        assert!(topo.is_heterogeneous());
        assert_eq!(topo.gpu_types()[0].memory_gb, 32);
        let k80 = topo.gpu_type_by_name("k80").unwrap();
        assert_eq!(topo.servers()[1].gpu_type, k80);
        assert_eq!(topo.type_gpus(k80), 4);
        let bad = text.replace("type = \"k80\"", "type = \"a100\"");
        let err = Topology::from_toml_str("t.toml", &bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:10: server \"b\": unknown GPU type \"a100\""),
            "{err}"
        );
        let untyped = text.replace(", type = \"k80\"", "");
        let err = Topology::from_toml_str("t.toml", &untyped)
            .unwrap_err()
            .to_string();
        assert!(err.contains("once types are declared"), "{err}");
        let twice = text.replace("\"k80\"\nmemory", "\"v100\"\nmemory");
        let err = Topology::from_toml_str("t.toml", &twice)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "t.toml:6: GPU type \"v100\" is declared twice");
        // Without types: one default type, unknown memory.
        let plain = Topology::uniform(1, 2, 8).unwrap();
        assert!(!plain.is_heterogeneous());
        assert_eq!(plain.gpu_types()[0].name, crate::DEFAULT_GPU_TYPE);
    }
}
