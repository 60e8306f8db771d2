//! The random bits both backends fill `rand` and `randn` from, and the normal samples
//! made of them.

/// What a random fill draws: each backend's `rand` takes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dist {
    /// Uniform in `[0, 1)`: the top mantissa bits of [`rand_bits`], scaled.
    Uniform,
    /// Standard normal, by Box-Muller in f64 ([`normal`]), rounded once to the type.
    Normal,
}

impl Dist {
    /// The op's name, and the kernels' (`rand_{T}`, `randn_{T}`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dist::Uniform => "rand",
            Dist::Normal => "randn",
        }
    }
}

/// The random bits of element `i` under `seed` (SplitMix64 of a counter), shared by all
/// backends so that `rand` gives the same values everywhere.
pub(crate) fn rand_bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed the normal samples of `seed` draw their bits under: a stream of their own,
/// so that `randn(seed)` is not made of the very bits of `rand(seed)`. The backends get
/// this seed (the cuda kernel mixes nothing itself).
pub(crate) fn normal_seed(seed: u64) -> u64 {
    seed ^ 0x6A09_E667_F3BC_C908
}

/// The standard normal sample `i` under `seed` (already through [`normal_seed`]):
/// elements `2k` and `2k + 1` are the cosine and sine halves of one Box-Muller pair, of
/// the uniforms `u1` in `(0, 1]` and `u2` in `[0, 1)` made of 53 bits each of
/// [`rand_bits`] `2k` and `2k + 1`. The values lie within ±8.6 (`u1` ≥ 2^-53). init.cu's
/// `normal` computes the same expression with the GPU's f64 `log`, `sqrt`, `cos`, `sin`.
pub(crate) fn normal(seed: u64, i: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    let k = i & !1;
    let u1 = ((rand_bits(seed, k) >> 11) + 1) as f64 * SCALE;
    let u2 = (rand_bits(seed, k + 1) >> 11) as f64 * SCALE;
    let r = (-2.0 * u1.ln()).sqrt();
    let t = std::f64::consts::TAU * u2;
    r * if i & 1 == 0 { t.cos() } else { t.sin() }
}
