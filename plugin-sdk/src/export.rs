//! The one-line export macro, [`export!`](crate::export), for every slot:
//! `gangway_plugin_sdk::export!(Fairness, MyPolicy);`.
//!
//! On `wasm32` it runs wit-bindgen for the slot's buffered world of
//! `gangway:policy@2.1.0` (the slot's interface and its `-buffered` twin)
//! inside the calling crate and exports the given type through the SDK's
//! generic guest glue (see the [contract page](crate::contract) for the
//! ABI). On every other target it only checks at compile time that the
//! type implements the slot trait and [`crate::Configure`], so a policy
//! crate keeps one unconditional line and still builds natively for its
//! tests. A crate may export several slots (one line each); each slot then
//! gets its own instance.
//!
//! Each slot's folder holds the WIT names of its glue (its interface, its
//! buffered twin and world, its per-round function), in a hidden macro
//! re-exported under the slot's marker name, which `export!` calls:
//! `export!(Fairness, P)` is `gangway_plugin_sdk::Fairness!(P)`.
//!
//! The generated code refers to this crate as `gangway_plugin_sdk`, so a
//! policy crate must depend on it under that name (not renamed).

/// Compile-time check behind the export macros on native targets.
#[doc(hidden)]
pub const fn assert_exportable<S: crate::SlotContract, P: crate::Policy<S> + crate::Configure>() {}

/// Exports a policy type of slot `S` (its marker type: `Fairness`,
/// `Locality`, `Gang`, `Reclaim`, `Retry` or `Defragment`) as the slot's
/// `gangway:policy` interface of a Wasm component. The type implements the
/// slot's trait ([`FairnessPolicy`](crate::FairnessPolicy), ...) and
/// [`Configure`](crate::Configure).
///
/// Use it at the root of a `cdylib` policy crate, one line per slot:
///
/// ```
/// use gangway_plugin_sdk::*;
///
/// /// Oldest first, all eligible.
/// pub struct Fifo;
/// impl FairnessPolicy for Fifo {
///     fn order(&self, view: &FairnessView) -> FairnessDecision {
///         FairnessDecision {
///             order: view.jobs.iter().map(|j| Ranked { job: j.id, eligible: true }).collect(),
///         }
///     }
/// }
/// impl Configure for Fifo {
///     fn from_config(_: &[u8]) -> Result<Self, ConfigError> { Ok(Fifo) }
/// }
///
/// gangway_plugin_sdk::export!(Fairness, Fifo);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export {
    ($slot:ident, $policy:ty) => {
        $crate::$slot!($policy);
    };
}

/// The shared body of the export macros on native targets: a compile-time
/// check only.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export {
    ($alias:ident, $module:ident, $world:tt, $policy:ty, $iface:ident, $buffered:ident, $call:ident, $slot:ty) => {
        const _: () = $crate::export::assert_exportable::<$slot, $policy>();
    };
}

/// The shared body of the export macros on wasm32: generated bindings for
/// one world, a per-instance cell holding the configured policy and one for
/// the decoded view, and the glue from the WIT functions to the generic
/// guest code.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export {
    ($alias:ident, $module:ident, $world:tt, $policy:ty, $iface:ident, $buffered:ident, $call:ident, $slot:ty) => {
        #[doc(hidden)]
        type $alias = $policy;

        /// Generated bindings for one `gangway:policy` world (wit-bindgen).
        #[doc(hidden)]
        #[allow(
            unsafe_code,
            missing_docs,
            unreachable_pub,
            dead_code,
            unused_imports,
            clippy::all,
            clippy::pedantic
        )]
        mod $module {
            $crate::__gangway_generate!($world);

            ::std::thread_local! {
                static POLICY: ::core::cell::RefCell<::core::option::Option<super::$alias>> =
                    const { ::core::cell::RefCell::new(::core::option::Option::None) };
                static VIEW: ::core::cell::RefCell<<$slot as $crate::SlotContract>::View> =
                    ::core::cell::RefCell::new(::core::default::Default::default());
                static VIEW_BYTES: ::core::cell::RefCell<::std::vec::Vec<u8>> =
                    const { ::core::cell::RefCell::new(::std::vec::Vec::new()) };
            }

            /// How many bytes this slot writes into the module's
            /// `gangway:config-tree` section.
            const CONFIG_TREE_LEN: usize = $crate::guest::config_tree_len::<$slot, super::$alias>();

            /// The slot's name and a newline if its policy reads its options
            /// as a configuration tree, nothing if it reads text: the host
            /// reads the section to know which form to hand `init`.
            #[used]
            #[unsafe(link_section = "gangway:config-tree")]
            static CONFIG_TREE: [u8; CONFIG_TREE_LEN] =
                $crate::guest::config_tree_entry::<$slot, super::$alias, CONFIG_TREE_LEN>();

            struct Export;

            impl exports::gangway::policy::$iface::Guest for Export {
                fn init(
                    config: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::guest::install_log(log_bridge);
                    $crate::guest::init::<$slot, super::$alias>(&POLICY, &config)
                }

                fn $call(
                    view: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::guest::call::<$slot, super::$alias>(&POLICY, &VIEW, &view)
                }
            }

            impl exports::gangway::policy::$buffered::Guest for Export {
                fn view_buffer(len: u32) -> u32 {
                    $crate::guest::view_buffer(&VIEW_BYTES, len)
                }

                fn call(len: u32) -> u64 {
                    $crate::guest::call_buffered::<$slot, super::$alias>(
                        &POLICY,
                        &VIEW,
                        &VIEW_BYTES,
                        len,
                    )
                }
            }

            fn log_bridge(level: $crate::LogLevel, message: &str) {
                use gangway::policy::log::{Level, log};
                let level = match level {
                    $crate::LogLevel::Error => Level::Error,
                    $crate::LogLevel::Warn => Level::Warn,
                    $crate::LogLevel::Info => Level::Info,
                    $crate::LogLevel::Debug => Level::Debug,
                };
                log(level, message);
            }

            export!(Export);
        }
    };
}
