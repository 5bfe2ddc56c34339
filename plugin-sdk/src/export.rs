//! The one-line export macros: `export_fairness!`, `export_locality!` and
//! `export_gang!`.
//!
//! On `wasm32` each macro runs wit-bindgen for the slot's world of
//! `gangway:policy@1.0.0` inside the calling crate and exports the given type
//! through it (see the `guest` module, compiled for wasm32 only, for the glue,
//! and the [contract page](crate::contract) for the ABI).
//! On every other target it only checks at compile time that the type
//! implements the slot trait and [`crate::Configure`], so a policy crate can
//! keep one unconditional line and still build natively for its tests.
//!
//! The generated code refers to this crate as `gangway_plugin_sdk`, so a
//! policy crate must depend on it under that name (not renamed).

/// Exports a [`FairnessPolicy`](crate::FairnessPolicy) + [`Configure`](crate::Configure)
/// type as the `gangway:policy/fairness` interface of a Wasm component.
///
/// Use it once, at the root of a `cdylib` policy crate:
///
/// ```
/// use gangway_plugin_sdk::*;
///
/// /// Oldest first, all eligible.
/// pub struct Fifo;
/// impl FairnessPolicy for Fifo {
///     fn order(&self, view: &RoundView) -> FairnessDecision {
///         FairnessDecision {
///             order: view.jobs.iter().map(|j| Ranked { job: j.id, eligible: true }).collect(),
///         }
///     }
/// }
/// impl Configure for Fifo {
///     fn from_config(_: &[u8]) -> Result<Self, ConfigError> { Ok(Fifo) }
/// }
///
/// gangway_plugin_sdk::export_fairness!(Fifo);
/// # fn main() {}
/// ```
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_fairness {
    ($policy:ty) => {
        const _: () = $crate::export::assert_fairness::<$policy>();
    };
}

/// Exports a [`LocalityPolicy`](crate::LocalityPolicy) + [`Configure`](crate::Configure)
/// type as the `gangway:policy/locality` interface of a Wasm component.
/// See [`export_fairness!`] for usage.
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_locality {
    ($policy:ty) => {
        const _: () = $crate::export::assert_locality::<$policy>();
    };
}

/// Exports a [`GangPolicy`](crate::GangPolicy) + [`Configure`](crate::Configure)
/// type as the `gangway:policy/gang` interface of a Wasm component.
/// See [`export_fairness!`] for usage.
#[cfg(not(target_arch = "wasm32"))]
#[macro_export]
macro_rules! export_gang {
    ($policy:ty) => {
        const _: () = $crate::export::assert_gang::<$policy>();
    };
}

/// Compile-time check behind `export_fairness!` on native targets.
#[doc(hidden)]
pub const fn assert_fairness<P: crate::FairnessPolicy + crate::Configure + 'static>() {}

/// Compile-time check behind `export_locality!` on native targets.
#[doc(hidden)]
pub const fn assert_locality<P: crate::LocalityPolicy + crate::Configure + 'static>() {}

/// Compile-time check behind `export_gang!` on native targets.
#[doc(hidden)]
pub const fn assert_gang<P: crate::GangPolicy + crate::Configure + 'static>() {}

/// Exports a fairness policy type (see the native documentation).
#[cfg(target_arch = "wasm32")]
#[macro_export]
macro_rules! export_fairness {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayFairnessPolicy,
            __gangway_fairness_export,
            "fairness-policy",
            $policy,
            fairness,
            order,
            fairness
        );
    };
}

/// Exports a locality policy type (see the native documentation).
#[cfg(target_arch = "wasm32")]
#[macro_export]
macro_rules! export_locality {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayLocalityPolicy,
            __gangway_locality_export,
            "locality-policy",
            $policy,
            locality,
            spread,
            locality
        );
    };
}

/// Exports a gang policy type (see the native documentation).
#[cfg(target_arch = "wasm32")]
#[macro_export]
macro_rules! export_gang {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayGangPolicy,
            __gangway_gang_export,
            "gang-policy",
            $policy,
            gang,
            on_blocked,
            gang
        );
    };
}

/// The shared body of the wasm32 export macros: generated bindings for one
/// world, a per-instance slot holding the configured policy, and the glue
/// from the WIT functions to [`crate::guest`].
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_export {
    ($alias:ident, $module:ident, $world:tt, $policy:ty, $iface:ident, $call:ident, $helper:ident) => {
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
            }

            struct Export;

            impl exports::gangway::policy::$iface::Guest for Export {
                fn init(
                    config: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::guest::install_log(log_bridge);
                    $crate::guest::init(&POLICY, &config)
                }

                fn $call(
                    view: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::guest::$helper(&POLICY, &view)
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
