//! Qwen3 on the device: the weights, the paged KV cache and every activation of a decode step of `batch`
//! sequences, all allocated up front on a [`Serving`] reservation, so that the step's command list
//! ([`Qwen3Model::record_step`], built once, submitted every step) asks the driver for nothing once the
//! reservation is sealed ([`Qwen3Model::seal`]).
//!
//! The step (one submission; its rounding points are the host reference's):
//!
//! 0. `omega_rope_step`: from the device positions `pos` (i32 `[B]`), the RoPE tables (f32 `[B,
//!    head_dim / 2]`) and `lens = pos + 1` (what attention reads).
//! 1. `h = embed(tokens)` (bf16 `[B, hidden]`; the tokens are the last step's argmax, in device memory).
//! 2. Per layer: `x = rmsnorm(h)`; `qkv = x · [Wq; Wk; Wv]ᵀ` one product rounded to bf16; one launch
//!    ([`Attention::qkv_append`]) QK-norms and rotates q and k (bf16), stores q and appends K/V at
//!    `pos[b]` of the layer's pool (the last layer advances `pos`);
//!    `o = paged_decode(q, pool, lens)` bf16; `a = o_proj(o)` bf16; `h = bf16(h + a)`, `x =
//!    rmsnorm(h)`; router logits f32, top-k experts and weights; gate+up f32 per slot (the grouped
//!    product routes), SwiGLU in f32 rounded to bf16 in one launch, the down product over that routing f32 per slot,
//!    and `h = bf16(h + sum_j w_j d[slot(t, j)])` in place.
//! 3. `x = rmsnorm(h)`, `logits = lm_head(x)` f32 `[B, vocab]`, `tokens = argmax(logits)`.
//!
//! Sequence b's KV pages are `b * max_pages .. (b + 1) * max_pages` of every layer's pool (the page
//! tables live in device memory, written once). Weights are generated on the device
//! ([`Weights::Generated`]: the decoder module's generator, bit for bit
//! [`crate::libs::serving::weights`]'s) or uploaded from host bytes ([`Weights::Source`], a safetensors
//! checkpoint for instance).

use std::borrow::Cow;
use std::cell::{Cell, RefCell};

use crate::cmdlist::{CmdListBuilder, CmdListError};
use crate::libs::attention::{Attention, AttentionError, KvLayout, Merge};
use crate::libs::decoder::{DecError, Decoder, DeviceSpan, L2Prefetch};
use crate::libs::elementwise::{Elementwise, EwError};
use crate::libs::matmul::{Input, MatmulError};
use crate::libs::serving::{Sealed, Serving, ServingBounds, ServingError};
use crate::{Device, DeviceScalar, Gpu, Mem, Scope, Stage};

use super::config::{Qwen3Config, Tensor, TensorKind, WEIGHT_SEED};

/// Tokens per KV page.
pub const PAGE_TOKENS: u32 = 64;

/// The generator's tensor number of [`Qwen3Model::fill_context`]'s KV values (no weight's: those are
/// below 100 · (layers + 1)).
pub const CONTEXT_FILL_ID: u64 = u64::MAX;

/// Where a model's weights come from.
pub enum Weights<'a> {
    /// Generated on the device from [`WEIGHT_SEED`] (no host upload: the full model's 61 GB in seconds).
    Generated,
    /// Uploaded from the host, tensor by tensor (bf16 bits in the tensor's layout, [`Tensor::shape`]).
    Source(&'a dyn WeightSource),
}

/// A source of weight tensors as host bytes.
pub trait WeightSource {
    /// Tensor `t`'s bf16 bits, `t.elements(cfg)` of them.
    fn tensor(&self, t: Tensor) -> Result<Cow<'_, [u16]>, Box<dyn std::error::Error + Send + Sync>>;
}

impl WeightSource for super::checkpoint::Checkpoint<'_> {
    /// The checkpoint's bits of `t` ([`super::checkpoint::Checkpoint::parse`] checked every tensor of its
    /// configuration; a model of another configuration is refused by the length check of its load).
    fn tensor(&self, t: Tensor) -> Result<Cow<'_, [u16]>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(super::checkpoint::Checkpoint::tensor(self, t))
    }
}

