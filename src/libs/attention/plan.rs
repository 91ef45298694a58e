//! Shapes, the KV layout, and the split planner of the decode kernels.

use crate::kernels::attention::{
    DecodeForm, CLUSTER_MAX_SPLITS, COMBINE_MAX_SPLITS, DECODE_DEEP_STAGES, DECODE_HEAD_DIMS, DECODE_STAGES,
    DECODE_TILE, DECODE_WARPS,
};

use super::error::{LayoutError, ShapeError};

/// Where a paged KV pool keeps its bf16 rows (every count in elements): page `p` of KV head `h` holds its
/// K rows at `p * page_stride + h * head_stride`, token-major with `head_dim` contiguous elements a token,
/// and its V rows `v_offset` further. A 16-token tile of a page is then two contiguous runs of 16 rows
/// (K, V), which the decode kernels read whole with 16-byte loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvLayout {
    /// Tokens per page: a positive multiple of 16 (16 and 64 are the tested sizes).
    pub page_tokens: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Elements per head and token: 32, 64 or 128.
    pub head_dim: u32,
    /// Pages in the pool.
    pub pages: u32,
    /// Elements from one KV head's rows of a page to the next head's.
    pub head_stride: u64,
    /// Elements from a head's K rows to its V rows.
    pub v_offset: u64,
    /// Elements from one page to the next.
    pub page_stride: u64,
}

impl KvLayout {
    /// The packed layout: per page, every head's K rows (`page_tokens * head_dim` each), then every head's
    /// V rows.
    pub const fn new(page_tokens: u32, kv_heads: u32, head_dim: u32, pages: u32) -> KvLayout {
        let head_stride = page_tokens as u64 * head_dim as u64;
        let v_offset = kv_heads as u64 * head_stride;
        KvLayout { page_tokens, kv_heads, head_dim, pages, head_stride, v_offset, page_stride: 2 * v_offset }
    }

    /// Elements of the pool (`pages * page_stride`), or the refusal of a layout the kernels cannot read.
    pub fn check(&self) -> Result<u64, LayoutError> {
        if self.page_tokens == 0 || !self.page_tokens.is_multiple_of(DECODE_TILE) {
            return Err(LayoutError::PageTokens { page_tokens: self.page_tokens });
        }
        if !DECODE_HEAD_DIMS.contains(&self.head_dim) {
            return Err(LayoutError::HeadDim { head_dim: self.head_dim });
        }
        if self.kv_heads == 0 {
            return Err(LayoutError::Zero { what: "kv_heads" });
        }
        if self.pages == 0 {
            return Err(LayoutError::Zero { what: "pages" });
        }
        let rows = u64::from(self.page_tokens) * u64::from(self.head_dim);
        let heads = u64::from(self.kv_heads - 1).checked_mul(self.head_stride).and_then(|x| x.checked_add(rows));
        let heads = heads.ok_or(LayoutError::Overflow { pages: self.pages, page_stride: self.page_stride })?;
        let stride = |which, value: u64, needs: u64| {
            if value.is_multiple_of(8) && value >= needs {
                Ok(())
            } else {
                Err(LayoutError::Stride { which, value, needs })
            }
        };
        // One head's K rows fit below the next head's; every head's K rows below V; K and V below the next page.
        stride("head_stride", self.head_stride, if self.kv_heads > 1 { rows } else { 0 })?;
        stride("v_offset", self.v_offset, heads)?;
        stride("page_stride", self.page_stride, self.v_offset.saturating_add(heads))?;
        let elems = u64::from(self.pages)
            .checked_mul(self.page_stride)
            .filter(|e| e.checked_mul(2).is_some_and(|b| b <= i64::MAX as u64));
        elems.ok_or(LayoutError::Overflow { pages: self.pages, page_stride: self.page_stride })
    }

    /// Bytes of one token's K and V rows over every head.
    pub fn token_bytes(&self) -> u64 {
        2 * 2 * u64::from(self.kv_heads) * u64::from(self.head_dim)
    }
}

