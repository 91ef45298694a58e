//! The typed calls: [`Decoder`], a scope's handle on the `decoder` module.

use core::marker::PhantomData;

use crate::cmdlist::CmdListBuilder;
use crate::kernels::decoder as k;
use crate::libs::matmul::{DeviceSpan, GroupedShape, Input, Output, RoutingLayout};
use crate::libs::serving::weights;
use crate::{DeviceScalar, Gpu, Kernel, Launch, Scope};

use super::error::{DecError, DecShapeError};

/// Which call (failures name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecOp {
    /// The embedding gather.
    Embed,
    /// The f32 -> bf16 cast.
    Cast,
    /// The router's softmax + top k.
    RouterTopK,
    /// Greedy argmax.
    Argmax,
    /// The MoE combine into the residual.
    Combine,
    /// A step's start: RoPE tables and attention lengths from the positions.
    RopeStep,
    /// The seeded weight generator.
    Generate,
    /// The L2 prefetch of a later kernel's operands.
    Prefetch,
    /// The MoE combine into the residual and the RMSNorm of the result, one launch.
    CombineNorm,
}

/// How [`Decoder::l2_prefetch`] asks the L2 for a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Prefetch {
    /// One `cp.async.bulk.prefetch.L2` per 16 KiB chunk: the SM's TMA unit walks the chunk.
    Bulk,
    /// One `prefetch.global.L2` per 128-byte line, issued by the lanes.
    Lines,
}

/// The module's kernels in [`DecOp`]'s order.
const KERNELS: [&str; 9] = [
    k::EMBED_BF16,
    k::CAST_F32_BF16,
    k::ROUTER_TOPK,
    k::ARGMAX_F32,
    k::MOE_COMBINE_BF16,
    k::ROPE_STEP,
    k::FILL_BF16_HASH,
    k::L2_PREFETCH,
    k::MOE_COMBINE_RMSNORM_BF16,
];

#[derive(Clone, Copy, Debug)]
enum Arg {
    Va(u64),
    Word(u32),
}

/// A checked and planned call: one launch, and the buffers it names borrowed for `'b`.
#[derive(Debug)]
#[must_use = "a DecCall does nothing until Decoder::launch or Decoder::record runs it"]
pub struct DecCall<'b> {
    op: DecOp,
    grid: u32,
    block: u32,
    args: Vec<Arg>,
    _buffers: PhantomData<&'b mut ()>,
}

impl DecCall<'_> {
    /// The call.
    pub fn op(&self) -> DecOp {
        self.op
    }
}

fn hold<T: DeviceScalar>(
    op: DecOp,
    operand: &'static str,
    b: &(impl Input<T> + ?Sized),
    needs: u64,
) -> Result<(), DecShapeError> {
    if (b.elements() as u64) < needs {
        return Err(DecShapeError::Short { op, operand, len: b.elements(), needs });
    }
    Ok(())
}

fn nonzero(op: DecOp, sides: &[u32]) -> Result<(), DecShapeError> {
    if sides.contains(&0) {
        return Err(DecShapeError::ZeroSide { op });
    }
    Ok(())
}

/// A combine's operands: its output is the combine's `out`, the fused call's `h` (`out_name` names it).
struct Combined<'a, Y, R, W, S, O> {
    y: &'a Y,
    routing: &'a R,
    weights: &'a W,
    res: &'a S,
    out: &'a O,
    out_name: &'static str,
}

