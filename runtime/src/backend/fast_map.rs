//! A hash map for the small, trusted keys looked up on every op: kernels by name and type,
//! cached blocks by size, the memory books by address.

use std::collections::HashMap;

/// FNV-1a: a fast hasher for the small, trusted keys of the per-device tables, which are
/// looked up on every op (std's SipHash resists chosen keys, which these are not). A whole
/// integer (a block's address, a size) is mixed in one folded multiply instead of eight
/// byte steps: the high half of the 128-bit product carries its low bits up and back, so
/// 4 KiB-aligned addresses still spread over the map's low-bit buckets.
#[derive(Default)]
pub(crate) struct Fnv(u64);

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl Fnv {
    fn state(&self) -> u64 {
        if self.0 == 0 {
            FNV_OFFSET
        } else {
            self.0
        }
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.state();
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn write_u64(&mut self, x: u64) {
        let p = ((self.state() ^ x) as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// A `HashMap` with [`Fnv`].
pub(crate) type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::Fnv;

    /// Blocks' addresses are 4 KiB apart or more: their hashes must still differ in the
    /// low bits that pick a bucket (a plain multiply would leave those zero).
    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<Fnv>::default();
        for align in [12, 16, 21] {
            let mut buckets = std::collections::HashSet::new();
            for i in 1..=1024u64 {
                buckets.insert(build.hash_one(0x7f00_0000_0000u64 + (i << align)) & 127);
            }
            assert!(buckets.len() >= 120, "{align}: {} of 128 buckets", buckets.len());
        }
        assert_ne!(build.hash_one(1u64), build.hash_one(2u64));
        assert_ne!(build.hash_one(0usize), build.hash_one(1usize));
    }
}
