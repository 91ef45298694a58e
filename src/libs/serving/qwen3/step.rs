//! The decode step's command list (the order and rounding points of [`super::model`]'s text).

use crate::cmdlist::CmdListBuilder;
use crate::libs::attention::{DecodeShape, QkvAppendShape};
use crate::libs::elementwise::Rows;
use crate::libs::matmul::{GroupedShape, RouterOperands, Shape};

use crate::libs::decoder::DeviceSpan;
use crate::DeviceScalar;

use super::config::{Qwen3Config, TensorKind};
use super::model::{Buf, Qwen3Error, Qwen3Model};

/// An output's span borrowed for as long as any list lasts. A call holds its outputs mutably for the
/// list's life, and a step writes some buffers (h, the tokens) in several of its calls, which borrows of
/// the model's buffers cannot say: each recorded output names a span of its own, a 16-byte copy leaked
/// once per recorded call (a model records its step once). The buffer under the span is the model's,
/// which every list borrows (`record_step(&self)`).
fn out<T: DeviceScalar>(b: &Buf<'_, T>) -> &'static mut DeviceSpan<T> {
    Box::leak(Box::new(b.span))
}

/// The grouped products' shape at `batch` tokens: `n` by `k` per expert.
pub(super) fn moe_shape(c: &Qwen3Config, batch: u32, n: u32, k: u32) -> GroupedShape {
    GroupedShape { tokens: batch, top_k: c.top_k, experts: c.experts, n, k }
}

/// The dense products of a step at `batch` tokens: the fused q/k/v, o, the router, lm_head.
pub(super) fn dense_shapes(c: &Qwen3Config, batch: u32) -> [Shape; 4] {
    [
        Shape::new(batch, c.qkv_width(), c.hidden),
        Shape::new(batch, c.hidden, c.q_width()),
        Shape::new(batch, c.experts, c.hidden),
        Shape::new(batch, c.vocab, c.hidden),
    ]
}

impl<'s> Qwen3Model<'s> {
    /// The step's command list: recorded once, before the seal (its workspaces are allocated here), and
    /// submitted by [`Qwen3Model::step`] as often as there are tokens to decode.
    pub fn record_step(&self) -> Result<CmdListBuilder<'_, 's>, Qwen3Error> {
        self.record_step_labelled().map(|(list, _)| list)
    }

    /// [`Qwen3Model::record_step`] and the name of the step's operation each launch belongs to (one per
    /// launch, in the list's order: `"qkv_proj"`, `"attention"`, `"gate_up"`...), which a profile of the
    /// list's completion stamps ([`CmdListBuilder::stamps`]) adds up by operation.
    pub fn record_step_labelled(&self) -> Result<(CmdListBuilder<'_, 's>, Vec<&'static str>), Qwen3Error> {
        let mut labels = Vec::new();
        let (c, b, st) = (&self.cfg, self.batch, &self.st);
        let mm = self.serving.matmul();
        let [dqkv, dout, drouter, dhead] = dense_shapes(c, b);
        let rows = Rows { rows: b, cols: c.hidden };
        let max_pages = self.bounds().pages / b;
        let mut list = self.scope.cmdlist()?;
        let l = &mut list;
        let (ew, dec, att) = (&self.ew, &self.dec, &self.att);
        let (prefetch, fused_router) = (self.prefetch.get(), self.fused_router.get());
        dec.record(
            l,
            dec.rope_step(&st.pos.span, out(&st.cos), out(&st.sin), out(&st.lens), [b, c.head_dim], c.rope_theta)?,
        )?;
        labels.resize(l.len(), "rope_step");
        dec.record(
            l,
            dec.embed(self.w(TensorKind::Embed, None), &st.tokens.span, out(&st.h), [b, c.hidden, c.vocab])?,
        )?;
        labels.resize(l.len(), "embed");
        // Layer 0's input norm; every later norm of h (the next layer's input norm, the final norm) runs in
        // the combine's launch that wrote h.
        let norm0 = self.w(TensorKind::InputNorm, Some(0));
        ew.record(l, ew.rmsnorm::<u16>(&st.h.span, norm0, out(&st.x), rows, c.eps)?)?;
        labels.resize(l.len(), "input_norm");
        for layer in 0..c.layers {
            let w = |kind| self.w(kind, Some(layer));
            mm.add_bf16_to_bf16(l, &st.x.span, self.w_qkv(layer), &st.qkv.span, dqkv)?;
            labels.resize(l.len(), "qkv_proj");
            if let Some(how) = prefetch {
                // Read by o_proj and the router after qkv_append and attention, which leave HBM idle.
                dec.record(l, dec.l2_prefetch(w(TensorKind::O), Some(w(TensorKind::Router)), how)?)?;
                labels.resize(l.len(), "l2_prefetch");
            }
            let pool = &self.pools[layer as usize];
            let append =
                QkvAppendShape { batch: b, q_heads: c.q_heads, max_pages, advance: layer + 1 == c.layers, eps: c.eps };
            att.add_qkv_append(
                l,
                &st.qkv.span,
                [w(TensorKind::QNorm), w(TensorKind::KNorm)],
                [&st.cos.span, &st.sin.span],
                &st.qr.span,
                pool,
                &self.layout,
                &st.tables.span,
                &st.pos.span,
                append,
            )?;
            labels.resize(l.len(), "qkv_append");
            let decode = DecodeShape { merge: self.attn_merge.get(), ..DecodeShape::new(b, c.q_heads, max_pages) };
            att.add_paged_decode::<u16, u16>(
                l,
                &st.qr.span,
                pool,
                &self.layout,
                &st.tables.span,
                &st.lens.span,
                &st.o.span,
                decode,
            )?;
            labels.resize(l.len(), "attention");
            mm.add_bf16_to_bf16(l, &st.o.span, w(TensorKind::O), &st.a.span, dout)?;
            labels.resize(l.len(), "o_proj");
            ew.record(
                l,
                ew.add_rmsnorm::<u16>(&st.a.span, out(&st.h), w(TensorKind::PostNorm), out(&st.x), rows, c.eps)?,
            )?;
            labels.resize(l.len(), "add_post_norm");
            let up = moe_shape(c, b, 2 * c.expert_inter, c.hidden);
            if fused_router {
                let router = RouterOperands {
                    w: w(TensorKind::Router),
                    logits: &st.router.span,
                    topk: &st.topk.span,
                    weights: &st.tw.span,
                };
                let (x, gu) = (&st.x.span, w(TensorKind::GateUp));
                mm.add_grouped_bf16_from_router(l, x, router, gu, &st.routing.span, &st.gate_up.span, up)?;
                // The grouped call's first launch is the router (product, top k, route).
                labels.push("router");
            } else {
                mm.add_bf16(l, &st.x.span, w(TensorKind::Router), &st.router.span, drouter)?;
                labels.resize(l.len(), "router");
                let topk = dec.router_topk(&st.router.span, out(&st.topk), out(&st.tw), [b, c.experts, c.top_k])?;
                dec.record(l, topk)?;
                labels.resize(l.len(), "router_topk");
                let (x, gu) = (&st.x.span, w(TensorKind::GateUp));
                mm.add_grouped_bf16(l, x, gu, &st.topk.span, &st.routing.span, &st.gate_up.span, up)?;
                // The grouped call's first launch is the routing kernel, which a profile reports on its own.
                labels.push("moe_route");
            }
            labels.resize(l.len(), "gate_up");
            let slots = Rows { rows: b * c.top_k, cols: c.expert_inter };
            // f32 in, bf16 out: the cast the down product's input needs, in the same launch.
            ew.record(l, ew.swiglu_fused_to_bf16(&st.gate_up.span, out(&st.act), slots)?)?;
            labels.resize(l.len(), "swiglu");
            let down = moe_shape(c, b, c.hidden, c.expert_inter);
            mm.add_grouped_routed_bf16(l, &st.act.span, w(TensorKind::Down), &st.routing.span, &st.down.span, down)?;
            labels.resize(l.len(), "down");
            if let (Some(how), true) = (prefetch, layer + 1 < c.layers) {
                // Read by the next layer's q/k/v product after the combine and its input norm.
                dec.record(l, dec.l2_prefetch(self.w_qkv(layer + 1), None, how)?)?;
                labels.resize(l.len(), "l2_prefetch");
            }
            let layout = down.routing();
            let norm = match layer + 1 < c.layers {
                true => self.w(TensorKind::InputNorm, Some(layer + 1)),
                false => self.w(TensorKind::FinalNorm, None),
            };
            let combine = dec.moe_combine_rmsnorm(
                &st.down.span,
                &st.routing.span,
                layout,
                &st.tw.span,
                (&st.h.span, out(&st.h)),
                (norm, out(&st.x)),
                down,
                c.eps,
            )?;
            dec.record(l, combine)?;
            labels.resize(l.len(), "combine_norm");
        }
        mm.add_bf16(l, &st.x.span, self.w(TensorKind::LmHead, None), &st.logits.span, dhead)?;
        labels.resize(l.len(), "lm_head");
        dec.record(l, dec.argmax(&st.logits.span, out(&st.tokens), [b, c.vocab])?)?;
        labels.resize(l.len(), "argmax");
        Ok((list, labels))
    }
}
