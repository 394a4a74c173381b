//! [`Ops`]: the tensor operations a layer's forward pass is written in, the way a
//! PyTorch module's `forward` is written in `torch.nn.functional`.
//!
//! Layers (one file each in this folder) say *what* to compute with these calls; a
//! backend says *how*, by implementing this trait (`backends/src/ops.rs` does it
//! with libtorch). That is what keeps libtorch out of this crate while a layer's schema,
//! shape rule, parameters and forward pass still live in one file.
//!
//! Every call is fallible: a backend reports what its kernels refuse as `Self::Error`
//! instead of panicking. Shapes have been checked before any call (each layer's
//! `infer`), so an error here is a backend limit (memory, a device), not a user's typo.

/// An element-wise function (`torch.nn.functional.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    Relu,
    /// `gelu(x)` with the exact erf form (PyTorch's `approximate="none"`).
    Gelu,
    Tanh,
    Sigmoid,
    /// `x * sigmoid(x)`.
    Silu,
    /// `leaky_relu(x, negative_slope)`.
    LeakyRelu(f64),
}

/// The backend's side of a forward pass: tensors of type `T` and the calls on them.
/// Parameters arrive as tensors too (see [`super::Params`]); `train` says whether the
/// pass trains (dropout on, batch statistics).
pub trait Ops {
    type T;
    type Error;

    /// Whether this pass trains the model.
    fn training(&self) -> bool;

    /// The number of dimensions of `x`, the batch's included.
    fn rank(&self, x: &Self::T) -> usize;

    /// The size of dimension `dim` of `x` (0 is the batch).
    fn size(&self, x: &Self::T, dim: usize) -> i64;

    /// `x @ w.T + b` over the last dimension.
    fn linear(
        &mut self,
        x: &Self::T,
        w: &Self::T,
        b: Option<&Self::T>,
    ) -> Result<Self::T, Self::Error>;

    /// A 1-D or 2-D convolution: the number of spatial dimensions is `stride.len()`.
    #[allow(clippy::too_many_arguments)] // torch's conv takes the same seven
    fn conv(
        &mut self,
        x: &Self::T,
        w: &Self::T,
        b: Option<&Self::T>,
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        groups: i64,
    ) -> Result<Self::T, Self::Error>;

    /// Max pooling over the last `kernel.len()` dimensions (1 or 2).
    fn max_pool(
        &mut self,
        x: &Self::T,
        kernel: &[i64],
        stride: &[i64],
        padding: &[i64],
    ) -> Result<Self::T, Self::Error>;

    /// Average pooling over the last `kernel.len()` dimensions (1 or 2), padding counted.
    fn avg_pool(
        &mut self,
        x: &Self::T,
        kernel: &[i64],
        stride: &[i64],
        padding: &[i64],
    ) -> Result<Self::T, Self::Error>;

    /// Adaptive average pooling of the last `output.len()` dimensions to `output`.
    fn adaptive_avg_pool(&mut self, x: &Self::T, output: &[i64]) -> Result<Self::T, Self::Error>;

    /// The mean over dimensions `dims` (of the batched tensor), which are removed.
    fn mean(&mut self, x: &Self::T, dims: &[i64]) -> Result<Self::T, Self::Error>;

    /// `x.reshape(shape)`; `shape` includes the batch dimension (usually `-1`).
    fn reshape(&mut self, x: &Self::T, shape: &[i64]) -> Result<Self::T, Self::Error>;

    /// `x.flatten(1)`: every dimension but the batch into one.
    fn flatten(&mut self, x: &Self::T) -> Result<Self::T, Self::Error>;

    /// The same tensor (no copy).
    fn identity(&mut self, x: &Self::T) -> Result<Self::T, Self::Error>;

    fn unary(&mut self, x: &Self::T, f: Unary) -> Result<Self::T, Self::Error>;

    /// Softmax (or its log) over the last dimension.
    fn softmax(&mut self, x: &Self::T, log: bool) -> Result<Self::T, Self::Error>;

    /// Zeroes each element with probability `p` while training, scaling the rest.
    fn dropout(&mut self, x: &Self::T, p: f64) -> Result<Self::T, Self::Error>;

    /// Batch normalisation over dimension 1, updating the running statistics (and
    /// adding 1 to `batches`, PyTorch's `num_batches_tracked`) while training; a backend
    /// may compute the statistics over several processes.
    #[allow(clippy::too_many_arguments)] // torch's batch_norm takes as many
    fn batch_norm(
        &mut self,
        x: &Self::T,
        w: Option<&Self::T>,
        b: Option<&Self::T>,
        running_mean: &Self::T,
        running_var: &Self::T,
        batches: &Self::T,
        momentum: f64,
        eps: f64,
    ) -> Result<Self::T, Self::Error>;

