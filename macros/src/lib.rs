//! Procedural macros of [locus](https://docs.rs/locus): `#[on_device]`, `with_device!`,
//! `#[derive(ToDevice)]` and `#[kernel]`. Use them through the `locus` crate, which re-exports them.
//!
//! This crate only parses, checks and rewrites syntax; what the generated code calls
//! lives in the runtime and is reached as `::locus::__private::…`.

mod fallback;
mod kernel;
mod on_device;
mod parameters;
mod to_device;

use proc_macro::TokenStream;

/// Runs a fn, a method or every method of an `impl` block with a device current, as
/// `with torch.cuda.device(n):` around the body.
///
/// The device is one of:
///
/// | argument | device | `Here` |
/// |---|---|---|
/// | `#[on_device(1)]` | `cuda:1` | `Cuda<1>`, in the signature and the body |
/// | `#[on_device(N)]` | `Cuda<N>` for a `const N: usize` of the fn (or the impl) | — |
/// | `#[on_device(dyn expr)]` | `expr` at run time: a `u32`/`usize`/`i32` ordinal, a `DeviceId` or a `Dyn` | — |
///
/// - The previous device is current again on every way out: return, `?`, panic.
/// - A fn returning a `Result` gets a failed guard (`Error::NoSuchDevice`, a negative
///   `dyn` ordinal) as an `Err` through `?`, so its error type needs
///   `From<locus::Error>`; any other fn panics with a message naming the device.
/// - `async fn`s keep their signature; the device is made current around every poll
///   of the body and left between polls, so it follows the future across threads and
///   never leaks into other futures.
/// - With a literal device, a `Cuda<m>` with another literal `m` in a signature does
///   not compile, and the error points at it.
/// - On an `impl` block, methods with their own `#[on_device]` keep theirs, and
///   `const fn`s are left alone.
/// - A misused attribute (no device, a negative, string or float one, two devices, on
///   a struct) is one error at the offending token: the item is still emitted with
///   `Here` defined, as the device the message suggests, so its uses add none.
///
/// Ops on statically placed tensors follow their tensor whatever the current device;
/// the current device matters for `Tensor<Dyn>` factories and raw CUDA calls.
///
/// ```
/// use locus::{current_device, on_device, Cuda, DeviceId, Tensor};
///
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// #[on_device(1)]
/// fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
///     assert_eq!(current_device(), DeviceId::Cuda(1));
///     (x * 2.0)?.relu()
/// }
///
/// #[on_device(N)]
/// fn replica<const N: usize>(x: &Tensor<Cuda<N>>) -> locus::Result<Tensor<Cuda<N>>> {
///     x + x
/// }
///
/// #[on_device(dyn rank)]
/// async fn serve(rank: u32) -> DeviceId {
///     current_device()
/// }
///
/// let y = step(&Tensor::<Cuda<1>>::ones([2])?)?;
/// assert_eq!(y.to_vec()?, vec![2.0, 2.0]);
/// assert_eq!(replica(&Tensor::<Cuda<0>>::ones([1])?)?.to_vec()?, vec![2.0]);
/// assert_eq!(current_device(), DeviceId::Cpu);
/// let _future = serve(0);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::{on_device, Tensor};
/// #[on_device(1)]
/// fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
///     x.relu()
/// }
/// ```
///
/// After (the guard's name is hygienic: the body cannot see it):
///
/// ```
/// # use locus::Tensor;
/// fn step(x: &Tensor<::locus::__private::Cuda<1>>) -> locus::Result<Tensor<::locus::__private::Cuda<1>>> {
///     #[allow(dead_code)]
///     type Here = ::locus::__private::Cuda<1>;
///     let __locus_guard =
///         ::locus::__private::enter(::locus::__private::static_id::<::locus::__private::Cuda<1>>())?;
///     x.relu()
/// }
/// ```
///
/// An `async fn` moves its body into a future wrapped by `on_device_async`, which
/// enters the device around each poll:
///
/// ```
/// # use locus::on_device;
/// #[on_device(dyn rank)]
/// async fn serve(rank: u32) -> usize {
///     rank as usize
/// }
/// ```
///
/// becomes
///
/// ```
/// async fn serve(rank: u32) -> usize {
///     let __locus_device = ::locus::__private::dynamic_id(rank);
///     ::locus::__private::expect_entered(
///         ::locus::__private::on_device_async::<usize, _>(__locus_device, async move {
///             ::core::convert::identity::<usize>({ rank as usize })
///         })
///         .await,
///     )
/// }
/// ```
///
/// The `identity::<usize>` gives the body's tail and `return`s the coercions an
/// `async fn` body has.
#[proc_macro_attribute]
pub fn on_device(args: TokenStream, item: TokenStream) -> TokenStream {
    on_device::attribute(args.into(), item.into()).into()
}

