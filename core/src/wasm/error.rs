//! Why a module could not be loaded or a slot could not be created.

use crate::policy::{PolicyError, Slot};

/// A module refused at load time, or a slot backend that could not start.
/// Every variant names the module and says what was wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WasmError {
    /// The sandbox configuration is unusable (e.g. a zero budget).
    #[error("invalid sandbox configuration: {0}")]
    Sandbox(String),
    /// wasmtime refused the engine configuration.
    #[error("cannot create the Wasm engine: {0}")]
    Engine(String),
    /// The bytes are not WebAssembly at all.
    #[error("module {module} is not WebAssembly (no \\0asm header)")]
    NotWasm {
        /// The module.
        module: String,
    },
    /// A core module where a component is expected.
    #[error(
        "module {module} is a core Wasm module, not a component; build it for \
         wasm32-unknown-unknown and componentize it with wit-component (plugins/artifacts does both)"
    )]
    NotAComponent {
        /// The module.
        module: String,
    },
    /// The component does not validate or compile.
    #[error("module {module} does not compile: {reason}")]
    Compile {
        /// The module.
        module: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component imports something other than the log function.
    #[error("module {module} imports {import}; only gangway:policy/log is allowed")]
    ForbiddenImport {
        /// The module.
        module: String,
        /// The import's full name.
        import: String,
    },
    /// The component implements a version of the contract this host does not speak.
    #[error(
        "module {module} implements {found}; this host speaks gangway:policy@{host} \
         (any 1.x module)"
    )]
    IncompatibleVersion {
        /// The module.
        module: String,
        /// The interface the module exports or imports, with its version.
        found: String,
        /// The host's contract version.
        host: String,
    },
    /// The component exports none of the slot interfaces.
    #[error(
        "module {module} exports no policy slot (expected gangway:policy/fairness, \
         gangway:policy/locality or gangway:policy/gang @1.x); it exports [{exports}]"
    )]
    NoSlots {
        /// The module.
        module: String,
        /// What it does export.
        exports: String,
    },
    /// A slot interface lacks one of its functions.
    #[error("module {module}: interface {interface} lacks the function `{function}`")]
    MissingExport {
        /// The module.
        module: String,
        /// The slot.
        slot: Slot,
        /// The exported interface.
        interface: String,
        /// The missing function.
        function: String,
    },
    /// A slot function has the wrong type.
    #[error("module {module}: {slot} function `{function}` has the wrong type: {reason}")]
    WrongSignature {
        /// The module.
        module: String,
        /// The slot.
        slot: Slot,
        /// The function.
        function: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component's imports cannot be satisfied by this host.
    #[error("module {module} cannot be linked: {reason}")]
    Link {
        /// The module.
        module: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// A slot was asked of a module that does not implement it.
    #[error("module {module} does not implement the {slot} slot (it implements: {implemented})")]
    SlotNotExported {
        /// The module.
        module: String,
        /// The slot asked for.
        slot: Slot,
        /// The slots it does implement.
        implemented: String,
    },
    /// `init` refused the configuration.
    #[error("module {module} refused its {slot} configuration: {message}")]
    Config {
        /// The module.
        module: String,
        /// The slot.
        slot: Slot,
        /// The policy's explanation.
        message: String,
    },
    /// Instantiating the module or running `init` failed (trap, budget, memory cap).
    #[error("module {module} could not start its {slot} slot: {source}")]
    Instantiate {
        /// The module.
        module: String,
        /// The slot.
        slot: Slot,
        /// What went wrong.
        #[source]
        source: PolicyError,
    },
    /// The warm-up call at load time failed.
    #[error("module {module} failed its warm-up call: {source}")]
    WarmUp {
        /// The module.
        module: String,
        /// What went wrong.
        #[source]
        source: PolicyError,
    },
}

impl WasmError {
    /// The module the error is about, if it is about one.
    pub fn module(&self) -> Option<&str> {
        match self {
            WasmError::Sandbox(_) | WasmError::Engine(_) => None,
            WasmError::NotWasm { module }
            | WasmError::NotAComponent { module }
            | WasmError::Compile { module, .. }
            | WasmError::ForbiddenImport { module, .. }
            | WasmError::IncompatibleVersion { module, .. }
            | WasmError::NoSlots { module, .. }
            | WasmError::MissingExport { module, .. }
            | WasmError::WrongSignature { module, .. }
            | WasmError::Link { module, .. }
            | WasmError::SlotNotExported { module, .. }
            | WasmError::Config { module, .. }
            | WasmError::Instantiate { module, .. }
            | WasmError::WarmUp { module, .. } => Some(module),
        }
    }
}