/// The combine's checks and its first arguments (y, the routing's pairs and filled-slot count, weights,
/// res, out), for `op`.
fn combine_args<Y, R, W, S, O>(
    op: DecOp,
    c: Combined<'_, Y, R, W, S, O>,
    layout: RoutingLayout,
    shape: GroupedShape,
) -> Result<Vec<Arg>, DecError>
where
    Y: Input<f32>,
    R: Input<u32>,
    W: Input<f32>,
    S: Input<u16>,
    O: Input<u16>,
{
    nonzero(op, &[shape.tokens, shape.top_k, shape.n])?;
    if shape.top_k > k::TOPK_MAX {
        return Err(DecShapeError::TopK { op, k: shape.top_k, experts: shape.experts }.into());
    }
    let rows = u64::from(shape.tokens) * u64::from(shape.n);
    hold(op, "y", c.y, shape.choices() * u64::from(shape.n))?;
    hold(op, "routing", c.routing, layout.words as u64)?;
    hold(op, "weights", c.weights, shape.choices())?;
    hold(op, "res", c.res, rows)?;
    hold(op, c.out_name, c.out, rows)?;
    let word = |at: usize| c.routing.device_va() + at as u64 * 4;
    Ok(vec![
        Arg::Va(c.y.device_va()),
        Arg::Va(word(layout.pairs)),
        Arg::Va(word(layout.offsets + shape.experts as usize)),
        Arg::Va(c.weights.device_va()),
        Arg::Va(c.res.device_va()),
        Arg::Va(c.out.device_va()),
    ])
}

/// The `decoder` module handle of scope `'s`: its kernels, loaded once.
pub struct Decoder<'s> {
    kernels: Vec<Kernel<'s>>,
    sms: u32,
}

impl core::fmt::Debug for Decoder<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Decoder").field("sms", &self.sms).finish()
    }
}

impl<'s> Decoder<'s> {
    /// Loads the `decoder` module in `scope` (its kernels' host references on the simulator).
    pub fn new(scope: &'s Scope<'s>) -> Result<Self, DecError> {
        let module = scope.load_cuda_module(k::DECODER)?;
        let kernels = KERNELS.iter().map(|name| module.kernel(name)).collect::<Result<Vec<_>, _>>()?;
        Ok(Decoder { kernels, sms: scope.device().sm_count.max(1) })
    }

    /// A grid-stride grid for `units` of work at `per_cta` a CTA, at most a few waves' worth of CTAs.
    fn grid(&self, units: u64, per_cta: u32) -> u32 {
        units.div_ceil(u64::from(per_cta)).clamp(1, u64::from(self.sms) * 8) as u32
    }

    fn call<'b>(op: DecOp, grid: u32, block: u32, args: Vec<Arg>) -> DecCall<'b> {
        DecCall { op, grid, block, args, _buffers: PhantomData }
    }

