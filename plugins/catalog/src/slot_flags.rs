//! One command-line flag per slot (`--fairness POLICY`, `--locality
//! POLICY`, ...), made from the slot registry rather than written out per
//! slot: a host's CLI flattens a [`SlotFlags`] into its own arguments.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use gangway_core::Slot;

/// What a slot's flag takes, for its help text.
pub trait SlotFlagKind {
    /// The value's name in help (`POLICY`, `FILE`).
    const VALUE_NAME: &'static str;
    /// The help line of `slot`'s flag.
    fn help(slot: Slot) -> String;
}

/// A built-in policy name or a `.wasm` module (as `replay` takes them).
#[derive(Clone, Copy, Debug, Default)]
pub struct PolicyOrModule;

impl SlotFlagKind for PolicyOrModule {
    const VALUE_NAME: &'static str = "POLICY";
    fn help(slot: Slot) -> String {
        format!(
            "The {slot} policy: a built-in name ({}) or a `.wasm` module (overrides the preset's)",
            crate::names(slot).join(", ")
        )
    }
}

/// A `.wasm` module file (as `gangway-slurm swap` takes them).
#[derive(Clone, Copy, Debug, Default)]
pub struct ModuleFile;

impl SlotFlagKind for ModuleFile {
    const VALUE_NAME: &'static str = "FILE";
    fn help(slot: Slot) -> String {
        format!("A Wasm module for the {slot} slot")
    }
}

/// The value given to each slot's flag, if any.
///
/// ```
/// use clap::Parser;
/// use gangway_catalog::slot_flags::{PolicyOrModule, SlotFlags};
/// use gangway_core::Slot;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     slots: SlotFlags<PolicyOrModule>,
/// }
/// let cli = Cli::parse_from(["prog", "--gang", "reserve", "--retry", "my.wasm"]);
/// assert_eq!(cli.slots.get(Slot::Gang), Some("reserve"));
/// assert_eq!(cli.slots.chosen().count(), 2);
/// ```
#[derive(Clone, Debug, Default)]
pub struct SlotFlags<K> {
    values: BTreeMap<Slot, String>,
    kind: PhantomData<K>,
}

impl<K> SlotFlags<K> {
    /// The value given for `slot`.
    pub fn get(&self, slot: Slot) -> Option<&str> {
        self.values.get(&slot).map(String::as_str)
    }

    /// Every slot given a value, in the slots' declaration order.
    pub fn chosen(&self) -> impl Iterator<Item = (Slot, &str)> {
        self.values.iter().map(|(s, v)| (*s, v.as_str()))
    }
}

impl<K: SlotFlagKind> Args for SlotFlags<K> {
    fn augment_args(cmd: Command) -> Command {
        Slot::DECLARED.into_iter().fold(cmd, |cmd, slot| {
            cmd.arg(
                Arg::new(slot.as_str())
                    .long(slot.as_str())
                    .value_name(K::VALUE_NAME)
                    .help(K::help(slot)),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl<K> FromArgMatches for SlotFlags<K> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = SlotFlags {
            values: BTreeMap::new(),
            kind: PhantomData,
        };
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for slot in Slot::ALL {
            if let Some(v) = matches.get_one::<String>(slot.as_str()) {
                self.values.insert(slot, v.clone());
            }
        }
        Ok(())
    }
}
