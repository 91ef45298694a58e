//! The attention cases and their f64 references, shared by tests/attention_lib.rs (sim), the GPU suite
//! (examples/suite/attention.rs) and examples/attn_bench.rs (`#[path]` modules).
//!
//! A paged case is a random bf16 pool, a batch of ragged lengths and page tables whose pages are a shuffled
//! permutation of the pool's (so neighbouring tokens of one sequence live far apart), the unused slots of
//! each table row set to -1 (a kernel that read past a sequence's pages would flag them).
//!
//! References: [`omega_refmath::attend_row`] in f64 over the same inputs, with the queries rounded to bf16
//! for the paged kernels (their tensor cores take bf16) and nothing else rounded. Tolerance for the paged
//! kernels: they round each softmax weight p to bf16 (relative 2^-9) for `P · V`, while the sum of the
//! weights keeps them unrounded, so an output is off by at most about `2^-8 · max|v|`; with a bf16 output
//! another 2^-9 of it. `2^-7 · max|v|` leaves a factor of 2 and still catches a lost or doubled tile (a
//! sixteenth of the weight of a 256-token sequence moves the output by far more). The dense f32 kernel is
//! f32 throughout: `1e-4 · max|v|` covers its online softmax's rescalings and the f32 sums over 4096 keys.
#![allow(dead_code)]

use omega::libs::attention::{Attention, AttentionError, DecodeShape, Elem, Failed, GqaShape, Info, KvLayout};
use omega::{Gpu, Scope};
use omega_refmath::{self as math, KvRows};

/// What an output holds before a call: a NaN no attention of finite inputs gives.
pub const POISON: f32 = f32::from_bits(0x7fc0_dead);
const POISON_BF16: u16 = 0x7fc1;

/// A paged decode case: the pool, its layout, the tables and lengths, the queries.
#[derive(Clone)]
pub struct PagedCase {
    pub layout: KvLayout,
    pub q_heads: u32,
    pub max_pages: u32,
    pub lens: Vec<i32>,
    pub tables: Vec<i32>,
    pub pool: Vec<u16>,
    pub q: Vec<f32>,
}

/// A little generator of its own (splitmix64), so the shuffles replay from the seed alone.
pub struct Mix(pub u64);

impl Mix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

impl PagedCase {
    /// Sequences of `lens` tokens over pages of `page_tokens`, `kv_heads` x `head_dim`, `q_heads` query
    /// heads, `spare` unused pages in the pool.
    pub fn new(
        seed: u64,
        page_tokens: u32,
        kv_heads: u32,
        head_dim: u32,
        q_heads: u32,
        lens: &[u32],
        spare: u32,
    ) -> Self {
        let per_seq: Vec<u32> = lens.iter().map(|&l| l.div_ceil(page_tokens).max(1)).collect();
        let max_pages = *per_seq.iter().max().expect("a sequence");
        let pages = per_seq.iter().sum::<u32>() + spare;
        let mut order: Vec<i32> = (0..pages as i32).collect();
        let mut mix = Mix(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, mix.below(i as u64 + 1) as usize);
        }
        let mut tables = vec![-1i32; lens.len() * max_pages as usize];
        let mut next = 0;
        for (b, &n) in per_seq.iter().enumerate() {
            for s in 0..n as usize {
                tables[b * max_pages as usize + s] = order[next];
                next += 1;
            }
        }
        let layout = KvLayout::new(page_tokens, kv_heads, head_dim, pages);
        let elems = layout.check().expect("a sound layout") as usize;
        let pool = math::random_bf16(seed ^ 0x5eed, elems);
        let q = math::random_f32(seed ^ 0x9e11, lens.len() * (q_heads * head_dim) as usize);
        PagedCase { layout, q_heads, max_pages, lens: lens.iter().map(|&l| l as i32).collect(), tables, pool, q }
    }

    pub fn batch(&self) -> u32 {
        self.lens.len() as u32
    }

    /// The f64 reference of every sequence's output `[batch][q_heads][head_dim]`, and `max|v|` over the
    /// values the sequences read.
    pub fn reference(&self, scale: f32) -> (Vec<f64>, f64) {
        let l = self.layout;
        let d = l.head_dim as usize;
        let group = self.q_heads / l.kv_heads;
        let mut out = vec![0f64; self.q.len()];
        let mut vmax = 0f64;
        for (b, &len) in self.lens.iter().enumerate() {
            for kvh in 0..l.kv_heads {
                let (mut kf, mut vf) = (Vec::new(), Vec::new());
                for t in 0..len as u64 {
                    let page =
                        self.tables[b * self.max_pages as usize + (t / u64::from(l.page_tokens)) as usize] as u64;
                    let at = (page * l.page_stride
                        + u64::from(kvh) * l.head_stride
                        + (t % u64::from(l.page_tokens)) * d as u64) as usize;
                    kf.extend(math::bf16s_to_f32(&self.pool[at..at + d]));
                    vf.extend(math::bf16s_to_f32(&self.pool[at + l.v_offset as usize..at + l.v_offset as usize + d]));
                }
                vmax = vf.iter().fold(vmax, |m, &x| m.max(f64::from(x).abs()));
                for r in 0..group {
                    let row = (b * self.q_heads as usize + (kvh * group + r) as usize) * d;
                    let q: Vec<f32> =
                        self.q[row..row + d].iter().map(|&x| math::bf16_to_f32(math::f32_to_bf16(x))).collect();
                    let kv = KvRows { k: &kf, v: &vf, stride: d, offset: 0, n: len as usize };
                    let scale_log2 = f64::from(scale) * std::f64::consts::LOG2_E;
                    math::attend_row(&q, kv, scale_log2, false, &mut out[row..row + d]);
                }
            }
        }
        (out, vmax)
    }

    /// The host copy of what the append kernel writes: sequence b's rows of `k_new` and `v_new`
    /// (`[batch][kv_heads][head_dim]` bf16) at position `pos[b]`, through its table.
    pub fn append(&mut self, pos: &[u32], k_new: &[u16], v_new: &[u16]) {
        let l = self.layout;
        let (d, pt) = (l.head_dim as usize, u64::from(l.page_tokens));
        for (b, &p) in pos.iter().enumerate() {
            let page = self.tables[b * self.max_pages as usize + (u64::from(p) / pt) as usize] as u64;
            for h in 0..l.kv_heads as usize {
                let at = (page * l.page_stride + h as u64 * l.head_stride + (u64::from(p) % pt) * d as u64) as usize;
                let src = (b * l.kv_heads as usize + h) * d;
                self.pool[at..at + d].copy_from_slice(&k_new[src..src + d]);
                let v = at + l.v_offset as usize;
                self.pool[v..v + d].copy_from_slice(&v_new[src..src + d]);
            }
        }
    }

    /// Bytes of K and V the sequences hold.
    pub fn kv_bytes(&self) -> u64 {
        self.lens.iter().map(|&l| l as u64).sum::<u64>() * self.layout.token_bytes()
    }
}