/// A decode call: `batch` sequences of one query token each, their page tables `[batch][max_pages]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeShape {
    /// Sequences.
    pub batch: u32,
    /// Query heads (a whole number of groups of the layout's KV heads, at most 16 per group).
    pub q_heads: u32,
    /// Page table slots per sequence: a sequence holds at most `max_pages * page_tokens` tokens.
    pub max_pages: u32,
    /// The KV split: 0 lets the planner choose (every SM busy), otherwise that many splits (at most 256;
    /// fewer when the longest sequence has fewer tiles).
    pub splits: u32,
    /// The softmax scale; `None` is `1 / sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// How the splits' partials become the output.
    pub merge: Merge,
    /// The decode kernel's pipeline stages a warp: 0 lets the planner choose ([`decode_plan`]: 2), otherwise
    /// [`DECODE_STAGES`] or [`DECODE_DEEP_STAGES`].
    pub stages: u32,
}

impl DecodeShape {
    /// `batch` sequences of `q_heads` query heads, `max_pages` table slots each, planner's split and merge,
    /// the default scale.
    pub const fn new(batch: u32, q_heads: u32, max_pages: u32) -> DecodeShape {
        DecodeShape { batch, q_heads, max_pages, splits: 0, scale: None, merge: Merge::Auto, stages: 0 }
    }
}

/// How a decode merges its splits' partials into the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// The planner's choice ([`decode_plan`]).
    Auto,
    /// A second launch (`omega_attn_combine`) reads the partials the decode left in the workspace.
    Launch,
    /// The decode's own launch: the splits of a (sequence, KV head) are one cluster of at most
    /// [`CLUSTER_MAX_SPLITS`] CTAs and merge through distributed shared memory
    /// (`omega_paged_decode_cluster_bf16_d*`).
    Cluster,
    /// The decode's own launch: each CTA leaves its partial in the workspace and takes a ticket on its
    /// (sequence, KV head)'s counter, and the CTA drawing the last merges the pair's partials
    /// (`omega_paged_decode_ticket_bf16_d*`): the combine's work without its launch, any split count.
    Ticket,
}

/// A dense GQA call: `q_rows` query rows against `kv_len` keys; query row `i` sits at position
/// `kv_len - q_rows + i` (so the rows are any slice of a self-attention: the whole of it with `q_rows =
/// kv_len`, a prefill chunk, one decode step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GqaShape {
    /// Query heads (a multiple of `kv_heads`).
    pub q_heads: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Elements per head: 1 ..= 256.
    pub head_dim: u32,
    /// Keys (and values).
    pub kv_len: u32,
    /// Query rows: 1 ..= kv_len.
    pub q_rows: u32,
    /// Each row attends the keys up to its own position only.
    pub causal: bool,
    /// The softmax scale; `None` is `1 / sqrt(head_dim)`.
    pub scale: Option<f32>,
}

impl GqaShape {
    /// Self-attention over `seq` rows.
    pub const fn new(q_heads: u32, kv_heads: u32, head_dim: u32, seq: u32, causal: bool) -> GqaShape {
        GqaShape { q_heads, kv_heads, head_dim, kv_len: seq, q_rows: seq, causal, scale: None }
    }

    pub(crate) fn check(&self) -> Result<(), ShapeError> {
        for (what, v) in [("q_heads", self.q_heads), ("kv_heads", self.kv_heads), ("head_dim", self.head_dim)] {
            if v == 0 {
                return Err(ShapeError::Zero { what });
            }
        }
        if self.kv_len == 0 {
            return Err(ShapeError::Zero { what: "kv_len" });
        }
        if self.q_rows == 0 {
            return Err(ShapeError::Zero { what: "q_rows" });
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(ShapeError::Heads { q_heads: self.q_heads, kv_heads: self.kv_heads });
        }
        let max = crate::kernels::attention::GQA_MAX_HEAD_DIM;
        if self.head_dim > max {
            return Err(ShapeError::HeadDim { head_dim: self.head_dim, max });
        }
        if self.q_rows > self.kv_len {
            return Err(ShapeError::Rows { q_rows: self.q_rows, kv_len: self.kv_len });
        }
        Ok(())
    }
}

/// An append: one new token for each of `batch` sequences, written at position `lens[b]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendShape {
    /// Sequences.
    pub batch: u32,
    /// Page table slots per sequence.
    pub max_pages: u32,
    /// Store `lens[b] + 1` after the append (on the GPU), so the next decode call sees the token.
    pub advance: bool,
}