/// Runs a block, a closure or an async block with a device current:
/// `with_device!(device => body)`, the expression form of `#[on_device]` (attributes on
/// blocks are unstable, and one name cannot be both an attribute and a `!` macro).
///
/// The device takes the three forms of `#[on_device]`: `1` (where `Here` is
/// `Cuda<1>`), `N` (a const generic in scope) or `dyn expr`. Entering can fail (a
/// missing device), so every form gives a `locus::Result`, never a panic:
///
/// | body | result |
/// |---|---|
/// | `{ block }` or any expression | `Result<T>`: the block's value |
/// | `\|args\| body` | a closure of the same arguments returning `Result<T>`; each call enters the device, and a `dyn` device is read once, when the closure is made |
/// | `async { .. }` | a future of `Result<T>`, entering the device around every poll |
///
/// `return`, `?` and `break` in a block act on the enclosing fn or loop, as in any
/// block. A closure that is stored rather than passed straight to a function may need
/// its argument types written out (`|x: &Tensor<Here>|`), as for any stored closure.
///
/// ```
/// use locus::{current_device, with_device, Cuda, DeviceId, Tensor};
///
/// let t = with_device!(0 => {
///     assert_eq!(current_device(), DeviceId::Cuda(0));
///     Tensor::<Here>::ones([2])?
/// })?;
/// let _: Tensor<Cuda<0>> = t;
///
/// let rank = 0u32;
/// let scale = with_device!(dyn rank => |x: f32| (current_device(), x * 2.0));
/// assert_eq!(scale(1.5)?, (DeviceId::Cuda(0), 3.0));
///
/// assert!(with_device!(4096 => ()).is_err());
/// assert_eq!(current_device(), DeviceId::Cpu);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::with_device;
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let y = with_device!(1 => { 2 + 1 })?;
/// # Ok::<(), locus::Error>(())
/// ```
///
/// After:
///
/// ```
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let y = {
///     #[allow(dead_code)]
///     type Here = ::locus::__private::Cuda<1>;
///     match ::locus::__private::enter(::locus::__private::static_id::<::locus::__private::Cuda<1>>()) {
///         ::core::result::Result::Ok(__locus_guard) => {
///             let __locus_value = { 2 + 1 };
///             ::core::mem::drop(__locus_guard);
///             ::core::result::Result::Ok(__locus_value)
///         }
///         ::core::result::Result::Err(__locus_error) => ::core::result::Result::Err(__locus_error),
///     }
/// }?;
/// # Ok::<(), locus::Error>(())
/// ```
#[proc_macro]
pub fn with_device(input: TokenStream) -> TokenStream {
    on_device::macro_call(input.into()).into()
}

/// Implements `locus::ToDevice` for a struct generic over one placement `D: Device`:
/// `model.to::<Cuda<1>>()`, `model.to_dyn(id)` and `model.to_placement(p)` copy every
/// tensor to the new placement, as PyTorch's `module.to(device)` does, giving the same
/// struct typed for that placement.
///
/// Fields move by their type:
///
/// - `D` itself becomes the new placement;
/// - a type mentioning `D` (`Tensor<D, T>`, another `ToDevice` struct, `Vec`, `Option`,
///   `Box` or an array of them) moves with `ToDevice`;
/// - anything else is cloned.
///
/// Enums, structs without a device parameter and structs with two are compile errors,
/// one each: the type still gets a `ToDevice` impl, so its `.to::<..>()` calls add none.
///
/// ```
/// use locus::{Cpu, Cuda, Device, Tensor, ToDevice};
///
/// #[derive(ToDevice)]
/// struct Linear<D: Device> {
///     weight: Tensor<D>,
///     bias: Option<Tensor<D>>,
/// }
///
/// #[derive(ToDevice)]
/// struct Mlp<D: Device> {
///     layers: Vec<Linear<D>>,
///     name: String,
/// }
///
/// let layer = Linear::<Cpu> { weight: Tensor::ones([2, 2])?, bias: None };
/// let mlp = Mlp { layers: vec![layer], name: "mlp".into() };
/// let on_gpu: Mlp<Cuda<0>> = mlp.to::<Cuda<0>>()?;
/// assert_eq!(on_gpu.layers[0].weight.device().to_string(), "cuda:0");
/// assert_eq!(on_gpu.name, "mlp");
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::{Device, Tensor, ToDevice};
/// #[derive(ToDevice)]
/// struct Linear<D: Device> {
///     weight: Tensor<D>,
///     name: String,
/// }
/// ```
///
/// After:
///
/// ```
/// # use locus::{Device, Tensor};
/// # struct Linear<D: Device> {
/// #     weight: Tensor<D>,
/// #     name: String,
/// # }
/// const _: () = {
///     #[automatically_derived]
///     impl<D: Device> ::locus::__private::ToDevice for Linear<D> {
///         type On<__LocusE: ::locus::__private::Device> = Linear<__LocusE>;
///
///         fn to_placement<__LocusE: ::locus::__private::Device>(
///             &self,
///             __locus_placement: __LocusE,
///         ) -> ::locus::__private::Result<Self::On<__LocusE>> {
///             ::core::result::Result::Ok(Linear {
///                 weight: ::locus::__private::move_field::<Tensor<D>, _>(&self.weight, __locus_placement)?,
///                 name: ::core::clone::Clone::clone(&self.name),
///             })
///         }
///     }
/// };
/// ```
#[proc_macro_derive(ToDevice)]
pub fn derive_to_device(input: TokenStream) -> TokenStream {
    to_device::derive(input.into()).into()
}

/// Declares a CUDA C kernel as a typed Rust fn: the declaration is checked against the
/// kernel's C declaration when the crate compiles, and calling it gives a
/// [`KernelLaunch`](https://docs.rs/locus/latest/locus/struct.KernelLaunch.html) that
/// `.launch()` queues like any op.
///
/// ```text
/// #[locus::kernel(source = "kernels/saxpy.cu", host = saxpy_host)]
/// fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);
///
/// saxpy(2.0, &x, &mut y, n).launch()?;                                  // current stream, one thread per element of `y`
/// saxpy(2.0, &x, &mut y, n).grid(Grid::new([64, 1, 1], [256, 1, 1])).on(&stream).launch()?;
/// ```
///
/// Arguments of the attribute:
///
/// | argument | what |
/// |---|---|
/// | `source = "kernels/saxpy.cu"` | a file, relative to the crate's directory (`CARGO_MANIFEST_DIR`); a change to it rebuilds the crate |
/// | `source = r#"extern "C" __global__ void saxpy(..) { .. }"#` | the CUDA C itself (a `source` that says `__global__` is code, not a path) |
/// | `name = "saxpy_f32"` | the C function's name, when it is not the Rust fn's |
/// | `host = path::to::fn` | a Rust version the host backend runs (without one, a launch there is `Error::NoHostKernel`) |
///
/// What is checked when the crate compiles, each mistake an error at the Rust parameter
/// that quotes the C one:
///
/// - the source has an `extern "C" __global__` function of that name (not a template:
///   C++ names are mangled), with as many parameters as the declaration;
/// - a `const T*` is `&Tensor<D, T>` (read), a `T*` is `&mut Tensor<D, T>` (written in
///   place), with `float`, `double`, `int`, `unsigned char` being `f32`, `f64`, `i32`,
///   `u8`;
/// - a value is its Rust type: `float` `f32`, `double` `f64`, `int`/`int32_t` `i32`,
///   `unsigned`/`uint32_t` `u32`, `long long`/`long`/`int64_t` `i64` (and their
///   `unsigned` forms `u64`), `size_t` `usize`, `ptrdiff_t` `isize`, `short` `i16`,
///   `char` `i8`, `unsigned char` `u8`, `bool` `bool`;
/// - every tensor is on the first one's placement: tensors of two GPUs are a
///   `SameKernelDevice` error naming both, as for any op (`Dyn` is checked at launch);
/// - an output is `&mut`, so the borrow checker refuses the same tensor as an input and
///   an output, or twice as an output;
/// - the host fallback takes the same parameters with `&[T]` for inputs and `&mut [T]`
///   for outputs, and returns `()`.
///
/// At run time, `.launch()`:
///
/// - queues the kernel on the thread's current stream of the tensors' device
///   (`on_stream`), or on `.on(&stream)`'s; the stream first waits for the inputs' and
///   outputs' writers (and for readers of the outputs), and later work on other streams
///   waits for the outputs' write, exactly as for built-in ops, in graph captures too;
/// - launches over `.grid(..)`, or by default `Grid::linear` of the first output's
///   element count: blocks of 256 threads, one thread per element (an empty output
///   launches nothing);
/// - on the cuda backend, compiles the source with NVRTC once per kernel and device
///   architecture (cached for the process); a compile error is `Error::Kernel` with
///   NVRTC's log, a launch the driver refuses an `Error::Driver`;
/// - on the host backend, runs the fallback as a job on the stream, like any host op;
/// - copies an output that shares its memory with another tensor (a clone) first, so the
///   other keeps its values.
///
/// What no declaration can check is the kernel's body: that it stays within the
/// tensors it is given. Pass their lengths (as `n` above) and bound every access by them,
/// as the kernels of locus do. The kernel's source is code of your crate, trusted as its
/// Rust is.
///
/// The fn has one placement parameter per tensor after the first (for the check above)
/// and a lifetime: call it with arguments, not a turbofish.
///
/// ```
/// use locus::{kernel, Cuda, Device, Tensor};
///
/// fn axpb_host(a: f32, b: f32, x: &[f32], y: &mut [f32], n: u32) {
///     for i in 0..n as usize {
///         y[i] = a * x[i] + b;
///     }
/// }
///
/// /// `y = a * x + b`, element by element.
/// #[kernel(host = axpb_host, source = r#"
///     extern "C" __global__ void axpb(float a, float b, const float* x, float* y, unsigned n) {
///         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///         if (i < n) y[i] = a * x[i] + b;
///     }
/// "#)]
/// fn axpb<D: Device>(a: f32, b: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: u32);
///
/// let x = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0], [3])?;
/// let mut y = Tensor::<Cuda<0>>::zeros([3])?;
/// axpb(2.0, 1.0, &x, &mut y, 3).launch()?;
/// assert_eq!(y.to_vec()?, vec![3.0, 5.0, 7.0]);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Expansion
///
/// Before:
///
/// ```
/// # use locus::{kernel, Device, Tensor};
/// # fn scale_host(k: f32, y: &mut [f32], n: usize) {}
/// #[kernel(source = r#"extern "C" __global__ void scale(float k, float* y, size_t n) {}"#, host = scale_host)]
/// fn scale<D: Device>(k: f32, y: &mut Tensor<D>, n: usize);
/// ```
///
/// After (a second tensor would get `__LocusP1: SameKernelDevice<D>`):
///
/// ```
/// # use locus::{Device, Tensor};
/// # fn scale_host(k: f32, y: &mut [f32], n: usize) {}
/// fn scale<'__locus, D: Device>(
///     k: f32,
///     y: &'__locus mut Tensor<D>,
///     n: usize,
/// ) -> ::locus::__private::KernelLaunch<'__locus, D> {
///     fn __locus_host(call: &mut ::locus::__private::HostCall<'_>) -> ::locus::__private::Result<()> {
///         let fallback: fn(f32, &mut [f32], usize) = scale_host;
///         fallback(call.scalar::<f32>()?, call.output::<f32>()?, call.scalar::<usize>()?);
///         ::core::result::Result::Ok(())
///     }
///     static __LOCUS_KERNEL: ::locus::__private::KernelSource = ::locus::__private::KernelSource::new(
///         "scale",
///         r#"extern "C" __global__ void scale(float k, float* y, size_t n) {}"#,
///         "inline",
///         ::core::option::Option::Some(__locus_host as _),
///     );
///     let mut launch = ::locus::__private::KernelLaunch::new(&__LOCUS_KERNEL, 3);
///     launch.scalar::<f32>(k);
///     launch.output(y);
///     launch.scalar::<usize>(n);
///     launch
/// }
/// ```
///
/// A `source` file is embedded with `include_str!` of its absolute path instead of the
/// literal.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::attribute(args.into(), item.into()).into()
}

