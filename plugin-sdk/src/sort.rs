//! Sorting for policies, with one sort routine per Wasm module.
//!
//! Each `sort_by_key` of the standard library is compiled anew for every
//! element type and key closure: 5 to 14 KB of Wasm each, which made sort
//! routines about 58 KB of a policy module that orders jobs a few ways.
//! Here every order is a key of three `u64` parts (the caller maps its
//! fields to them, e.g. `!x` for a descending one); the keys, with each
//! item's position as a fourth part, are sorted by one shared,
//! non-generic routine, then the items follow. The position makes every
//! key distinct, so the order is the stable one: items of equal keys keep
//! their order, as with `slice::sort_by_key`.
//!
//! ```
//! use gangway_plugin_sdk::sort;
//!
//! let mut jobs = [(3u64, 'a'), (1, 'b'), (3, 'c'), (2, 'd')];
//! // Descending by the number, ties in their order.
//! sort::by_key(&mut jobs, |(n, _)| [!n, 0, 0]);
//! assert_eq!(jobs.map(|(_, c)| c), ['a', 'c', 'd', 'b']);
//!
//! let mut words = ["bb", "a", "ccc", "dd"];
//! sort::by(&mut words, &|a, b| a.len().cmp(&b.len()));
//! assert_eq!(words, ["a", "bb", "dd", "ccc"]);
//! ```

use std::cmp::Ordering;

/// A sort key: three parts compared in order.
pub type Key = [u64; 3];

/// Sorts `items` by `key`, items of equal keys kept in their order.
pub fn by_key<T>(items: &mut [T], key: impl Fn(&T) -> Key) {
    let mut keys: Vec<[u64; 4]> = items
        .iter()
        .enumerate()
        .map(|(at, item)| {
            let [a, b, c] = key(item);
            [a, b, c, at as u64]
        })
        .collect();
    sort_keys(&mut keys);
    permute_by_keys(items, &mut keys);
}

/// Sorts `items` by `compare`, items it finds equal kept in their order:
/// for an order no [`Key`] expresses (a comparison of fractions by
/// cross-multiplying, say).
pub fn by<T>(items: &mut [T], compare: &dyn Fn(&T, &T) -> Ordering) {
    let mut order: Vec<u32> = (0..items.len() as u32).collect();
    let all: &[T] = items;
    sort_positions(&mut order, &|a, b| {
        compare(&all[a as usize], &all[b as usize])
    });
    permute(items, &order);
}

/// The one sort of keys every [`by_key`] shares. The standard stable
/// sort (the keys are distinct, so any sort gives this order): it finds
/// the runs already in order, and the lists policies sort are often runs
/// (each VC's jobs in order, concatenated), which it merges in a pass each.
#[inline(never)]
fn sort_keys(keys: &mut [[u64; 4]]) {
    keys.sort();
}

/// The one sort of positions every [`by`] shares (ties by position).
#[inline(never)]
fn sort_positions(order: &mut [u32], compare: &dyn Fn(u32, u32) -> Ordering) {
    order.sort_unstable_by(|&a, &b| compare(a, b).then(a.cmp(&b)));
}

/// Puts the item at position `order[d]` at `d`, for every `d`, in place:
/// each cycle of the permutation is followed with swaps, the item that
/// started it carried along.
fn permute<T>(items: &mut [T], order: &[u32]) {
    let mut done = vec![false; items.len()];
    for start in 0..items.len() {
        let mut at = start;
        while !done[at] {
            done[at] = true;
            let from = order[at] as usize;
            if from == start {
                break;
            }
            items.swap(at, from);
            at = from;
        }
    }
}

/// [`permute`] with the order in the keys' last part (each key's original
/// position), marking the positions it has placed in the keys themselves
/// instead of in a list of its own.
fn permute_by_keys<T>(items: &mut [T], keys: &mut [[u64; 4]]) {
    const PLACED: u64 = u64::MAX;
    for start in 0..items.len() {
        let mut at = start;
        while keys[at][3] != PLACED {
            let from = keys[at][3] as usize;
            keys[at][3] = PLACED;
            if from == start {
                break;
            }
            items.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_order_as_the_standard_stable_sort(
            items in proptest::collection::vec((0u64..4, 0u64..4, any::<u8>()), 0..200),
        ) {
            let mut std_sorted = items.clone();
            std_sorted.sort_by_key(|(a, b, _)| (*a, std::cmp::Reverse(*b)));
            let mut ours = items.clone();
            by_key(&mut ours, |(a, b, _)| [*a, !*b, 0]);
            prop_assert_eq!(&ours, &std_sorted);
            let mut by_compare = items.clone();
            by(&mut by_compare, &|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
            prop_assert_eq!(&by_compare, &std_sorted);
        }
    }
}
