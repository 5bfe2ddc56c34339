//! The one nested component shape the direct path follows: a component
//! that only re-exports functions it imports (wit-component nests such
//! components to give exported instances their types). It holds no code,
//! so instantiating it runs nothing.

use std::collections::HashMap;

use wasmparser::{CanonicalFunction, ComponentAlias, ComponentExternalKind, ComponentTypeRef};
use wasmparser::{Parser, Payload};

use super::at;

/// What a nested component re-exports: for each exported function, the
/// name of the imported function it is. `None` for any other shape,
/// including any component holding core modules, core or component
/// instances, nested components, a start function or a canonical function
/// other than a lift.
pub(super) fn reexports(bytes: &[u8]) -> Option<HashMap<String, String>> {
    let mut funcs: Vec<Option<String>> = Vec::new();
    let mut out = HashMap::new();
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            Payload::ModuleSection { .. }
            | Payload::ComponentSection { .. }
            | Payload::InstanceSection(_)
            | Payload::ComponentInstanceSection(_)
            | Payload::ComponentStartSection { .. } => return None,
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    let import = import.ok()?;
                    if let ComponentTypeRef::Func(_) = import.ty {
                        funcs.push(Some(import.name.name.to_string()));
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    match alias.ok()? {
                        // No instances here to alias from.
                        ComponentAlias::InstanceExport { .. }
                        | ComponentAlias::CoreInstanceExport { .. } => return None,
                        ComponentAlias::Outer { .. } => {}
                    }
                }
            }
            Payload::ComponentCanonicalSection(reader) => {
                for canon in reader {
                    match canon.ok()? {
                        CanonicalFunction::Lift { .. } => funcs.push(None),
                        _ => return None,
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                for export in reader {
                    let export = export.ok()?;
                    if export.kind == ComponentExternalKind::Func {
                        let import = at(&funcs, export.index).cloned().flatten();
                        funcs.push(import.clone());
                        if let Some(import) = import {
                            out.insert(export.name.name.to_string(), import);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Some(out)
}