/// The paged kernels' tolerance for values of at most `vmax` (module docs).
pub fn paged_tolerance(vmax: f64) -> f64 {
    vmax.max(1e-30) / 128.0
}

/// The dense kernel's tolerance (module docs).
pub fn dense_tolerance(vmax: f64) -> f64 {
    vmax.max(1e-30) * 1e-4
}

/// The f64 reference of a dense GQA call: out `[q_rows][q_heads][head_dim]`, and `max|v|`.
pub fn dense_reference(q: &[f32], k: &[f32], v: &[f32], s: GqaShape) -> (Vec<f64>, f64) {
    let d = s.head_dim as usize;
    let row_elems = s.kv_heads as usize * d;
    let scale = s.scale.unwrap_or(1.0 / (s.head_dim as f32).sqrt());
    let scale_log2 = f64::from(scale) * std::f64::consts::LOG2_E;
    let mut out = vec![0f64; q.len()];
    for row in 0..s.q_rows as usize {
        let pos = (s.kv_len - s.q_rows) as usize + row;
        let n = if s.causal { pos + 1 } else { s.kv_len as usize };
        for h in 0..s.q_heads as usize {
            let at = (row * s.q_heads as usize + h) * d;
            let kvh = h / (s.q_heads / s.kv_heads) as usize;
            let kv = KvRows { k, v, stride: row_elems, offset: kvh * d, n };
            math::attend_row(&q[at..at + d], kv, scale_log2, false, &mut out[at..at + d]);
        }
    }
    let vmax = v[..s.kv_len as usize * row_elems].iter().fold(0f64, |m, &x| m.max(f64::from(x).abs()));
    (out, vmax)
}

/// The largest error of `got` against `want`, or the first element past `tol` (a NaN fails).
pub fn compare(what: &str, got: &[f32], want: &[f64], tol: f64) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} values, want {}", got.len(), want.len()));
    }
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (f64::from(g) - w).abs();
        // A NaN fails too: it is not within any tolerance.
        if e.is_nan() || e > tol {
            return Err(format!("{what}: element {i} is {g}, want {w} (error {e:.3e}, tolerance {tol:.3e})"));
        }
        worst = worst.max(e);
    }
    Ok(worst)
}

/// bf16 values widened.
pub fn widen(bits: &[u16]) -> Vec<f32> {
    math::bf16s_to_f32(bits)
}

