//! The one-line export macros, one per slot: `export_fairness!`,
//! `export_locality!`, `export_gang!`, `export_reclaim!`, `export_retry!`
//! and `export_defragment!`.
//!
//! On `wasm32` each macro runs wit-bindgen for the slot's buffered world of
//! `gangway:policy@2.1.0` (the slot's interface and its `-buffered` twin)
//! inside the calling crate and exports the given type through the SDK's
//! generic guest glue (see the [contract
//! page](crate::contract) for the ABI). On every other target it only checks
//! at compile time that the type implements the slot trait and
//! [`crate::Configure`], so a policy crate keeps one unconditional line and
//! still builds natively for its tests. A crate may export several slots
//! (one macro each); each slot then gets its own instance.
//!
//! The generated code refers to this crate as `gangway_plugin_sdk`, so a
//! policy crate must depend on it under that name (not renamed).

/// Compile-time check behind the export macros on native targets.
#[doc(hidden)]
pub const fn assert_exportable<S: crate::SlotContract, P: crate::Policy<S> + crate::Configure>() {}

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
/// gangway_plugin_sdk::export_fairness!(Fifo);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_fairness {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayFairness,
            __gangway_fairness,
            "fairness-policy-buffered",
            $policy,
            fairness,
            fairness_buffered,
            order,
            $crate::Fairness
        );
    };
}

/// Exports a [`LocalityPolicy`](crate::LocalityPolicy) type as the
/// `gangway:policy/locality` interface. See [`export_fairness!`] for usage.
#[macro_export]
macro_rules! export_locality {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayLocality,
            __gangway_locality,
            "locality-policy-buffered",
            $policy,
            locality,
            locality_buffered,
            spread,
            $crate::Locality
        );
    };
}

/// Exports a [`GangPolicy`](crate::GangPolicy) type as the
/// `gangway:policy/gang` interface. See [`export_fairness!`] for usage.
#[macro_export]
macro_rules! export_gang {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayGang,
            __gangway_gang,
            "gang-policy-buffered",
            $policy,
            gang,
            gang_buffered,
            on_blocked,
            $crate::Gang
        );
    };
}

/// Exports a [`ReclaimPolicy`](crate::ReclaimPolicy) type as the
/// `gangway:policy/reclaim` interface. See [`export_fairness!`] for usage.
#[macro_export]
macro_rules! export_reclaim {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayReclaim,
            __gangway_reclaim,
            "reclaim-policy-buffered",
            $policy,
            reclaim,
            reclaim_buffered,
            reclaim,
            $crate::Reclaim
        );
    };
}

/// Exports a [`RetryPolicy`](crate::RetryPolicy) type as the
/// `gangway:policy/retry` interface. See [`export_fairness!`] for usage.
#[macro_export]
macro_rules! export_retry {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayRetry,
            __gangway_retry,
            "retry-policy-buffered",
            $policy,
            retry,
            retry_buffered,
            retry,
            $crate::Retry
        );
    };
}

/// Exports a [`DefragmentPolicy`](crate::DefragmentPolicy) type as the
/// `gangway:policy/defragment` interface. See [`export_fairness!`] for usage.
#[macro_export]
macro_rules! export_defragment {
    ($policy:ty) => {
        $crate::__gangway_export!(
            __GangwayDefragment,
            __gangway_defragment,
            "defragment-policy-buffered",
            $policy,
            defragment,
            defragment_buffered,
            plan,
            $crate::Defragment
        );
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
