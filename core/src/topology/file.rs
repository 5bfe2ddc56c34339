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

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::{DomainId, Topology, TopologyBuilder, TopologyError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    levels: Option<Vec<String>>,
    #[serde(default)]
    domain: Vec<FileDomain>,
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
            TopologyError::DuplicateName { name } => TopologyError::Parse {
                file: file.to_string(),
                line: line_of(text, span.start),
                message: format!("duplicate name {name:?}"),
            },
            TopologyError::TooManyGpus { name, gpus } => TopologyError::Parse {
                file: file.to_string(),
                line: line_of(text, span.start),
                message: format!("server {name:?} has {gpus} GPUs; at most 64 are supported"),
            },
            other => other,
        };
        fn add(
            b: &mut TopologyBuilder,
            parent: DomainId,
            d: FileDomain,
            at: &dyn Fn(std::ops::Range<usize>, TopologyError) -> TopologyError,
        ) -> Result<(), TopologyError> {
            let span = d.name.span();
            let id = b
                .add_domain(parent, d.name.into_inner())
                .map_err(|e| at(span, e))?;
            for s in d.servers {
                let span = s.name.span();
                b.add_server(id, s.name.into_inner(), s.gpus)
                    .map_err(|e| at(span, e))?;
            }
            for child in d.domain {
                add(b, id, child, at)?;
            }
            Ok(())
        }
        for d in parsed.domain {
            add(&mut b, root, d, &at)?;
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
}
