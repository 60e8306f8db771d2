//! A hash map for the small, trusted keys looked up on every op: kernels by name and type,
//! cached blocks by size, the memory books by address.

use std::collections::HashMap;

/// A fast hasher for the small, trusted keys of the per-device tables, which are looked up
/// on every op (std's SipHash resists chosen keys, which these are not): each integer is
/// one rotate, xor and multiply (the step of rustc's FxHash), bytes are FNV-1a.
#[derive(Default)]
pub(crate) struct TableHasher(u64);

/// FxHash's multiplier: odd, with its bits spread, so that keys differing only in low
/// bits (addresses aligned to 512 bytes, sizes in powers of two) differ in the high bits
/// the table's control bytes take.
const MIX: u64 = 0x517c_c1b7_2722_0a95;

impl std::hash::Hasher for TableHasher {
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

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(MIX);
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.write_u64(x as u64);
    }
}

/// A `HashMap` with [`TableHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<TableHasher>>;

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::TableHasher;

    #[test]
    fn aligned_addresses_and_powers_of_two_differ_in_the_top_bits() {
        let h = |x: usize| BuildHasherDefault::<TableHasher>::default().hash_one(x) >> 57;
        let top: std::collections::HashSet<u64> = (0..64).map(|i| h(0x7f00_0000_0000 + i * 512)).collect();
        assert!(top.len() > 32, "64 aligned addresses gave only {} of 128 top-7-bit values", top.len());
        let pow: std::collections::HashSet<u64> = (9..21).map(|i| h(1 << i)).collect();
        assert!(pow.len() > 8, "12 powers of two gave only {} top-7-bit values", pow.len());
    }
}