    /// Layer normalisation over the last `normalized.len()` dimensions.
    fn layer_norm(
        &mut self,
        x: &Self::T,
        normalized: &[i64],
        w: Option<&Self::T>,
        b: Option<&Self::T>,
        eps: f64,
    ) -> Result<Self::T, Self::Error>;

    /// Group normalisation: the channels (dimension 1) in `groups` groups.
    fn group_norm(
        &mut self,
        x: &Self::T,
        groups: i64,
        w: Option<&Self::T>,
        b: Option<&Self::T>,
        eps: f64,
    ) -> Result<Self::T, Self::Error>;

    /// Rows of `w` picked by the integer ids in `ids` (floats are truncated to ids).
    fn embedding(&mut self, ids: &Self::T, w: &Self::T) -> Result<Self::T, Self::Error>;

    /// `a + b` (broadcasting as torch does).
    fn add(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T, Self::Error>;

    /// The largest value over dimensions `dims`, which are removed.
    fn amax(&mut self, x: &Self::T, dims: &[i64]) -> Result<Self::T, Self::Error>;

    /// The slice `index` of dimension `dim` (negative: from the end); the dimension goes.
    fn select(&mut self, x: &Self::T, dim: i64, index: i64) -> Result<Self::T, Self::Error>;

    /// `length` entries of dimension `dim` from `start`.
    fn narrow(
        &mut self,
        x: &Self::T,
        dim: i64,
        start: i64,
        length: i64,
    ) -> Result<Self::T, Self::Error>;

    /// The dimensions reordered.
    fn permute(&mut self, x: &Self::T, dims: &[i64]) -> Result<Self::T, Self::Error>;

    /// `softmax(q kᵀ / √d) v` over the last two dimensions of (batch, heads, length, d)
    /// tensors, with dropout on the weights while training (`F.scaled_dot_product_attention`);
    /// with a (batch, length) `mask`, no query attends to a key whose mask is 0.
    fn attention(
        &mut self,
        q: &Self::T,
        k: &Self::T,
        v: &Self::T,
        dropout: f64,
        mask: Option<&Self::T>,
    ) -> Result<Self::T, Self::Error>;

    /// `a * b` (broadcasting as torch does).
    fn mul(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T, Self::Error>;

    /// `a / b` (broadcasting as torch does).
    fn div(&mut self, a: &Self::T, b: &Self::T) -> Result<Self::T, Self::Error>;

    /// The sum over dimensions `dims`, which are removed.
    fn sum(&mut self, x: &Self::T, dims: &[i64]) -> Result<Self::T, Self::Error>;

    /// A (batch, length) padding mask as 1 (real step) and 0 (padding) in `like`'s type,
    /// shaped (batch, length, 1, …) to broadcast over `like`'s (batch, length, …).
    fn mask_like(&mut self, mask: &Self::T, like: &Self::T) -> Result<Self::T, Self::Error>;

    /// `x` (batch, length, …) with every padding step of `mask` (batch, length) set to
    /// `value`.
    fn fill_padding(
        &mut self,
        x: &Self::T,
        mask: &Self::T,
        value: f64,
    ) -> Result<Self::T, Self::Error>;

    /// Each sequence's first (or, with `last`, last) real step of `mask`: (batch,
    /// length, …) → (batch, …).
    fn real_step(
        &mut self,
        x: &Self::T,
        mask: &Self::T,
        last: bool,
    ) -> Result<Self::T, Self::Error>;

    /// A recurrent network over batch-first (batch, length, features) input, from zero
    /// states: every step's output of the last layer (batch, length, directions·hidden),
    /// or with `last` the final state of the last layer, both directions joined
    /// (batch, directions·hidden). `weights` are per layer and direction: input-hidden
    /// and hidden-hidden weights, then their biases (PyTorch's `_flat_weights` order).
    #[allow(clippy::too_many_arguments)] // torch's lstm takes as many
    fn recurrent(
        &mut self,
        cell: Cell,
        x: &Self::T,
        weights: &[&Self::T],
        hidden: i64,
        layers: i64,
        bidirectional: bool,
        dropout: f64,
        last: bool,
    ) -> Result<Self::T, Self::Error>;
}

/// The cell of a recurrent network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    Lstm,
    Gru,
}
