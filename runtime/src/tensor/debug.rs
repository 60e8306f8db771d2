//! `{:?}` of a tensor, laid out as PyTorch prints one: nested brackets per dim, the
//! elements right-aligned to one width, rows of the last dim wrapped at 80 columns, and
//! beyond 1000 elements only the first and last 3 along each longer dim, with `...`
//! between. Then the placement, the element type and the shape.
//!
//! The values are downloaded (a wait for the work that makes them). A summarised tensor
//! is cut down on its device first (`narrow` and `cat_dim` per dim), so at most 6 per
//! dim travel, never the whole tensor. Where reading fails, the text says why in place of
//! the values: a `Debug` never panics.

use std::fmt::{self, Write};

use super::Tensor;
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;

/// More elements than this are summarised (PyTorch's `threshold`).
const THRESHOLD: usize = 1000;
/// Elements kept at each end of a summarised dim (PyTorch's `edgeitems`).
const EDGE: usize = 3;
/// Rows of the last dim wrap at this column (PyTorch's `linewidth`).
const LINE: usize = 80;
/// Where the outermost `[` stands: after `tensor(`.
const START: usize = "tensor(".len();

impl<D: Device, T: Element> fmt::Debug for Tensor<D, T> {
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::arange(0, 6, 1)?.reshape([2, 3])?;
    /// assert_eq!(
    ///     format!("{t:?}"),
    ///     "tensor([[0, 1, 2],\n        [3, 4, 5]], device=cpu, dtype=i32, shape=[2, 3])"
    /// );
    /// let big = Tensor::<Cpu>::zeros([100, 100])?;
    /// assert!(format!("{big:?}").starts_with("tensor([[0.0, 0.0, 0.0, ..., 0.0, 0.0, 0.0],\n"));
    /// # Ok::<(), locus::Error>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor(")?;
        match self.preview() {
            Ok((cells, shape)) => {
                let cut: Vec<bool> = self.shape().iter().zip(&shape).map(|(a, b)| a != b).collect();
                let width = cells.iter().map(String::len).max().unwrap_or(0);
                let layout = Layout { shape: &shape, cut: &cut, cells: &cells, width };
                let mut text = String::new();
                layout.block(&mut text, 0, 0, START)?;
                f.write_str(&text)?;
            }
            Err(e) => write!(f, "<values not read: {e}>")?,
        }
        write!(f, ", device={}, dtype={}, shape={:?})", self.device(), T::DTYPE, self.shape())
    }
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// The elements to print, formatted, and the shape they have: the whole tensor, or
    /// beyond [`THRESHOLD`] elements the first and last [`EDGE`] along each longer dim.
    fn preview(&self) -> Result<(Vec<String>, Vec<usize>)> {
        let mut t = self.saved();
        if self.numel() > THRESHOLD {
            for dim in 0..self.rank() {
                let len = t.shape()[dim];
                if len > 2 * EDGE {
                    t = t.narrow(dim, 0, EDGE)?.cat_dim(&t.narrow(dim, len - EDGE, EDGE)?, dim)?;
                }
            }
        }
        let cells = t.to_vec()?.iter().map(|v| format!("{v:?}")).collect();
        Ok((cells, t.shape().to_vec()))
    }
}

/// The formatted elements of a (possibly summarised) tensor and where to put them.
struct Layout<'a> {
    /// The shape of `cells`.
    shape: &'a [usize],
    /// Per dim, whether it was summarised: `...` goes after its first [`EDGE`].
    cut: &'a [bool],
    cells: &'a [String],
    /// The widest cell; every cell is right-aligned to it.
    width: usize,
}

impl Layout<'_> {
    /// Writes the block of `dim` that starts at cell `at`, its `[` at column `col`.
    fn block(&self, out: &mut String, dim: usize, at: usize, col: usize) -> fmt::Result {
        if self.shape.is_empty() {
            return out.write_str(&self.cells[0]);
        }
        if self.shape.contains(&0) {
            return out.write_str("[]");
        }
        let n = self.shape[dim];
        let ellipsis = |i: usize| self.cut[dim] && i == EDGE;
        out.push('[');
        if dim + 1 == self.shape.len() {
            // Items of the last dim, as many per line as fit.
            let per_line = ((LINE.saturating_sub(col + 1)) / (self.width + 2)).max(1);
            let mut items: Vec<String> = Vec::with_capacity(n + 1);
            for i in 0..n {
                if ellipsis(i) {
                    items.push(format!("{:>w$}", "...", w = self.width));
                }
                items.push(format!("{:>w$}", self.cells[at + i], w = self.width));
            }
            let lines: Vec<String> = items.chunks(per_line).map(|line| line.join(", ")).collect();
            out.push_str(&lines.join(&format!(",\n{:c$}", "", c = col + 1)));
        } else {
            let stride: usize = self.shape[dim + 1..].iter().product();
            // Between blocks of a higher dim, a blank line per dim below the rows.
            let sep = format!(",{}{:c$}", "\n".repeat(self.shape.len() - dim - 1), "", c = col + 1);
            for i in 0..n {
                if i > 0 {
                    out.push_str(&sep);
                }
                if ellipsis(i) {
                    out.push_str("...");
                    out.push_str(&sep);
                }
                self.block(out, dim + 1, at + i * stride, col + 1)?;
            }
        }
        out.push(']');
        Ok(())
    }
}