/// A fused append ([`crate::libs::attention::Attention::qkv_append`]): one fused QKV row for each of
/// `batch` sequences (`q_heads` query heads, then the layout's `kv_heads` key heads and as many value
/// heads), its token written at position `lens[b]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QkvAppendShape {
    /// Sequences.
    pub batch: u32,
    /// Query heads (a multiple of the layout's KV heads).
    pub q_heads: u32,
    /// Page table slots per sequence.
    pub max_pages: u32,
    /// Store `lens[b] + 1` after the append (on the GPU).
    pub advance: bool,
    /// The QK-norm's epsilon.
    pub eps: f32,
}

/// The decode kernels' split of the KV: `splits` CTAs per (sequence, KV head), each over
/// `tiles_per_split` 16-token tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Splits.
    pub splits: u32,
    /// 16-token tiles per split.
    pub tiles_per_split: u32,
}

/// What a decode CTA costs beyond its tiles, in tiles: its lengths, table and Q reads, the first tile's
/// latency before any sum, the warps' merge and the partial's write. At batch 1 and 1K tokens the call
/// (64 CTAs of 4 tiles, both launches) took 9.9 us on the H200, where streaming its 2 MB takes 0.5 us;
/// a tile at a CTA's share of the bandwidth (4 TB/s over 396 CTAs) takes 0.8 us, so the 3 or so
/// microseconds of dependent reads a CTA starts and ends with were taken as worth about 4 tiles; the
/// H100 sweep of session 16 (see [`split`]) agrees with any value from 1 to 16.
pub const CTA_OVERHEAD_TILES: u64 = 4;

/// The split for `pairs` (sequence, KV head) pairs whose longest sequence has `max_tokens` tokens, on a
/// device of `sms` SMs: the count `s` (at most 256, and at most one per four tiles, so each of a CTA's
/// warps has a tile) that minimises `ceil(pairs * s / sms) * (ceil(tiles / s) + CTA_OVERHEAD_TILES)`, the
/// tiles and starts of the SM that gets the most CTAs, the fewer splits on a tie (less for the combine to
/// merge). `forced` (not 0) takes that many instead (fewer when there are fewer tiles).
///
/// Why the SMs and not the CTAs they can hold (three an SM at head_dim 128, which the model counted until
/// session 16): an SM's CTAs share its bandwidth, so an SM given three CTAs of 11 tiles streams 33 tiles
/// no faster than one given one CTA of 32, and pays three starts and three partials. Every split from 1 to
/// 96 was timed on an H100 at 32/4/128, batch 1-64, KV 1K-32K (docs/perf/2026-12-07-s16-h100-libraries.md):
/// the best count gave one CTA an SM wherever the pairs allowed it (batch 1: 32 splits, batch 4: 8,
/// batch 16: 2) and no split at batch 64 (256 CTAs), which is what this model picks; counting three slots
/// an SM it took 94, 24, 6 and 3, and at batch 1 and 16K ran at 0.573 of the copy against 0.688, at batch
/// 4 and 4K at 0.649 against 0.739.
pub fn split(pairs: u64, max_tokens: u64, sms: u32, forced: u32) -> Split {
    split_at_most(pairs, max_tokens, sms, forced, COMBINE_MAX_SPLITS)
}

/// [`split`] with at most `most` splits (forced or chosen).
fn split_at_most(pairs: u64, max_tokens: u64, sms: u32, forced: u32, most: u32) -> Split {
    let tiles = max_tokens.div_ceil(u64::from(DECODE_TILE)).max(1);
    let splits = if forced > 0 {
        u64::from(forced).min(u64::from(most)).min(tiles)
    } else {
        let most = (tiles / u64::from(DECODE_WARPS)).clamp(1, u64::from(most));
        (1..=most).min_by_key(|&s| (split_cost(pairs, tiles, sms, s), s)).expect("at least one split")
    };
    let tps = tiles.div_ceil(splits);
    Split { splits: tiles.div_ceil(tps) as u32, tiles_per_split: tps.min(u64::from(u32::MAX)) as u32 }
}

/// The split model's cost of `splits` splits of `tiles` tiles over `pairs` pairs on `sms` SMs, in tiles:
/// the busiest SM's CTAs times a CTA's tiles and start ([`split`]).
fn split_cost(pairs: u64, tiles: u64, sms: u32, splits: u64) -> u64 {
    let (pairs, sms) = (pairs.max(1), u64::from(sms.max(1)));
    (pairs * splits).div_ceil(sms) * (tiles.div_ceil(splits) + CTA_OVERHEAD_TILES)
}

