//! CUDA C sources of the locus kernels, embedded for NVRTC. Builds with no CUDA
//! installed: nothing here is compiled until run time, by the runtime's cuda backend,
//! once per device for that device's architecture.
//!
//! Kernel names follow `{op}_{variant}_{dtype}` (`add_same_f32`, `sum_partial_i32`) or
//! `{op}_{dtype}` (`relu_f64`, `fill_u8`), with dtype one of `f32`, `f64`, `i32`, `i64`,
//! `u8`, `bf16`, `f16`; copies that move bytes whatever the type are named by width
//! (`index_select_rows_w16`).

/// Definitions every source uses; prepended to each source before compiling.
pub const COMMON: &str = include_str!("../cuda/common.cuh");

/// One source file of kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Unary and binary elementwise ops: `{neg,relu,abs,square,clamp}_{T}`,
    /// `{exp,sqrt,pow,log,tanh,sigmoid,gelu,gelu_tanh,sin,cos}_{f32,f64,bf16,f16}`,
    /// `{gelu,gelu_tanh}_grad_{f32,f64,bf16,f16}` (`g · gelu'(x)`),
    /// `{add,sub,mul,div}_{same,scalar,bcast}_{T}`, and `{sub,div}_rscalar_{T}` (the scalar
    /// on the left).
    Elementwise,
    /// `{sum,mean,max,sumsq}_{partial,final,single,cols,rows,tile,tilefinal}_{T}`.
    Reduce,
    /// `transpose_{T}` (batched), integer `matmul_{T}` (batched), `permute_{T}` (a strided
    /// copy of permuted dims), `copy_blocks_{T}` (strided block copies) and `pad_blocks_{T}` (a
    /// block copy with zeros around it).
    Matrix,
    /// `fill_{T}`, `arange_{T}`, `{rand,randn}_{f32,f64,bf16,f16}`.
    Init,
    /// `{softmax,log_softmax}_{warp4,warp32,vec,block,loop,cols}_{T}` and
    /// `nll_{warp,block}_{T}` (cross-entropy's per-row loss), float `T`.
    Softmax,
    /// `index_select_{rows,flat}_w{1,2,4,8,16}` (per width in bytes, not per type) and
    /// `index_check`.
    Gather,
    /// Comparisons `{eq,ne,lt,le,gt,ge}_{same,scalar,bcast}_{T}` (u8 results),
    /// `where_{same,bcast}_{T}`, and `argmax_{block,warp,final,tile}_{T}`.
    Select,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 7] = [
        Source::Elementwise,
        Source::Reduce,
        Source::Matrix,
        Source::Init,
        Source::Softmax,
        Source::Gather,
        Source::Select,
    ];

    /// The file name under `kernels/cuda/`.
    pub const fn file(self) -> &'static str {
        match self {
            Source::Elementwise => "elementwise.cu",
            Source::Reduce => "reduce.cu",
            Source::Matrix => "matrix.cu",
            Source::Init => "init.cu",
            Source::Softmax => "softmax.cu",
            Source::Gather => "gather.cu",
            Source::Select => "select.cu",
        }
    }

    /// The CUDA C text of the file (without [`COMMON`]).
    pub const fn code(self) -> &'static str {
        match self {
            Source::Elementwise => include_str!("../cuda/elementwise.cu"),
            Source::Reduce => include_str!("../cuda/reduce.cu"),
            Source::Matrix => include_str!("../cuda/matrix.cu"),
            Source::Init => include_str!("../cuda/init.cu"),
            Source::Softmax => include_str!("../cuda/softmax.cu"),
            Source::Gather => include_str!("../cuda/gather.cu"),
            Source::Select => include_str!("../cuda/select.cu"),
        }
    }

    /// The complete program text handed to NVRTC.
    pub fn program(self) -> String {
        format!("{COMMON}\n#line 1 \"{}\"\n{}", self.file(), self.code())
    }

    /// Position in [`Source::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_is_embedded_and_defines_extern_c_kernels() {
        for s in Source::ALL {
            assert!(s.code().contains("extern \"C\" __global__"), "{}", s.file());
            assert!(s.program().starts_with(COMMON));
            assert_eq!(Source::ALL[s.index()], s);
        }
    }
}
