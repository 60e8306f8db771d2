//! A hash map for the small, trusted keys looked up on every op: kernels by name and type,
//! cached blocks by size, the memory books by address.

use std::collections::HashMap;

/// FNV-1a: a fast hasher for the small, trusted keys of the per-device tables, which are
/// looked up on every op (std's SipHash resists chosen keys, which these are not).
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A `HashMap` with [`Fnv`].
pub(crate) type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;