/// The most tiles a cluster CTA takes at the table's capacity for [`Merge::Auto`] to take the cluster form
/// over a wider split: measured in the Qwen3 decode step on the H200 (docs/perf/2026-12-04-s12-qwen3-step.md),
/// at a capacity of 2K tokens (16 tiles a split) the cluster form beat the planner's wider split and its
/// combine at batch 1 (503 against 516 us a step), 8 (968 / 1002) and 32, and at 4K (33 tiles) lost at batch
/// 1 (713 / 664) and 8 (1499 / 1439).
pub const CLUSTER_MAX_TILES: u32 = 16;

/// How a call's launches reach the GPU, which decides what a merge costs: [`Merge::Auto`] takes the
/// ticket where a call submits alone and the combine where it is listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submission {
    /// Submitted and waited for by the call ([`super::Attention::paged_decode`], the C entries): a second
    /// launch costs a whole submission and wait.
    Alone,
    /// Added to a command list ([`super::Attention::add_paged_decode`]): launches run back to back.
    Listed,
}

/// A decode's plan: its split and the entry's form, which says how its splits merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodePlan {
    /// The split.
    pub split: Split,
    /// [`DecodeForm::Split`] and the combine's launch ([`Merge::Launch`]), [`DecodeForm::Cluster`] or
    /// [`DecodeForm::Ticket`].
    pub form: DecodeForm,
    /// Pipeline stages a warp: [`DECODE_STAGES`] or [`DECODE_DEEP_STAGES`].
    pub stages: u32,
}

/// The most splits [`Merge::Auto`] merges in their cluster for that reason alone (the same work without
/// the combine's launch). Measured on the H100 (docs/perf/2026-12-07-s16-h100-libraries.md): clusters of 2
/// and 4 ran at the combine's speed or better (batch 16, 4K: 2 splits 0.824 of the copy; 4 splits 0.815
/// clustered, 0.808 by the combine), clusters of 8 slower (batch 4 at 8 splits: 4K 0.615 against 0.739,
/// 32K 0.858 against 0.901).
pub const CLUSTER_AUTO_MAX_SPLITS: u32 = 4;