    /// `out[t, :] = table[ids[t], :]` for `t < tokens` (bf16 `table` `[vocab, hidden]`, `out` `[tokens,
    /// hidden]`); a row of zeros for an id at or past `vocab`.
    pub fn embed<'b>(
        &self,
        table: &'b impl Input<u16>,
        ids: &'b impl Input<u32>,
        out: &'b mut impl Output<u16>,
        [tokens, hidden, vocab]: [u32; 3],
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::Embed;
        nonzero(op, &[tokens, hidden, vocab])?;
        let n = u64::from(tokens) * u64::from(hidden);
        hold(op, "table", table, u64::from(vocab) * u64::from(hidden))?;
        hold(op, "ids", ids, tokens.into())?;
        hold(op, "out", out, n)?;
        let args = vec![
            Arg::Va(table.device_va()),
            Arg::Va(ids.device_va()),
            Arg::Va(out.device_va()),
            Arg::Word(tokens),
            Arg::Word(hidden),
            Arg::Word(vocab),
        ];
        Ok(Self::call(op, self.grid(n, k::GATHER_THREADS), k::GATHER_THREADS, args))
    }

    /// `dst[i] = bf16(src[i])` for `i < n`, nearest even.
    pub fn cast_bf16<'b>(
        &self,
        src: &'b impl Input<f32>,
        dst: &'b mut impl Output<u16>,
        n: u64,
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::Cast;
        if n == 0 {
            return Err(DecShapeError::ZeroSide { op }.into());
        }
        hold(op, "src", src, n)?;
        hold(op, "dst", dst, n)?;
        let args = vec![Arg::Va(src.device_va()), Arg::Va(dst.device_va()), Arg::Va(n)];
        Ok(Self::call(op, self.grid(n, k::GATHER_THREADS), k::GATHER_THREADS, args))
    }

    /// Asks the L2 to fetch `a` and `b` (whole spans) for a later kernel of the list, so that the kernels
    /// recorded between this call and that one, when they leave HBM idle, fill the L2 meanwhile. Nothing
    /// is stored and nothing waits for the prefetches: the launch ends once they are issued, and results
    /// never depend on it. One CTA of one warp per SM, each taking every SM-count-th 16 KiB chunk.
    pub fn l2_prefetch<'b, T: DeviceScalar>(
        &self,
        a: &'b DeviceSpan<T>,
        b: Option<&'b DeviceSpan<T>>,
        how: L2Prefetch,
    ) -> Result<DecCall<'b>, DecError> {
        let bytes = |s: &DeviceSpan<T>| (s.elements() * size_of::<T>()) as u64;
        let mut args = vec![Arg::Va(a.device_va()), Arg::Va(bytes(a))];
        args.extend(match b {
            Some(b) => [Arg::Va(b.device_va()), Arg::Va(bytes(b))],
            None => [Arg::Va(0), Arg::Va(0)],
        });
        if how == L2Prefetch::Bulk {
            for (operand, s) in [("a", Some(a)), ("b", b)] {
                if let Some(s) = s.filter(|s| !(s.device_va() | bytes(s)).is_multiple_of(16)) {
                    let (va, bytes) = (s.device_va(), bytes(s));
                    return Err(DecShapeError::Unaligned { op: DecOp::Prefetch, operand, va, bytes }.into());
                }
            }
        }
        args.push(Arg::Word(u32::from(how == L2Prefetch::Lines)));
        Ok(Self::call(DecOp::Prefetch, self.sms, k::PREFETCH_THREADS, args))
    }

    /// Each token's `k` best experts of `logits` (`[tokens, experts]` f32) into `topk` (u32 `[tokens, k]`,
    /// descending, the lower expert first on a tie) and their softmax weights renormalised over the `k`
    /// into `weights` (f32 `[tokens, k]`). `k` is at most 8 and at most `experts`.
    pub fn router_topk<'b>(
        &self,
        logits: &'b impl Input<f32>,
        topk: &'b mut impl Output<u32>,
        weights: &'b mut impl Output<f32>,
        [tokens, experts, kk]: [u32; 3],
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::RouterTopK;
        nonzero(op, &[tokens, experts, kk])?;
        if kk > k::TOPK_MAX || kk > experts {
            return Err(DecShapeError::TopK { op, k: kk, experts }.into());
        }
        let chosen = u64::from(tokens) * u64::from(kk);
        hold(op, "logits", logits, u64::from(tokens) * u64::from(experts))?;
        hold(op, "topk", topk, chosen)?;
        hold(op, "weights", weights, chosen)?;
        let args = vec![
            Arg::Va(logits.device_va()),
            Arg::Va(topk.device_va()),
            Arg::Va(weights.device_va()),
            Arg::Word(tokens),
            Arg::Word(experts),
            Arg::Word(kk),
        ];
        Ok(Self::call(op, self.grid(tokens.into(), k::ROUTER_TOKENS_PER_CTA), k::ROUTER_THREADS, args))
    }

    /// `out[r]` = the lowest column of row `r` of `logits` (`[rows, cols]` f32) holding its largest value
    /// (NaN never the largest).
    pub fn argmax<'b>(
        &self,
        logits: &'b impl Input<f32>,
        out: &'b mut impl Output<u32>,
        [rows, cols]: [u32; 2],
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::Argmax;
        nonzero(op, &[rows, cols])?;
        hold(op, "logits", logits, u64::from(rows) * u64::from(cols))?;
        hold(op, "out", out, rows.into())?;
        let args = vec![Arg::Va(logits.device_va()), Arg::Va(out.device_va()), Arg::Word(rows), Arg::Word(cols)];
        // A CTA per row: decode has few rows, each a vocabulary long.
        Ok(Self::call(op, rows.min(self.sms * 8), k::ARGMAX_THREADS, args))
    }

    /// The mixture-of-experts combine: `out[t, :] = bf16(res[t, :] + sum_j weights[t, j] * y[slot(t, j),
    /// :])` for `t < tokens`, where `y` (f32 `[tokens * top_k, n]`) is a grouped GEMM's output in its
    /// routing's slot order and `routing` that product's routing buffer laid out as `layout` says (its
    /// `pairs` name each slot's choice, its `offsets[experts]` the filled slots; a dropped choice adds
    /// nothing). `weights` is the router's (`[tokens, top_k]`); `res` and `out` are bf16 `[tokens, n]`
    /// and may be one buffer (spans), the residual updated in place.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine<'b>(
        &self,
        y: &'b impl Input<f32>,
        routing: &'b impl Input<u32>,
        layout: RoutingLayout,
        weights: &'b impl Input<f32>,
        res: &'b impl Input<u16>,
        out: &'b mut impl Output<u16>,
        shape: GroupedShape,
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::Combine;
        let mut args =
            combine_args(op, Combined { y, routing, weights, res, out: &*out, out_name: "out" }, layout, shape)?;
        args.extend([Arg::Word(shape.tokens), Arg::Word(shape.top_k), Arg::Word(shape.n)]);
        let units = u64::from(shape.tokens) * u64::from(shape.n.div_ceil(k::COMBINE_THREADS));
        Ok(Self::call(op, units.min(u64::from(self.sms) * 8) as u32, k::COMBINE_THREADS, args))
    }

    /// [`Decoder::moe_combine`] into `h` followed by the RMSNorm of each combined row, `x[t, :] =
    /// rmsnorm(h[t, :]) * norm` (bf16 `norm` `[n]`, `x` `[tokens, n]`), in one launch: a decode step's
    /// combine and the next layer's input norm (or the final norm). Both results are the bits the two
    /// calls ([`Decoder::moe_combine`], then the elementwise library's `rmsnorm` at `n` columns in its
    /// block form, `RmsForm::Block`, the form it takes at a decode step's row counts) store.
    /// `n` must be a multiple of 8, at most [`k::COMBINE_NORM_MAX_COLS`], and `y` and every bf16 operand
    /// 16-byte aligned (the kernel reads 16-byte vectors); `res` and `h` may be one buffer (spans).
    #[allow(clippy::too_many_arguments)]
    pub fn moe_combine_rmsnorm<'b>(
        &self,
        y: &'b impl Input<f32>,
        routing: &'b impl Input<u32>,
        layout: RoutingLayout,
        weights: &'b impl Input<f32>,
        (res, h): (&'b impl Input<u16>, &'b mut impl Output<u16>),
        (norm, x): (&'b impl Input<u16>, &'b mut impl Output<u16>),
        shape: GroupedShape,
        eps: f32,
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::CombineNorm;
        let n = shape.n;
        if !n.is_multiple_of(8) || n > k::COMBINE_NORM_MAX_COLS {
            return Err(DecShapeError::Width { op, cols: n, most: k::COMBINE_NORM_MAX_COLS }.into());
        }
        let mut args = combine_args(op, Combined { y, routing, weights, res, out: &*h, out_name: "h" }, layout, shape)?;
        hold(op, "norm", norm, n.into())?;
        hold(op, "x", x, u64::from(shape.tokens) * u64::from(n))?;
        let vectors = [("y", y.device_va()), ("res", res.device_va()), ("h", h.device_va())];
        for (operand, va) in vectors.into_iter().chain([("norm", norm.device_va()), ("x", x.device_va())]) {
            if !va.is_multiple_of(16) {
                return Err(DecShapeError::Misaligned { op, operand, va }.into());
            }
        }
        args.extend([Arg::Va(norm.device_va()), Arg::Va(x.device_va())]);
        args.extend([Arg::Word(shape.tokens), Arg::Word(shape.top_k), Arg::Word(n), Arg::Word(eps.to_bits())]);
        // A CTA a token: the norm needs the whole row.
        Ok(Self::call(op, shape.tokens.min(self.sms * 8), k::combine_norm_threads(n), args))
    }

    /// A decode step's start, from the positions `pos` (i32 `[batch]`, each sequence's new token's index,
    /// in device memory): the RoPE tables `cos`, `sin` (f32 `[batch, head_dim / 2]`, `cos(pos[b] *
    /// theta^(-2i / head_dim))` computed in f64 and rounded to f32 once, see
    /// [`crate::kernels::decoder::rope_angle_ref`]) and `lens[b] = pos[b] + 1`, the lengths attention reads.
    pub fn rope_step<'b>(
        &self,
        pos: &'b impl Input<i32>,
        cos: &'b mut impl Output<f32>,
        sin: &'b mut impl Output<f32>,
        lens: &'b mut impl Output<i32>,
        [batch, head_dim]: [u32; 2],
        theta: f32,
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::RopeStep;
        nonzero(op, &[batch, head_dim / 2])?;
        if !head_dim.is_multiple_of(2) {
            return Err(DecShapeError::OddDim { op, dim: head_dim }.into());
        }
        let half = head_dim / 2;
        let table = u64::from(batch) * u64::from(half);
        hold(op, "pos", pos, batch.into())?;
        hold(op, "cos", cos, table)?;
        hold(op, "sin", sin, table)?;
        hold(op, "lens", lens, batch.into())?;
        let args = vec![
            Arg::Va(pos.device_va()),
            Arg::Va(cos.device_va()),
            Arg::Va(sin.device_va()),
            Arg::Va(lens.device_va()),
            Arg::Word(batch),
            Arg::Word(half),
            Arg::Word(theta.to_bits()),
        ];
        Ok(Self::call(op, self.grid(table, k::GATHER_THREADS), k::GATHER_THREADS, args))
    }

    /// Generates elements `start..start + out.len()` of tensor `tensor` under `seed` on the device, bit for
    /// bit what [`crate::libs::serving::weights::fill_bf16_centered`] computes on the host (`center`
    /// plus uniform in `[-a, a)`, rounded to bf16): a model's weights made in place, nothing uploaded.
    pub fn generate_bf16<'b>(
        &self,
        out: &'b mut impl Output<u16>,
        seed: u64,
        tensor: u64,
        start: u64,
        center: f32,
        a: f32,
    ) -> Result<DecCall<'b>, DecError> {
        let op = DecOp::Generate;
        let n = out.elements() as u64;
        if n == 0 {
            return Err(DecShapeError::ZeroSide { op }.into());
        }
        let base = weights::splitmix64(weights::splitmix64(seed) ^ tensor);
        let args = vec![
            Arg::Va(out.device_va()),
            Arg::Va(n),
            Arg::Va(base),
            Arg::Va(start),
            Arg::Word(center.to_bits()),
            Arg::Word(a.to_bits()),
        ];
        Ok(Self::call(op, self.grid(n, k::GATHER_THREADS), k::GATHER_THREADS, args))
    }

    fn launch_of<'k>(&'k self, call: &DecCall<'_>) -> Launch<'k, 's> {
        let mut l = Launch::new(&self.kernels[call.op as usize]).grid([call.grid, 1, 1]).block([call.block, 1, 1]);
        for a in &call.args {
            l = match *a {
                Arg::Va(v) => l.arg(v),
                Arg::Word(v) => l.arg(v),
            };
        }
        l
    }

    /// Runs `call` (one launch), taking and handing back the scope's token; on a failure the token comes
    /// back with it where the scope can still launch (none after a latch, as [`Gpu::launch`] says).
    pub fn launch(&self, gpu: Gpu<'s>, call: DecCall<'_>) -> Result<Gpu<'s>, (Option<Gpu<'s>>, DecError)> {
        match gpu.launch(&self.launch_of(&call)) {
            Ok(done) => Ok(done.gpu),
            Err(e) => Err((e.gpu, DecError::Device(e.error))),
        }
    }

    /// Adds `call`'s launch to `list` (nothing runs until the list is submitted).
    pub fn record<'k>(&'k self, list: &mut CmdListBuilder<'k, 's>, call: DecCall<'k>) -> Result<(), DecError> {
        list.add(&self.launch_of(&call))?;
        Ok(())
    }
}
