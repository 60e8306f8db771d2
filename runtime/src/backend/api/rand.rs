//! The random bits both backends fill `rand` from.

/// The random bits of element `i` under `seed` (SplitMix64 of a counter), shared by all
/// backends so that `rand` gives the same values everywhere.
pub(crate) fn rand_bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
