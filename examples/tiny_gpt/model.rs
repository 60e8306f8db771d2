//! The model of `tiny_gpt`, shared with its benchmark (`benches/gpu/tiny_gpt.rs`): a
//! small causal transformer over bytes.

use locus::nn::{Embedding, LayerNorm, Linear, Module};
use locus::{Device, Param, Parameters, Tensor, ToDevice};

/// Bytes of context.
pub const CONTEXT: usize = 32;
/// Width of the model.
pub const WIDTH: usize = 64;
pub const HEADS: usize = 4;
pub const LAYERS: usize = 2;
/// Sequences per batch.
pub const BATCH: usize = 16;
pub const VOCAB: usize = 256;

/// Multi-head causal self-attention: one projection to queries, keys and values, one out.
#[derive(Parameters, ToDevice)]
pub struct Attention<D: Device> {
    qkv: Linear<D>,
    out: Linear<D>,
}

impl<D: Device> Attention<D> {
    fn forward(&self, x: &Tensor<D>, mask: &Tensor<D>) -> locus::Result<Tensor<D>> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let hd = WIDTH / HEADS;
        let qkv = self.qkv.forward(x)?; // [b, t, 3 * WIDTH]
                                        // [b, t, WIDTH] → [b · HEADS, t, hd]
        let heads = |i: usize| -> locus::Result<Tensor<D>> {
            qkv.narrow(2, i * WIDTH, WIDTH)?.reshape([b, t, HEADS, hd])?.transpose(1, 2)?.reshape([b * HEADS, t, hd])
        };
        let (q, k, v) = (heads(0)?, heads(1)?, heads(2)?);
        let scores = ((q.matmul(&k.transpose(1, 2)?)? * (1.0 / (hd as f32).sqrt()))? + mask)?;
        let mixed = scores.softmax(2)?.matmul(&v)?; // [b · HEADS, t, hd]
        let joined = mixed.reshape([b, HEADS, t, hd])?.transpose(1, 2)?.reshape([b, t, WIDTH])?;
        self.out.forward(&joined)
    }
}

#[derive(Parameters, ToDevice)]
pub struct Block<D: Device> {
    ln1: LayerNorm<D>,
    attn: Attention<D>,
    ln2: LayerNorm<D>,
    fc: Linear<D>,
    proj: Linear<D>,
}

impl<D: Device> Block<D> {
    fn forward(&self, x: &Tensor<D>, mask: &Tensor<D>) -> locus::Result<Tensor<D>> {
        let x = (x + &self.attn.forward(&self.ln1.forward(x)?, mask)?)?;
        let h = self.proj.forward(&self.fc.forward(&self.ln2.forward(&x)?)?.gelu()?)?;
        &x + &h
    }
}

#[derive(Parameters, ToDevice)]
pub struct Gpt<D: Device> {
    tokens: Embedding<D>,
    positions: Param<D>,
    blocks: Vec<Block<D>>,
    ln: LayerNorm<D>,
    head: Linear<D>,
    /// 0 on and below the diagonal, −∞ above: a byte sees only those before it.
    mask: Tensor<D>,
}

impl<D: Device> Gpt<D> {
    pub fn new_on(device: D, seed: u64) -> locus::Result<Self> {
        let mut mask = vec![0.0f32; CONTEXT * CONTEXT];
        for i in 0..CONTEXT {
            for j in i + 1..CONTEXT {
                mask[i * CONTEXT + j] = f32::NEG_INFINITY;
            }
        }
        let blocks = (0..LAYERS as u64)
            .map(|l| {
                let s = seed + 10 * (l + 1);
                Ok(Block {
                    ln1: LayerNorm::new_on(device, WIDTH)?,
                    attn: Attention {
                        qkv: Linear::new_on(device, WIDTH, 3 * WIDTH, s)?,
                        out: Linear::new_on(device, WIDTH, WIDTH, s + 1)?,
                    },
                    ln2: LayerNorm::new_on(device, WIDTH)?,
                    fc: Linear::new_on(device, WIDTH, 4 * WIDTH, s + 2)?,
                    proj: Linear::new_on(device, 4 * WIDTH, WIDTH, s + 3)?,
                })
            })
            .collect::<locus::Result<_>>()?;
        Ok(Gpt {
            tokens: Embedding::new_on(device, VOCAB, WIDTH, seed)?,
            positions: Param::new((Tensor::randn_on(device, [CONTEXT, WIDTH], seed + 1)? * 0.02f32)?),
            blocks,
            ln: LayerNorm::new_on(device, WIDTH)?,
            head: Linear::new_on(device, WIDTH, VOCAB, seed + 2)?,
            mask: Tensor::from_vec_on(device, mask, [CONTEXT, CONTEXT])?,
        })
    }
}

impl<D: Device> Gpt<D> {
    /// The logits of the next byte at every position, `[b, t, VOCAB]`, for byte ids
    /// `[b, t]` and a causal mask of at least `[t, t]` ([`Gpt::mask`], or a graph's input
    /// holding it: a captured step reads only its inputs and the parameters).
    pub fn logits(&self, ids: &Tensor<D, i32>, mask: &Tensor<D>) -> locus::Result<Tensor<D>> {
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let mut x = (self.tokens.forward(ids)? + &self.positions.narrow(0, 0, t)?)?;
        let mask = mask.narrow(0, 0, t)?.narrow(1, 0, t)?;
        for block in &self.blocks {
            x = block.forward(&x, &mask)?;
        }
        let logits = self.head.forward(&self.ln.forward(&x)?)?;
        debug_assert_eq!(logits.shape(), &[b, t, VOCAB]);
        Ok(logits)
    }

    /// The causal mask, `[CONTEXT, CONTEXT]` (for a graphed step's input: the benchmark
    /// and the tests use it, the example does not).
    #[allow(dead_code)]
    pub fn mask(&self) -> &Tensor<D> {
        &self.mask
    }
}

/// The logits of the next byte at every position, `[b, t, VOCAB]`, for byte values given
/// as f32 (exact below 2^24), `[b, t]`: `DataParallel` hands a module one element type.
impl<D: Device> Module<D> for Gpt<D> {
    fn forward(&self, bytes: &Tensor<D>) -> locus::Result<Tensor<D>> {
        self.logits(&bytes.to_dtype::<i32>()?, &self.mask)
    }
}
