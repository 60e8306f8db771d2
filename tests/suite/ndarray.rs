//! Conversions between host tensors and `ndarray` arrays (the `ndarray` feature, which
//! the dev-dependencies turn on for the tests).

use locus::{Cpu, DeviceId, Pinned, Tensor};
use ndarray::{array, s, Array, ArrayD, IxDyn};

#[test]
fn a_standard_layout_array_moves_into_a_cpu_tensor_without_a_copy() -> locus::Result<()> {
    let a = Array::from_shape_vec(IxDyn(&[2, 3]), (0..6).map(|v| v as f64).collect()).unwrap();
    let at = a.as_ptr();
    let t = Tensor::<Cpu, f64>::from_ndarray(a)?;
    assert_eq!(t.as_slice().as_ptr(), at);
    assert_eq!((t.shape(), t.to_vec()?), (&[2, 3][..], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
    Ok(())
}

#[test]
fn strided_and_sliced_arrays_are_copied_in_row_major_order() -> locus::Result<()> {
    let a = array![[1, 2, 3], [4, 5, 6]];
    let t = Tensor::<Cpu, i32>::from_ndarray(a.t().to_owned())?; // standard layout again: moved
    assert_eq!((t.shape(), t.as_slice()), (&[3, 2][..], &[1, 4, 2, 5, 3, 6][..]));
    let t = Tensor::<Cpu, i32>::from_ndarray(a.clone().reversed_axes())?; // Fortran order: copied
    assert_eq!((t.shape(), t.as_slice()), (&[3, 2][..], &[1, 4, 2, 5, 3, 6][..]));
    let mut sliced = a.clone();
    sliced.slice_collapse(s![1.., 1..]); // standard layout over part of the vector
    let t = Tensor::<Cpu, i32>::from_ndarray(sliced)?;
    assert_eq!((t.shape(), t.as_slice()), (&[1, 2][..], &[5, 6][..]));
    let mut every_other = a;
    every_other.slice_collapse(s![.., ..;2]);
    let p = Tensor::<Pinned, i32>::from_ndarray(every_other)?;
    assert!(p.is_pinned());
    assert_eq!((p.shape(), p.as_slice()), (&[2, 2][..], &[1, 3, 4, 6][..]));
    Ok(())
}

#[test]
fn views_are_in_place_and_arrays_come_back_from_any_placement() -> locus::Result<()> {
    let t = Tensor::<Pinned, u8>::from_slice(&[1, 2, 3, 4, 5, 6], [3, 2])?;
    let v = t.as_ndarray()?;
    assert_eq!(v.as_ptr(), t.as_slice().as_ptr());
    assert_eq!(v, array![[1u8, 2], [3, 4], [5, 6]].into_dyn());
    // The last device (cuda:1 where there are two).
    let last = locus::device_count()?.max(1) as u32 - 1;
    let g = t.to_dyn(DeviceId::Cuda(last))?;
    assert_eq!(g.to_ndarray()?, v.to_owned());
    let empty = Tensor::<Cpu>::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[0, 4])))?;
    assert_eq!((empty.shape(), empty.as_ndarray()?.len()), (&[0, 4][..], 0));
    let scalar = Tensor::<Cpu>::from_ndarray(ndarray::arr0(2.5f32))?;
    assert_eq!((scalar.rank(), scalar.item()?), (0, 2.5));
    Ok(())
}

#[test]
fn a_moved_array_tensor_is_written_in_place_and_copied_on_write_when_shared() -> locus::Result<()> {
    let mut t = Tensor::<Cpu>::from_ndarray(array![1.0f32, 2.0])?;
    let shared = t.clone();
    t.as_mut_slice()?[0] = 9.0;
    assert_eq!((t.to_vec()?, shared.to_vec()?), (vec![9.0, 2.0], vec![1.0, 2.0]));
    Ok(())
}