/// An output element type the tests poison and widen.
pub trait Out: Elem {
    const POISON: Self;
    fn widen(v: &[Self]) -> Vec<f32>;
}
impl Out for f32 {
    const POISON: f32 = POISON;
    fn widen(v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }
}
impl Out for u16 {
    const POISON: u16 = POISON_BF16;
    fn widen(v: &[u16]) -> Vec<f32> {
        widen(v)
    }
}

/// A query element type: f32 as drawn, or bf16 of it.
pub trait Query: Elem {
    fn from_f32(v: &[f32]) -> Vec<Self>;
}
impl Query for f32 {
    fn from_f32(v: &[f32]) -> Vec<f32> {
        v.to_vec()
    }
}
impl Query for u16 {
    fn from_f32(v: &[f32]) -> Vec<u16> {
        v.iter().map(|&x| omega_refmath::f32_to_bf16(x)).collect()
    }
}

/// A decode call's output widened to f32 with the call's info, or the library's failure.
pub type DecodeOutcome = Result<(Vec<f32>, Info), AttentionError>;

/// Runs `case` through the library (every buffer device-only, the output poisoned first), returning the output widened and the call's info, or its failure.
pub fn decode<'s, Q: Query, O: Out>(
    s: &'s Scope<'s>,
    gpu: Gpu<'s>,
    att: &Attention<'s>,
    case: &PagedCase,
    shape: DecodeShape,
) -> (Option<Gpu<'s>>, DecodeOutcome) {
    let bufs = (|| {
        let q = s.alloc_device_from(&Q::from_f32(&case.q))?;
        let pool = s.alloc_device_from(&case.pool)?;
        let tables = s.alloc_device_from(&case.tables)?;
        let lens = s.alloc_device_from(&case.lens)?;
        let out = s.alloc_device_from(&vec![O::POISON; case.q.len()])?;
        Ok::<_, omega::Error>((q, pool, tables, lens, out))
    })();
    let (q, pool, tables, lens, mut out) = match bufs {
        Ok(b) => b,
        Err(e) => return (Some(gpu), Err(e.into())),
    };
    match att.paged_decode(gpu, &q, &pool, &case.layout, &tables, &lens, &mut out, shape) {
        Ok(done) => {
            let got = out.to_vec().map(|v| O::widen(&v)).map_err(AttentionError::from);
            (Some(done.gpu), got.map(|g| (g, done.info)))
        }
        // No token after a latch: the caller's scope ends latched, and says so.
        Err(Failed { gpu, error, .. }) => (gpu, Err(error)),
    }
}

/// The fused QKV append's case: random fused QKV rows, QK-norm weights around 1, RoPE tables of
/// positions far from 0, a paged pool with room at each sequence's position.
pub struct QkvCase {
    pub paged: PagedCase,
    pub pos: Vec<u32>,
    pub qkv: Vec<u16>,
    pub norms: Vec<u16>,
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

/// What a fused append left: the pool, the lengths and the stored q.
pub type QkvOutcome = (Vec<u16>, Vec<i32>, Vec<u16>);

/// The QK-norm's epsilon in the fused append's cases.
pub const QKV_EPS: f32 = 1e-6;

impl QkvCase {
    /// `(q_heads, kv_heads, head_dim)` over pages of `page` tokens, one sequence at each of `pos`.
    pub fn new(seed: u64, (q_heads, kv_heads, d): (u32, u32, u32), page: u32, pos: &[u32]) -> Self {
        let seed = seed ^ u64::from(d) ^ u64::from(q_heads) << 16;
        let paged = PagedCase::new(seed, page, kv_heads, d, q_heads, &pos.iter().map(|p| p + 1).collect::<Vec<_>>(), 2);
        let rows = pos.len() * ((q_heads + 2 * kv_heads) * d) as usize;
        let norms =
            math::random_f32(seed ^ 22, 2 * d as usize).iter().map(|&x| math::f32_to_bf16(1.0 + 0.25 * x)).collect();
        // Positions scaled so the angles reach past 2^16: the tables' rounding is part of the check.
        let angles: Vec<u32> = pos.iter().map(|p| p * 997).collect();
        let (cos, sin) = omega::kernels::elementwise::rope_tables(&angles, d, 1e6);
        QkvCase { paged, pos: pos.to_vec(), qkv: math::random_bf16(seed ^ 21, rows), norms, cos, sin }
    }

    fn dims(&self) -> (usize, usize, usize, usize) {
        let l = self.paged.layout;
        (self.pos.len(), self.paged.q_heads as usize, l.kv_heads as usize, l.head_dim as usize)
    }