/// Implements `locus::nn::Parameters` for a struct generic over one placement
/// `D: Device`: its parameters by name, for optimizers and state dicts (PyTorch's
/// `named_parameters()`).
///
/// Each field whose type mentions `D` is visited under its name (`encoder.weight`):
/// a `Param<D>`, a block of `locus::nn`, another `Parameters` struct, or an `Option`,
/// `Vec` (named by index), `Box` or array of them. Plain tensors (`Tensor<D>`, buffers
/// that are no parameters) and `PhantomData` are skipped, and so is every field that does
/// not mention `D`. The parameters' element type is `f32`, or the struct's type parameter
/// bounded by `Float`. Derive `ToDevice` too to move the model.
///
/// ```
/// use locus::nn::{self, LayerNorm, Linear, Module};
/// use locus::optim::AdamW;
/// use locus::{Cuda, Device, Parameters, Tensor, ToDevice};
///
/// #[derive(Parameters, ToDevice)]
/// struct Block<D: Device> {
///     norm: LayerNorm<D>,
///     layers: Vec<Linear<D>>,
///     mask: Tensor<D>, // a buffer: not a parameter
/// }
///
/// let block = Block::<Cuda<0>> {
///     norm: LayerNorm::new(4)?,
///     layers: vec![Linear::new(4, 4, 0)?, Linear::new(4, 2, 1)?],
///     mask: Tensor::ones([4])?,
/// };
/// let names: Vec<String> = nn::named_parameters(&block).into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["norm.weight", "norm.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]);
/// let mut block = block;
/// let x = Tensor::<Cuda<0>>::ones([3, 4])?;
/// let y = block.layers[1].forward(&block.layers[0].forward(&block.norm.forward(&(&x * &block.mask)?)?)?)?;
/// y.sum()?.backward()?;
/// AdamW::new(1e-3).step(&mut block)?;
/// # Ok::<(), locus::Error>(())
/// ```
#[proc_macro_derive(Parameters)]
pub fn derive_parameters(input: TokenStream) -> TokenStream {
    parameters::derive(input.into()).into()
}
