//! A small deterministic generator (splitmix64) for the kit's seeded
//! choices: the same seed gives the same numbers on every platform.

/// Splitmix64 from a seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_numbers_below_the_bound() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for n in [0u64, 1, 5, 1_000] {
            let x = a.below(n);
            assert_eq!(x, b.below(n));
            assert!(x < n.max(1));
        }
        assert_ne!(Rng(7).next_u64(), Rng(8).next_u64());
    }
}