/// A failure of the model, naming its stage.
#[derive(Debug, thiserror::Error)]
pub enum Qwen3Error {
    /// A weight source failed on a tensor.
    #[error("qwen3 weights: {tensor}: {source}")]
    Source {
        /// The tensor's name.
        tensor: String,
        /// The source's failure.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A weight source gave a tensor of the wrong size.
    #[error("qwen3 weights: {tensor} has {len} elements; its shape needs {needs}")]
    Length {
        /// The tensor's name.
        tensor: String,
        /// The elements given.
        len: usize,
        /// The elements its shape holds.
        needs: u64,
    },
    /// A batch of 0 or more tokens or positions than the batch has.
    #[error("qwen3: {what} {got}; the model decodes {batch} sequences of at most {max_seq} tokens")]
    Batch {
        /// What was wrong.
        what: &'static str,
        /// The value given.
        got: u64,
        /// The batch.
        batch: u32,
        /// The longest sequence.
        max_seq: u32,
    },
    /// The reservation (or a prepared product) failed.
    #[error("{0}")]
    Serving(#[from] ServingError),
    /// A matmul call failed.
    #[error("{0}")]
    Matmul(#[from] MatmulError),
    /// An elementwise call failed.
    #[error("{0}")]
    Elementwise(#[from] EwError),
    /// An attention call failed.
    #[error("{0}")]
    Attention(#[from] AttentionError),
    /// A decoder call failed.
    #[error("{0}")]
    Decoder(#[from] DecError),
    /// A session call (an allocation, a copy) failed.
    #[error("{0}")]
    Session(#[from] crate::Error),
    /// The command list refused or failed.
    #[error("{0}")]
    List(#[from] CmdListError),
    /// A step's submission failed; with `latched`, the launch token is gone.
    #[error("qwen3 step: {error}")]
    Step {
        /// The submission's failure.
        error: CmdListError,
        /// Whether the process latched.
        latched: bool,
    },
}

impl Qwen3Error {
    /// The stage that failed.
    pub fn stage(&self) -> Stage {
        match self {
            Qwen3Error::Serving(e) => e.stage(),
            Qwen3Error::Matmul(e) => e.stage(),
            Qwen3Error::Elementwise(e) => e.stage(),
            Qwen3Error::Attention(e) => e.stage(),
            Qwen3Error::Decoder(e) => e.stage(),
            Qwen3Error::Session(e) => e.stage(),
            Qwen3Error::List(e) | Qwen3Error::Step { error: e, .. } => e.stage(),
            Qwen3Error::Source { .. } | Qwen3Error::Length { .. } | Qwen3Error::Batch { .. } => Stage::Serving,
        }
    }
}

/// One device buffer of the step and its span (the list names every buffer by span: a step's kernels
/// write what later kernels of the same list read, which the calls' borrows cannot say).
pub(super) struct Buf<'s, T: DeviceScalar> {
    mem: RefCell<Mem<'s, Device<T>>>,
    /// The span every call names.
    pub(super) span: DeviceSpan<T>,
}

impl<'s, T: DeviceScalar> Buf<'s, T> {
    fn new(scope: &'s Scope<'s>, n: usize) -> Result<Self, crate::Error> {
        Self::of(scope.alloc_device::<T>(n.max(1))?)
    }

    fn of(mem: Mem<'s, Device<T>>) -> Result<Self, crate::Error> {
        // SAFETY: the span is the whole of `mem`, which this Buf owns; a Buf lives in the model, and every
        // list naming the span borrows the model (`record_step(&self)`), so the buffer outlives its uses.
        let span = unsafe { DeviceSpan::new(mem.va(), mem.len()) };
        Ok(Buf { mem: RefCell::new(mem), span })
    }

    fn read(&self) -> Result<Vec<T>, crate::Error> {
        self.mem.borrow_mut().to_vec()
    }

    fn write(&self, v: &[T]) -> Result<(), crate::Error> {
        self.mem.borrow_mut().write(v)
    }
}

/// The step's activations and state (see the module's text for each).
pub(super) struct State<'s> {
    pub(super) tokens: Buf<'s, u32>,
    pub(super) pos: Buf<'s, i32>,
    pub(super) lens: Buf<'s, i32>,
    pub(super) cos: Buf<'s, f32>,
    pub(super) sin: Buf<'s, f32>,
    pub(super) tables: Buf<'s, i32>,
    pub(super) h: Buf<'s, u16>,
    pub(super) x: Buf<'s, u16>,
    pub(super) qkv: Buf<'s, u16>,
    pub(super) qr: Buf<'s, u16>,
    pub(super) o: Buf<'s, u16>,
    pub(super) a: Buf<'s, u16>,
    pub(super) router: Buf<'s, f32>,
    pub(super) topk: Buf<'s, u32>,
    pub(super) tw: Buf<'s, f32>,
    pub(super) routing: Buf<'s, u32>,
    pub(super) gate_up: Buf<'s, f32>,
    pub(super) act: Buf<'s, u16>,
    pub(super) down: Buf<'s, f32>,
    pub(super) logits: Buf<'s, f32>,
}

impl<'s> State<'s> {
    fn new(scope: &'s Scope<'s>, c: &Qwen3Config, batch: u32, max_pages: u32) -> Result<Self, crate::Error> {
        let [b, h, q, kv, e, i, v] =
            [batch, c.hidden, c.q_width(), c.kv_width(), c.experts, c.expert_inter, c.vocab].map(|x| x as usize);
        let slots = b * c.top_k as usize;
        let words = super::step::moe_shape(c, batch, c.hidden, c.hidden).routing().words;
        Ok(State {
            tokens: Buf::new(scope, b)?,
            pos: Buf::new(scope, b)?,
            lens: Buf::new(scope, b)?,
            cos: Buf::new(scope, b * c.head_dim as usize / 2)?,
            sin: Buf::new(scope, b * c.head_dim as usize / 2)?,
            tables: Buf::of(scope.alloc_device_from(&(0..batch * max_pages).map(|p| p as i32).collect::<Vec<_>>())?)?,
            h: Buf::new(scope, b * h)?,
            x: Buf::new(scope, b * h)?,
            qkv: Buf::new(scope, b * (q + 2 * kv))?,
            qr: Buf::new(scope, b * q)?,
            o: Buf::new(scope, b * q)?,
            a: Buf::new(scope, b * h)?,
            router: Buf::new(scope, b * e)?,
            topk: Buf::new(scope, slots)?,
            tw: Buf::new(scope, slots)?,
            routing: Buf::new(scope, words)?,
            gate_up: Buf::new(scope, slots * 2 * i)?,
            act: Buf::new(scope, slots * i)?,
            down: Buf::new(scope, slots * h)?,
            logits: Buf::new(scope, b * v)?,
        })
    }
}

/// Qwen3 on the device: see the module's text.
pub struct Qwen3Model<'s> {
    pub(super) scope: &'s Scope<'s>,
    pub(super) cfg: Qwen3Config,
    pub(super) batch: u32,
    pub(super) max_seq: u32,
    pub(super) serving: Serving<'s>,
    pub(super) ew: Elementwise<'s>,
    pub(super) att: Attention<'s>,
    pub(super) dec: Decoder<'s>,
    pub(super) weights: WeightBufs<'s>,
    /// The KV cache's layout per layer, and each layer's pool.
    pub(super) layout: KvLayout,
    pub(super) pools: Vec<DeviceSpan<u16>>,
    pub(super) st: State<'s>,
    /// Whether (and how) the recorded step asks the L2 for the dense weights ahead of their products.
    pub(super) prefetch: Cell<Option<L2Prefetch>>,
    /// Whether the recorded step routes with the fused router (one launch) or with the router product,
    /// the top-k kernel and the route kernel (three).
    pub(super) fused_router: Cell<bool>,
    /// How the recorded step's attention merges its KV splits (the planner's choice unless set).
    pub(super) attn_merge: Cell<Merge>,
}

impl<'s> Qwen3Model<'s> {
    /// Reserves everything a decode of `batch` sequences of at most `max_seq` tokens needs, makes the
    /// weights (`progress(done, total)` in bf16 elements after each tensor) and prepares every product's
    /// shape. The sequences start at position 0 ([`Qwen3Model::set_tokens`] gives their first tokens).
    pub fn new(
        scope: &'s Scope<'s>,
        gpu: Gpu<'s>,
        cfg: Qwen3Config,
        [batch, max_seq]: [u32; 2],
        weights: Weights<'_>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(Self, Gpu<'s>), Qwen3Error> {
        if batch == 0 || max_seq == 0 {
            let (what, got) = if batch == 0 { ("batch", batch) } else { ("max_seq", max_seq) };
            return Err(Qwen3Error::Batch { what, got: got.into(), batch, max_seq });
        }
        let max_pages = max_seq.div_ceil(PAGE_TOKENS);
        let bounds = bounds(&cfg, batch, max_seq, max_pages);
        let mut serving = Serving::reserve(scope, bounds)?;
        let layout = KvLayout::new(PAGE_TOKENS, cfg.kv_heads, cfg.head_dim, bounds.pages);
        let per_layer = layout.check().map_err(AttentionError::from)?;
        let kv = serving.kv().expect("the bounds have pages");
        let pools = (0..u64::from(cfg.layers))
            .map(|l| {
                // SAFETY: layer l's pool is elements `l * per_layer .. (l + 1) * per_layer` of the serving
                // reservation's KV cache (`layers * pages * page_stride` elements, `kv_elements`), which the
                // model owns through `serving` for as long as any list names the span.
                unsafe { DeviceSpan::new(kv.va() + l * per_layer * 2, per_layer as usize) }
            })
            .collect();
        let (ew, att, dec) = (Elementwise::new(scope)?, Attention::new(scope)?, Decoder::new(scope)?);
        let st = State::new(scope, &cfg, batch, max_pages)?;
        let (weights, mut gpu) = make_weights(scope, gpu, &cfg, &dec, weights, progress)?;
        for shape in super::step::dense_shapes(&cfg, batch) {
            gpu = serving.prepare_matmul(gpu, shape)?;
        }
        let (prefetch, fused_router) = (Cell::new(None), Cell::new(true));
        let model = Qwen3Model {
            scope,
            cfg,
            batch,
            max_seq,
            serving,
            ew,
            att,
            dec,
            weights,
            layout,
            pools,
            st,
            prefetch,
            fused_router,
            attn_merge: Cell::new(Merge::Auto),
        };
        model.set_tokens(&vec![0; batch as usize])?;
        Ok((model, gpu))
    }

    /// Whether the step [`Qwen3Model::record_step`] records next prefetches weights into the L2 (none
    /// until set): before a layer's `qkv_append` the o and router weights, before its MoE combine the next
    /// layer's q/k/v weight, each fetched while latency-bound kernels leave HBM idle. Results are the same
    /// either way; only the time moves.
    pub fn set_l2_prefetch(&self, how: Option<L2Prefetch>) {
        self.prefetch.set(how);
    }

    /// Whether the step [`Qwen3Model::record_step`] records next routes each layer with the fused router
    /// (`Matmul::add_grouped_bf16_from_router`: the router product, the top k and the route in one
    /// launch; the default) or with the three launches it replaces. The same routing either way; the
    /// logits may differ in their last bits (the products sum in different orders).
    pub fn set_fused_router(&self, fused: bool) {
        self.fused_router.set(fused);
    }

    /// How the step [`Qwen3Model::record_step`] records next merges each layer's attention splits
    /// ([`Merge`]; the planner's choice, [`Merge::Auto`], until set): in the decode's own launch, its splits
    /// a cluster, or by a second launch. The same attention either way but for the last bits of the merge's
    /// sums.
    pub fn set_attn_merge(&self, merge: Merge) {
        self.attn_merge.set(merge);
    }

    /// The configuration.
    pub fn config(&self) -> &Qwen3Config {
        &self.cfg
    }

    /// The sequences decoded together.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// The reservation's matmul handle (a benchmark forces its plans, e.g.
    /// [`crate::libs::matmul::Matmul::set_grouped_split`], before [`Qwen3Model::record_step`]).
    pub fn matmul(&self) -> &crate::libs::matmul::Matmul<'s> {
        self.serving.matmul()
    }

    /// The reservation's bounds.
    pub fn bounds(&self) -> ServingBounds {
        self.serving.bounds()
    }

    /// Starts every sequence over at position 0 with `tokens[b]` its first token (a prompt of one token).
    pub fn set_tokens(&self, tokens: &[u32]) -> Result<(), Qwen3Error> {
        if tokens.len() != self.batch as usize {
            let (batch, max_seq) = (self.batch, self.max_seq);
            return Err(Qwen3Error::Batch { what: "tokens given", got: tokens.len() as u64, batch, max_seq });
        }
        self.st.tokens.write(tokens)?;
        self.st.pos.write(&vec![0; tokens.len()])?;
        Ok(())
    }

    /// A context of `context` tokens without decoding them, for benchmarks: every layer's KV pool filled
    /// with generated bf16 values (uniform in `[-1, 1)`, the generator's tensor [`CONTEXT_FILL_ID`]) and
    /// every sequence's position set to `context - 1`, so the next step appends there and attends
    /// `context` tokens — what benches/torch/qwen3_peer.py times (its cache is random too; a step's time
    /// does not depend on the values). The tokens are those [`Qwen3Model::set_tokens`] gave.
    pub fn fill_context(&self, gpu: Gpu<'s>, context: u32) -> Result<Gpu<'s>, Qwen3Error> {
        if context == 0 || context > self.max_seq {
            let (batch, max_seq) = (self.batch, self.max_seq);
            return Err(Qwen3Error::Batch { what: "context", got: context.into(), batch, max_seq });
        }
        let mut gpu = gpu;
        for (l, pool) in self.pools.iter().enumerate() {
            let mut span = *pool;
            let call = self.dec.generate_bf16(
                &mut span,
                WEIGHT_SEED,
                CONTEXT_FILL_ID,
                (l * pool.elements()) as u64,
                0.0,
                1.0,
            )?;
            gpu = self.dec.launch(gpu, call).map_err(|(_, e)| e)?;
        }
        self.st.pos.write(&vec![context as i32 - 1; self.batch as usize])?;
        Ok(gpu)
    }

    /// The span of tensor `kind` (of `layer`, or a global one).
    pub(super) fn w(&self, kind: TensorKind, layer: Option<u32>) -> &DeviceSpan<u16> {
        let at = match layer {
            None => [TensorKind::Embed, TensorKind::FinalNorm, TensorKind::LmHead]
                .iter()
                .position(|&k| k == kind)
                .expect("a global tensor"),
            Some(l) => 3 + l as usize * 11 + TensorKind::LAYER.iter().position(|&k| k == kind).expect("a layer's"),
        };
        &self.weights.spans[at]
    }

    /// Layer `layer`'s fused `[Wq; Wk; Wv]`.
    pub(super) fn w_qkv(&self, layer: u32) -> &DeviceSpan<u16> {
        &self.weights.qkv[layer as usize]
    }

    /// Runs one step: `list` is [`Qwen3Model::record_step`]'s. Refused past `max_seq` tokens only by the
    /// kernels' own clamps (the append flags, see [`Qwen3Model::list_status`]).
    pub fn step(&self, gpu: Gpu<'s>, list: &mut CmdListBuilder<'_, 's>) -> Result<Gpu<'s>, Qwen3Error> {
        self.step_timed(gpu, list).map(|(gpu, _)| gpu)
    }

    /// [`Qwen3Model::step`], with the submission's time from submit to completion (platform clock, ns).
    pub fn step_timed(&self, gpu: Gpu<'s>, list: &mut CmdListBuilder<'_, 's>) -> Result<(Gpu<'s>, u64), Qwen3Error> {
        match gpu.submit(list) {
            Ok(done) => Ok((done.gpu, done.elapsed_ns)),
            Err(e) => Err(Qwen3Error::Step { latched: e.gpu.is_none(), error: e.error }),
        }
    }

    /// The attention calls' table flags over every submission so far of the step lists still held (0: every
    /// length and page fit).
    pub fn list_status(&self) -> Result<u32, Qwen3Error> {
        Ok(self.att.list_status()?)
    }

    /// The last step's logits, f32 `[batch, vocab]`.
    pub fn read_logits(&self) -> Result<Vec<f32>, Qwen3Error> {
        Ok(self.st.logits.read()?)
    }

    /// The last step's residual stream after the last layer, bf16 bits `[batch, hidden]` (the
    /// reference's [`super::Reference::residual`]).
    pub fn read_residual(&self) -> Result<Vec<u16>, Qwen3Error> {
        Ok(self.st.h.read()?)
    }

    /// The tokens the next step embeds (the last step's argmax, or those [`Qwen3Model::set_tokens`] gave).
    pub fn read_tokens(&self) -> Result<Vec<u32>, Qwen3Error> {
        Ok(self.st.tokens.read()?)
    }

    /// Each sequence's position: the index the next step's token takes.
    pub fn read_positions(&self) -> Result<Vec<i32>, Qwen3Error> {
        Ok(self.st.pos.read()?)
    }

    /// Seals the reservation: lists recorded before run with no driver call until the seal is released.
    pub fn seal(&self) -> Result<Sealed<'_, 's>, Qwen3Error> {
        Ok(self.serving.seal()?)
    }
}

/// The reservation a decode of `batch` sequences of `max_seq` tokens needs.
fn bounds(c: &Qwen3Config, batch: u32, max_seq: u32, max_pages: u32) -> ServingBounds {
    ServingBounds {
        max_m: batch * c.top_k,
        max_n: c.vocab.max(2 * c.expert_inter).max(c.qkv_width()).max(c.hidden),
        max_k: c.hidden.max(c.q_width()).max(c.expert_inter),
        max_seq,
        max_batch: batch,
        pages: batch * max_pages,
        page_tokens: PAGE_TOKENS,
        layers: c.layers,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
        flags: 0,
    }
}

/// The model's weights on the device: one buffer a tensor, but a layer's q, k and v projections share
/// one (`[Wq; Wk; Wv]`, `[q_width + 2 kv_width, hidden]`), so the step makes all three with one product.
pub(super) struct WeightBufs<'s> {
    /// Keeps the buffers the spans name.
    _mem: Vec<Buf<'s, u16>>,
    /// Every tensor's span, in [`Qwen3Config::tensors`]' order.
    pub(super) spans: Vec<DeviceSpan<u16>>,
    /// Each layer's fused q/k/v span.
    pub(super) qkv: Vec<DeviceSpan<u16>>,
}

/// Every tensor's device buffer, generated on the device or uploaded.
fn make_weights<'s>(
    scope: &'s Scope<'s>,
    gpu: Gpu<'s>,
    c: &Qwen3Config,
    dec: &Decoder<'s>,
    weights: Weights<'_>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(WeightBufs<'s>, Gpu<'s>), Qwen3Error> {
    let (total, mut done) = (c.weight_elements(), 0u64);
    let mut gpu = gpu;
    let mut out = WeightBufs { _mem: Vec::new(), spans: Vec::new(), qkv: Vec::new() };
    let tensors = c.tensors();
    let mut i = 0;
    while i < tensors.len() {
        // A layer's Q, K and V (consecutive in `tensors()`) go into one buffer; any other tensor alone.
        let group = if tensors[i].kind == TensorKind::Q { &tensors[i..i + 3] } else { &tensors[i..=i] };
        debug_assert!(
            group.len() == 1 || group.iter().map(|t| t.kind).eq([TensorKind::Q, TensorKind::K, TensorKind::V])
        );
        let sizes: Vec<u64> = group.iter().map(|t| t.elements(c)).collect();
        let buf = match weights {
            Weights::Generated => Buf::new(scope, sizes.iter().sum::<u64>() as usize)?,
            Weights::Source(src) => {
                let mut bits = Vec::with_capacity(sizes.iter().sum::<u64>() as usize);
                for (t, &n) in group.iter().zip(&sizes) {
                    let part = src.tensor(*t).map_err(|source| Qwen3Error::Source { tensor: t.name(), source })?;
                    if part.len() as u64 != n {
                        return Err(Qwen3Error::Length { tensor: t.name(), len: part.len(), needs: n });
                    }
                    bits.extend_from_slice(&part);
                }
                Buf::of(scope.alloc_device_from(&bits)?)?
            }
        };
        let mut at = 0usize;
        for (t, &n) in group.iter().zip(&sizes) {
            let mut span = buf.span.part(at, n as usize).expect("the buffer holds its group");
            if let Weights::Generated = weights {
                let call = dec.generate_bf16(&mut span, WEIGHT_SEED, t.id(), 0, t.center(), t.scale(c))?;
                gpu = dec.launch(gpu, call).map_err(|(_, e)| e)?;
            }
            out.spans.push(span);
            at += n as usize;
            done += n;
            progress(done, total);
        }
        if group.len() == 3 {
            out.qkv.push(buf.span);
        }
        out._mem.push(buf);
        i += group.len();
    }
    Ok((out, gpu))
}
