// Pointers to each element type and scalars of C's integer, floating-point and `bool`
// types match their Rust types; a kernel may be declared for `Cuda<N>` of a const `N`.
// Built but not launched: without a host fallback it would not run on the host backend.
use locus::{kernel, Cuda, Tensor};

#[kernel(source = r#"
    #include <stdint.h>
    extern "C" __global__ void every_type(
        const double* a, const unsigned char* b, int* c, float* __restrict__ d,
        float e, double f, int g, unsigned h, unsigned int i, long long j, unsigned long long k,
        size_t l, char m, unsigned char n, short o, unsigned short p, bool q, int64_t r, uint32_t s,
        ptrdiff_t t, float const* u
    ) {}
"#)]
#[allow(clippy::too_many_arguments)]
fn every_type<const N: usize>(
    a: &Tensor<Cuda<N>, f64>,
    b: &Tensor<Cuda<N>, u8>,
    c: &mut Tensor<Cuda<N>, i32>,
    d: &mut Tensor<Cuda<N>>,
    e: f32,
    f: f64,
    g: i32,
    h: u32,
    i: u32,
    j: i64,
    k: u64,
    l: usize,
    m: i8,
    n: u8,
    o: i16,
    p: u16,
    q: bool,
    r: i64,
    s: u32,
    t: isize,
    u: &Tensor<Cuda<N>, f32>,
);

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>, f64>::zeros([1])?;
    let b = Tensor::<Cuda<0>, u8>::zeros([1])?;
    let mut c = Tensor::<Cuda<0>, i32>::zeros([1])?;
    let mut d = Tensor::<Cuda<0>>::zeros([1])?;
    let u = Tensor::<Cuda<0>>::zeros([1])?;
    let launch = every_type(
        &a, &b, &mut c, &mut d, 1.0, 2.0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, true, 13, 14, 15, &u,
    );
    drop(launch);
    Ok(())
}
