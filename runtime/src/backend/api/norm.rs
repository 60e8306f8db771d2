//! LayerNorm as the backends take it: the rows, their length and `eps`, and the
//! gradients its backward gives.

/// LayerNorm over `rows` rows of `len` elements each, `eps` added to the variance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Norm {
    pub(crate) rows: usize,
    pub(crate) len: usize,
    pub(crate) eps: f64,
}

/// LayerNorm's gradients: the input's, and with a weight the weight's and the bias's.
pub(crate) type NormGrads<S> = (S, Option<(S, S)>);