    /// Runs the append (advancing the lengths) with every buffer device-only and q poisoned first.
    pub fn run<'s>(&self, s: &'s Scope<'s>, gpu: Gpu<'s>, att: &Attention<'s>) -> Result<QkvOutcome, String> {
        use omega::libs::attention::QkvAppendShape;
        let e = |e: omega::Error| e.to_string();
        let (b, q_heads, _, d) = self.dims();
        let mut pool = s.alloc_device_from(&self.paged.pool).map_err(e)?;
        let tables = s.alloc_device_from(&self.paged.tables).map_err(e)?;
        let mut lens = s.alloc_device_from(&self.pos.iter().map(|&p| p as i32).collect::<Vec<_>>()).map_err(e)?;
        let x = s.alloc_device_from(&self.qkv).map_err(e)?;
        let qn = s.alloc_device_from(&self.norms[..d]).map_err(e)?;
        let kn = s.alloc_device_from(&self.norms[d..]).map_err(e)?;
        let (c, sn) = (s.alloc_device_from(&self.cos).map_err(e)?, s.alloc_device_from(&self.sin).map_err(e)?);
        let mut q = s.alloc_device_from(&vec![POISON_BF16; b * q_heads * d]).map_err(e)?;
        let shape = QkvAppendShape {
            batch: b as u32,
            q_heads: q_heads as u32,
            max_pages: self.paged.max_pages,
            advance: true,
            eps: QKV_EPS,
        };
        let layout = self.paged.layout;
        let done = att
            .qkv_append(gpu, &x, [&qn, &kn], [&c, &sn], &mut q, &mut pool, &layout, &tables, &mut lens, shape)
            .map_err(|f| f.error.to_string())?;
        if done.info.launches != 1 {
            return Err(format!("{} launches; the fused append is one", done.info.launches));
        }
        Ok((pool.to_vec().map_err(e)?, lens.to_vec().map_err(e)?, q.to_vec().map_err(e)?))
    }

    /// The K rows the pool holds at each sequence's position (`[batch][kv_heads][head_dim]`).
    fn k_rows(&self, pool: &[u16]) -> Vec<u16> {
        let (p, (d, pt)) =
            (&self.paged, (self.paged.layout.head_dim as usize, u64::from(self.paged.layout.page_tokens)));
        let mut rows = Vec::new();
        for (b, &pos) in self.pos.iter().enumerate() {
            let page = p.tables[b * p.max_pages as usize + (u64::from(pos) / pt) as usize] as u64;
            for h in 0..u64::from(p.layout.kv_heads) {
                let at = page * p.layout.page_stride + h * p.layout.head_stride + (u64::from(pos) % pt) * d as u64;
                rows.extend_from_slice(&pool[at as usize..at as usize + d]);
            }
        }
        rows
    }

    /// Checks an outcome: q and the new K rows against the f64 norm + rotation (the bounds of
    /// `rope_f64`, the norm's relative error carried in, one bf16 rounding), the lengths advanced, and
    /// the pool holding exactly the new K rows and the V rows as given, nothing else touched.
    pub fn check(&mut self, (pool, lens, q): QkvOutcome) -> Result<String, String> {
        use omega::kernels::elementwise::{bf16_bound, first_miss, rmsnorm_f64, rope_f64};
        let (b, q_heads, kv_heads, d) = self.dims();
        let heads = q_heads + 2 * kv_heads;
        if lens != self.pos.iter().map(|&p| p as i32 + 1).collect::<Vec<_>>() {
            return Err(format!("lengths {lens:?}: each should have advanced by one from {:?}", self.pos));
        }
        let pre = (d as f64 + 16.0) * f64::powi(2.0, -23);
        let (mut want, mut tol) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for t in 0..b {
            let (c, s) = (&self.cos[t * d / 2..][..d / 2], &self.sin[t * d / 2..][..d / 2]);
            for h in 0..q_heads + kv_heads {
                let which = usize::from(h >= q_heads);
                let row = widen(&self.qkv[(t * heads + h) * d..][..d]);
                let (normed, _) = rmsnorm_f64(&row, &widen(&self.norms[which * d..][..d]), d, QKV_EPS);
                let (w, mut bound) = rope_f64(&normed, c, s, 1, d, pre);
                bf16_bound(&w, &mut bound);
                want[which].extend(w);
                tol[which].extend(bound);
            }
        }
        let k = self.k_rows(&pool);
        for (what, got, i) in [("q", &q, 0), ("k", &k, 1)] {
            if let Some((at, g, w, t)) = first_miss(&widen(got), &want[i], &tol[i]) {
                return Err(format!("{what}[{at}] = {g}, want {w} within {t:.2e}"));
            }
        }
        let v: Vec<u16> =
            (0..b).flat_map(|t| self.qkv[(t * heads + q_heads + kv_heads) * d..][..kv_heads * d].to_vec()).collect();
        self.paged.append(&self.pos, &k, &v);
        if pool != self.paged.pool {
            return Err("the pool differs outside the new K rows, or in the V rows".into());
        }
        Ok(format!("{q_heads}/{kv_heads}/{d}: q and k within bounds, v exact, lengths advanced"))
    }
}
