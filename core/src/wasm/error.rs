//! Why a module could not be loaded or a slot could not be started.

use gangway_plugin_sdk::Slot;

use crate::policy::PolicyError;

/// A module refused at load time, or a slot backend that could not start:
/// which module (if the error is about one) and what was wrong.
///
/// ```
/// use gangway_core::wasm::{PolicyEngine, SandboxConfig, WasmErrorKind};
///
/// let engine = PolicyEngine::new(SandboxConfig::default()).unwrap();
/// let err = engine.load("junk.wasm", b"not wasm").unwrap_err();
/// assert_eq!(err.module.as_deref(), Some("junk.wasm"));
/// assert!(matches!(err.kind, WasmErrorKind::NotWasm));
/// assert_eq!(err.to_string(), "module junk.wasm: not WebAssembly (no \\0asm header)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct WasmError {
    /// The module, if the error is about one.
    pub module: Option<String>,
    /// What was wrong.
    #[source]
    pub kind: WasmErrorKind,
}

impl std::fmt::Display for WasmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.module {
            Some(m) => write!(f, "module {m}: {}", self.kind),
            None => write!(f, "{}", self.kind),
        }
    }
}

impl WasmError {
    /// An error about `module`.
    pub(crate) fn of(module: &str, kind: WasmErrorKind) -> WasmError {
        WasmError {
            module: Some(module.to_string()),
            kind,
        }
    }

    /// An error about no module in particular.
    pub(crate) fn engine(kind: WasmErrorKind) -> WasmError {
        WasmError { module: None, kind }
    }
}

/// What was wrong with a module (or the engine).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WasmErrorKind {
    /// The sandbox configuration is unusable (e.g. a zero budget).
    #[error("invalid sandbox configuration: {0}")]
    Sandbox(String),
    /// wasmtime refused the engine configuration.
    #[error("cannot create the Wasm engine: {0}")]
    Engine(String),
    /// The bytes are not WebAssembly at all.
    #[error("not WebAssembly (no \\0asm header)")]
    NotWasm,
    /// A core module that cannot be made a component: it lacks the
    /// component type the SDK's export macros embed, or does not match it.
    #[error(
        "a core Wasm module that cannot be made a component ({0}); build the policy with \
         gangway-plugin-sdk and its export macro (`export!(Fairness, MyPolicy)`) for \
         wasm32-unknown-unknown, or give a component"
    )]
    NotAComponent(String),
    /// The module exceeds a bound of [`super::LoadLimits`].
    #[error("too large to compile safely: {what} is {found}, the limit is {limit}")]
    TooLarge {
        /// What is too large (`the module`, `function 12's locals`, ...).
        what: String,
        /// Its size.
        found: u64,
        /// The bound.
        limit: u64,
    },
    /// The component does not validate or compile.
    #[error("does not compile: {0}")]
    Compile(String),
    /// Compilation took longer than [`super::LoadLimits::compile_time`].
    #[error("took longer than {0} s to compile")]
    CompileTimeout(u64),
    /// The component imports something other than the log function.
    #[error("imports {0}; only gangway:policy/log is allowed")]
    ForbiddenImport(String),
    /// The component implements a version of the contract this host does not speak.
    #[error(
        "implements {found}; this host speaks gangway:policy@{host} (any 2.x module): rebuild \
         the policy against gangway-plugin-sdk with contract {host} (the SDK's export macros \
         produce it)"
    )]
    IncompatibleVersion {
        /// The interface the module exports or imports, with its version.
        found: String,
        /// The host's contract version.
        host: String,
    },
    /// The component exports none of the slot interfaces.
    #[error(
        "exports no policy slot (expected gangway:policy/<slot>@2.x for a slot of fairness, \
         locality, gang, reclaim, retry, defragment); it exports [{0}]"
    )]
    NoSlots(String),
    /// The component exports one slot twice (e.g. under two versions).
    #[error(
        "exports the {slot} slot twice ({first} and {second}); a module may export each slot once"
    )]
    DuplicateSlot {
        /// The slot.
        slot: Slot,
        /// One export.
        first: String,
        /// The other.
        second: String,
    },
    /// A slot interface lacks one of its functions.
    #[error("interface {interface} lacks the function `{function}`")]
    MissingExport {
        /// The slot.
        slot: Slot,
        /// The exported interface.
        interface: String,
        /// The missing function.
        function: String,
    },
    /// A slot function has the wrong type.
    #[error("{slot} function `{function}` has the wrong type: {reason}")]
    WrongSignature {
        /// The slot.
        slot: Slot,
        /// The function.
        function: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component's imports cannot be satisfied by this host.
    #[error("cannot be linked: {0}")]
    Link(String),
    /// A slot was asked of a module that does not implement it.
    #[error("does not implement the {slot} slot (it implements: {implemented})")]
    SlotNotExported {
        /// The slot asked for.
        slot: Slot,
        /// The slots it does implement.
        implemented: String,
    },
    /// The module's `gangway:config-tree` custom section (the slots that
    /// read their options as a configuration tree) is malformed.
    #[error("has a malformed gangway:config-tree section: it {0}")]
    ConfigTreeSection(String),
    /// `init` refused the configuration, or (for a slot that reads its
    /// options as a configuration tree) the host could not parse it as
    /// TOML.
    #[error("refused its {slot} configuration: {message}")]
    Config {
        /// The slot.
        slot: Slot,
        /// The policy's explanation.
        message: String,
    },
    /// `init` answered a manifest that does not decode.
    #[error("answered a {slot} manifest that does not decode: {reason}")]
    Manifest {
        /// The slot.
        slot: Slot,
        /// What was wrong.
        reason: String,
    },
    /// Instantiating the module or running `init` failed (trap, budget, memory cap).
    #[error("could not start its {slot} slot: {source}")]
    Instantiate {
        /// The slot.
        slot: Slot,
        /// What went wrong.
        #[source]
        source: PolicyError,
    },
    /// The module's file could not be read ([`PolicyEngine::load_file`](crate::wasm::PolicyEngine::load_file)).
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// The warm-up call at load time failed.
    #[error("failed its warm-up call: {0}")]
    WarmUp(#[source] PolicyError),
}
