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
