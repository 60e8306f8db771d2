//! CUDA C sources of the locus kernels, embedded for NVRTC, and the table of their
//! names. Builds with no CUDA installed: nothing here is compiled until run time.

/// One source file of kernels: its name and CUDA C text.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// The file name under `kernels/`.
    pub name: &'static str,
    /// The CUDA C source.
    pub code: &'static str,
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
}

/// Every kernel source of locus.
pub const SOURCES: &[Source] = &[];