/// The plan of a decode ([`split`]'s arguments, and the merge asked for). [`Merge::Auto`] takes the cluster
/// form when [`split`]'s choice has at most [`CLUSTER_AUTO_MAX_SPLITS`] splits, or when the best split of at
/// most [`CLUSTER_MAX_SPLITS`] gives a CTA at most [`CLUSTER_MAX_TILES`] tiles of the capacity (short
/// contexts, where the combine's launch and its dependent reads weigh more than the CTAs' longer slices);
/// otherwise [`split`]'s choice and the combine. A forced split past the cluster's size takes the combine,
/// and is refused with [`Merge::Cluster`]. Where `Auto` takes the wider split, a call submitted
/// [`Submission::Alone`] merges by ticket ([`Merge::Ticket`]) and a listed one by the combine: timed on the
/// H100 (session 18, docs/perf/2026-12-07-s18-h100-decode.md), a call alone waited 2-13 us less with the
/// ticket (batch 1, 32K: 44.0 against 57.0 us; 4K: 23.6 against 29.0), and in a list the ticket lost
/// (batch 1, 16K: 0.640 of the copy against 0.695; batch 4, 4K: 0.702 against 0.757; the decode step at
/// batch 1, 16K: 5024 against 4913 us), the last CTA's merge of every split being slower than the
/// combine's grid of them once the second launch costs no wait.
///
/// `stages` 0 takes [`DECODE_STAGES`]; [`DECODE_STAGES`] and [`DECODE_DEEP_STAGES`] are taken as they are,
/// others refused. Why not the deep pipeline where every CTA has an SM of its own (its 139 KB at head_dim
/// 128 allow one an SM): timed on the H100 beside the two-stage kernel in one job (session 17,
/// docs/perf/2026-12-07-s17-h100-decode.md), it lost at batch 1 to 16 (batch 4, 4K: 0.721 of the copy
/// against 0.732; 32K: 0.848 against 0.901; batch 1, 16K: 0.668 against 0.700) and won by 0.01 at most
/// at batch 64, so three tiles in flight a warp do not make a CTA's stream faster than one.
pub fn decode_plan(
    pairs: u64,
    max_tokens: u64,
    sms: u32,
    (forced, stages): (u32, u32),
    (merge, submission): (Merge, Submission),
) -> Result<DecodePlan, ShapeError> {
    if ![0, DECODE_STAGES, DECODE_DEEP_STAGES].contains(&stages) {
        return Err(ShapeError::Stages { stages, two: DECODE_STAGES, deep: DECODE_DEEP_STAGES });
    }
    let apart = split(pairs, max_tokens, sms, forced);
    let together = split_at_most(pairs, max_tokens, sms, forced, CLUSTER_MAX_SPLITS);
    let cluster = match merge {
        Merge::Launch | Merge::Ticket => false,
        Merge::Cluster if forced > CLUSTER_MAX_SPLITS => {
            return Err(ShapeError::Splits { splits: forced, max: CLUSTER_MAX_SPLITS })
        }
        Merge::Cluster => true,
        Merge::Auto if forced > CLUSTER_MAX_SPLITS => false,
        Merge::Auto => apart.splits <= CLUSTER_AUTO_MAX_SPLITS || together.tiles_per_split <= CLUSTER_MAX_TILES,
    };
    let (split, form) = match (cluster, merge) {
        (true, _) => (together, DecodeForm::Cluster),
        (false, Merge::Ticket) => (apart, DecodeForm::Ticket),
        (false, Merge::Auto) if submission == Submission::Alone => (apart, DecodeForm::Ticket),
        (false, _) => (apart, DecodeForm::Split),
    };
    let stages = if stages == 0 { DECODE_STAGES } else { stages };
    Ok(DecodePlan { split, form, stages })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packed_layout_passes_and_overlaps_are_refused() {
        let l = KvLayout::new(16, 4, 128, 10);
        assert_eq!(l.check(), Ok(10 * 2 * 4 * 16 * 128));
        let bad = KvLayout { v_offset: l.v_offset - 8, ..l };
        assert!(matches!(bad.check(), Err(LayoutError::Stride { which: "v_offset", .. })));
        assert!(matches!(KvLayout::new(8, 4, 128, 1).check(), Err(LayoutError::PageTokens { page_tokens: 8 })));
        assert!(matches!(KvLayout::new(16, 4, 96, 1).check(), Err(LayoutError::HeadDim { head_dim: 96 })));
    }

    #[test]
    fn splits_give_each_sm_one_cta_where_the_pairs_allow_and_cover_every_tile() {
        for (pairs, tokens) in [(4u64, 32768u64), (256, 32768), (4, 1), (16, 1000), (64, 4096)] {
            let s = split(pairs, tokens, 132, 0);
            let tiles = tokens.div_ceil(16);
            assert!(u64::from(s.splits) * u64::from(s.tiles_per_split) >= tiles);
            assert!(u64::from(s.splits - 1) * u64::from(s.tiles_per_split) < tiles, "no empty split: {s:?}");
            assert!(s.splits <= COMBINE_MAX_SPLITS);
        }
        // The H100 sweep's best counts at 32/4/128 (4 KV heads a sequence, 132 SMs): batch 1 at 4K-32K about
        // 32 splits, batch 4 at 4K-32K 8, batch 16 2, batch 64 none; one CTA an SM or, at batch 64, the
        // 256 the pairs need.
        for tokens in [4096, 16384, 32768] {
            let s = split(4, tokens, 132, 0);
            assert!((32..=33).contains(&s.splits), "batch 1, {tokens}: {s:?}");
            assert_eq!(split(16, tokens, 132, 0).splits, 8, "batch 4, {tokens}");
            assert_eq!(split(64, tokens, 132, 0).splits, 2, "batch 16, {tokens}");
            assert_eq!(split(256, tokens, 132, 0).splits, 1, "batch 64, {tokens}");
        }
        assert_eq!(split(4, 4096, 132, 7).splits, 7);
        assert_eq!(split(4, 4096, 132, 1000).splits, 256);
    }

    #[test]
    fn short_contexts_merge_in_clusters_and_long_ones_by_the_combine() {
        let plan = |pairs, tokens, forced, merge| {
            decode_plan(pairs, tokens, 132, (forced, 0), (merge, Submission::Listed)).unwrap()
        };
        // Qwen3's decode (4 KV heads a sequence) at capacities of 1K and 2K tokens, batch 1, 8 and 32:
        // clusters of at most 8, every tile covered.
        for (batch, tokens) in [(1u64, 1025u64), (8, 1025), (32, 1025), (1, 2045), (8, 2045), (32, 2045)] {
            let p = plan(4 * batch, tokens, 0, Merge::Auto);
            assert!(
                p.form == DecodeForm::Cluster && p.split.splits <= CLUSTER_MAX_SPLITS,
                "batch {batch}, {tokens}: {p:?}"
            );
            let tiles = tokens.div_ceil(16);
            assert!(u64::from(p.split.splits * p.split.tiles_per_split) >= tiles, "batch {batch}: {p:?}");
        }
        // At 4K and 16K tokens, batch 1 and 4: the split's own choice (32, 8) and its combine, not a
        // cluster of 8.
        for (batch, tokens) in [(1u64, 4117u64), (4, 4117), (1, 16385), (4, 16385)] {
            let p = plan(4 * batch, tokens, 0, Merge::Auto);
            assert!(
                p.form == DecodeForm::Split && p.split == split(4 * batch, tokens, 132, 0),
                "batch {batch}, {tokens}: {p:?}"
            );
        }
        // A split the planner keeps at 4 or fewer anyway merges in its cluster whatever the length.
        for batch in [8u64, 16, 64] {
            let p = plan(4 * batch, 32768, 0, Merge::Auto);
            assert!(
                p.form == DecodeForm::Cluster && p.split == split(4 * batch, 32768, 132, 0),
                "batch {batch}: {p:?}"
            );
        }
        // Forced merges and splits.
        assert_eq!(plan(4, 16385, 0, Merge::Cluster).split.splits, 8);
        assert_eq!(plan(4, 1025, 0, Merge::Launch).form, DecodeForm::Split);
        assert_eq!(plan(4, 1025, 9, Merge::Auto).form, DecodeForm::Split);
        assert_eq!(plan(4, 1025, 5, Merge::Auto).form, DecodeForm::Cluster);
        // The ticket takes the combine's split, any count.
        let ticket = plan(4, 16385, 0, Merge::Ticket);
        assert_eq!((ticket.form, ticket.split), (DecodeForm::Ticket, plan(4, 16385, 0, Merge::Launch).split));
        assert_eq!(plan(4, 16385, 40, Merge::Ticket).split.splits, 40);
        // A call alone merges the wider split by ticket, never a cluster it would not take listed.
        let alone = |pairs, tokens| decode_plan(pairs, tokens, 132, (0, 0), (Merge::Auto, Submission::Alone)).unwrap();
        assert_eq!((alone(4, 16385).form, alone(4, 16385).split), (DecodeForm::Ticket, ticket.split));
        assert_eq!(alone(4, 1025), DecodePlan { form: DecodeForm::Cluster, ..plan(4, 1025, 0, Merge::Auto) });
        assert_eq!(
            decode_plan(4, 1025, 132, (9, 0), (Merge::Cluster, Submission::Listed)),
            Err(ShapeError::Splits { splits: 9, max: CLUSTER_MAX_SPLITS })
        );
    }

    #[test]
    fn the_deep_pipeline_is_taken_only_when_asked_for() {
        let stages = |pairs, tokens, forced| {
            decode_plan(pairs, tokens, 132, (0, forced), (Merge::Auto, Submission::Listed)).map(|p| p.stages)
        };
        // Batch 1, 4, 16 and 64 at 32/4/128.
        for pairs in [4, 16, 64, 256] {
            assert_eq!(stages(pairs, 32768, 0), Ok(DECODE_STAGES), "{pairs} pairs");
        }
        assert_eq!(stages(256, 32768, DECODE_DEEP_STAGES), Ok(DECODE_DEEP_STAGES));
        assert_eq!(stages(4, 32768, DECODE_STAGES), Ok(DECODE_STAGES));
        assert_eq!(
            stages(4, 32768, 3),
            Err(ShapeError::Stages { stages: 3, two: DECODE_STAGES, deep: DECODE_DEEP_STAGES })
        );
    }
}
