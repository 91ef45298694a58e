//! The arithmetic of the simulator's matmul references (`omega::kernels`, `src/core/kernels/matmul.rs`)
//! and of the tests' f64 checks: dot products over rows and bf16 conversions.
//!
//! It is a crate of its own so that the workspace's `Cargo.toml` can compile it optimised in every
//! profile (`[profile.dev.package.omega-refmath]`): the tests are debug builds, and an unoptimised dot
//! product is about 150 times slower, which would keep CI from running the matmul kernels at shapes that
//! matter. The functions are plain (not generic, not `#[inline]`), so their code is this crate's and
//! keeps its optimisation whoever calls them. No allocation but the results; one `unsafe` call, of the
//! fused chain compiled for FMA hardware once the CPU is seen to have it.

/// Accumulator lanes of the order-free dot products: independent partial sums the compiler keeps in
/// vector registers.
const LANES: usize = 8;

/// The f32 value of bf16 bit pattern `bits` (exact: bf16 is f32's top half).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// bf16 of `f`, rounded to nearest even; a NaN stays a NaN, made quiet (`(u >> 16) | 0x40`), as
/// `omega_convert_f32_bf16` does it.
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    (u.wrapping_add(0x7fff).wrapping_add((u >> 16) & 1) >> 16) as u16
}

/// f32 values of the little-endian bf16 bit patterns in `bytes` (two bytes each; a trailing odd byte
/// is ignored).
#[inline(never)]
pub fn widen_bf16(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(2).map(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect()
}

/// f32 values of the little-endian f32s in `bytes` (four bytes each; a trailing partial one is ignored).
#[inline(never)]
pub fn f32s_le(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Little-endian bytes of `values`.
#[inline(never)]
pub fn f32s_to_le(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `Σ_k x[k] · w[k]` in f32, in an order of its own (LANES partial sums, then their sum): what a
/// tensor-core kernel computes up to the order of its additions. Over the shorter of the two.
#[inline(never)]
pub fn dot(x: &[f32], w: &[f32]) -> f32 {
    let n = x.len().min(w.len());
    let (x, w) = (&x[..n], &w[..n]);
    let mut acc = [0f32; LANES];
    let (xc, wc) = (x.chunks_exact(LANES), w.chunks_exact(LANES));
    let tail: f32 = xc.remainder().iter().zip(wc.remainder()).map(|(a, b)| a * b).sum();
    for (a, b) in xc.zip(wc) {
        for i in 0..LANES {
            acc[i] += a[i] * b[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ_k x[k] · w[k]` as one chain of fused multiply-adds in increasing k from +0: `acc = fma(x[k], w[k],
/// acc)`, each rounded once to f32 — bit for bit what the SIMT kernels' `fmaf` loop computes. Over the
/// shorter of the two.
#[inline(never)]
pub fn dot_fma(x: &[f32], w: &[f32]) -> f32 {
    x.iter().zip(w).fold(0f32, |acc, (a, b)| a.mul_add(*b, acc))
}

/// `out[r * cols + c]` = the dot product of row `r` of `a` and row `c` of `b`, both of `k` elements per
/// row (`rows = a.len() / k`, `cols = b.len() / k`, `out` holding `rows * cols`): with [`dot_fma`]'s
/// arithmetic when `fused`, else [`dot`]'s. With `k == 0` every product is +0.
#[inline(never)]
pub fn products(a: &[f32], b: &[f32], k: usize, fused: bool, out: &mut [f32]) {
    if k == 0 {
        out.fill(0.0);
        return;
    }
    if fused {
        return products_fma(a, b, k, out);
    }
    let cols = b.len() / k;
    for (r, x) in a.chunks_exact(k).enumerate() {
        for (o, w) in out[r * cols..(r + 1) * cols].iter_mut().zip(b.chunks_exact(k)) {
            *o = dot(x, w);
        }
    }
}

/// [`products`] with [`dot_fma`]'s arithmetic. `f32::mul_add` is one correctly rounded fused
/// multiply-add wherever it runs, so the FMA-hardware build and the portable one (the C library's
/// `fmaf`, about 13 times slower) give the same bits.
fn products_fma(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") {
        // SAFETY: a `target_feature(enable = "fma")` function may run only on a CPU with FMA, which
        // the detection just above saw; the function is otherwise safe code over valid slices.
        unsafe { products_fma_x86(a, b, k, out) };
        return;
    }
    fma_chains(a, b, k, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn products_fma_x86(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) {
    fma_chains(a, b, k, out);
}

/// The fused chains, eight outputs of a row at a time (independent chains the CPU overlaps).
#[inline(always)]
fn fma_chains(a: &[f32], b: &[f32], k: usize, out: &mut [f32]) {
    const AT_ONCE: usize = 8;
    let cols = b.len() / k;
    for (r, x) in a.chunks_exact(k).enumerate() {
        let row = &mut out[r * cols..(r + 1) * cols];
        let mut c = 0;
        while c + AT_ONCE <= cols {
            let w: [&[f32]; AT_ONCE] = core::array::from_fn(|j| &b[(c + j) * k..(c + j + 1) * k]);
            let mut acc = [0f32; AT_ONCE];
            for (i, &xv) in x.iter().enumerate() {
                for j in 0..AT_ONCE {
                    acc[j] = xv.mul_add(w[j][i], acc[j]);
                }
            }
            row[c..c + AT_ONCE].copy_from_slice(&acc);
            c += AT_ONCE;
        }
        for (o, w) in row[c..].iter_mut().zip(b[c * k..].chunks_exact(k)) {
            *o = x.iter().zip(w).fold(0f32, |acc, (p, q)| p.mul_add(*q, acc));
        }
    }
}

/// `n` f32 uniform in [-1, 1) (multiples of 2^-23) from `seed`, by SplitMix64: the same values for the same
/// seed on every machine. For tests and examples, whose inputs at real shapes are hundreds of millions of
/// values.
#[inline(never)]
pub fn random_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // 24 random bits scaled to [0, 2), minus 1: both steps exact in f32.
            (z >> 40) as f32 * (1.0 / (1u32 << 23) as f32) - 1.0
        })
        .collect()
}

/// `n` bf16 bit patterns of [`random_f32`]'s values, rounded to nearest even (so in [-1, 1]).
#[inline(never)]
pub fn random_bf16(seed: u64, n: usize) -> Vec<u16> {
    random_f32(seed, n).into_iter().map(f32_to_bf16).collect()
}

/// The f32 values of bf16 bit patterns (exact).
#[inline(never)]
pub fn bf16s_to_f32(bits: &[u16]) -> Vec<f32> {
    bits.iter().map(|&b| bf16_to_f32(b)).collect()
}

/// `(Σ_k x[k] · w[k], Σ_k |x[k] · w[k]|)` in f64: a product of two f32 is exact in f64, so the only
/// error is the f64 additions' (relative 2^-53 per term), far below any f32 tolerance. The second sum
/// scales the tests' tolerance. Over the shorter of the two.
#[inline(never)]
pub fn dot_f64(x: &[f32], w: &[f32]) -> (f64, f64) {
    let (mut sum, mut mag) = (0f64, 0f64);
    for (a, b) in x.iter().zip(w) {
        let p = f64::from(*a) * f64::from(*b);
        sum += p;
        mag += p.abs();
    }
    (sum, mag)
}

/// [`dot_f64`] of every row of `a` with every row of `b` (`k` elements per row), row-major
/// `[rows, cols]`: the values and the magnitudes.
#[inline(never)]
pub fn products_f64(a: &[f32], b: &[f32], k: usize) -> (Vec<f64>, Vec<f64>) {
    if k == 0 {
        return (Vec::new(), Vec::new());
    }
    let (rows, cols) = (a.len() / k, b.len() / k);
    let (mut sums, mut mags) = (Vec::with_capacity(rows * cols), Vec::with_capacity(rows * cols));
    for x in a.chunks_exact(k) {
        for w in b.chunks_exact(k) {
            let (s, m) = dot_f64(x, w);
            sums.push(s);
            mags.push(m);
        }
    }
    (sums, mags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_conversions_round_to_nearest_even_and_keep_nan_quiet() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: even (1.0) wins; 1 + 3 * 2^-8 rounds up.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16(f32::from_bits(0xff81_2345)), 0xffc1);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "rounds up to infinity");
        for bits in [0u16, 0x8000, 0x3f80, 0xc2f7, 0x0001, 0x7f7f] {
            assert_eq!(f32_to_bf16(bf16_to_f32(bits)), bits);
        }
    }

    #[test]
    fn dot_products_agree_with_f64_and_the_fused_chain_rounds_once_per_step() {
        let x: Vec<f32> = (0..1001).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect();
        let w: Vec<f32> = (0..1001).map(|i| ((i * 53 % 89) as f32 - 44.0) / 32.0).collect();
        // Multiples of 2^-11 below 2^10 in magnitude: every partial sum is exact in f32.
        let (exact, _) = dot_f64(&x, &w);
        assert_eq!(f64::from(dot(&x, &w)), exact);
        assert_eq!(f64::from(dot_fma(&x, &w)), exact);
        // (1 + e)(1 - e) = 1 - e^2 is not an f32: a separate multiply rounds it to 1 and the sum with -1 is
        // 0; the fused step adds the exact product to -1 and keeps -e^2.
        let (a, b) = ([1.0, 1.0 + f32::EPSILON], [-1.0, 1.0 - f32::EPSILON]);
        assert_eq!(dot_fma(&a, &b), -f32::EPSILON * f32::EPSILON);
        assert_eq!(dot(&a, &b), 0.0);
        let mut out = vec![f32::NAN; 6];
        products(&[1.0, 2.0, 3.0, 4.0], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], 2, false, &mut out);
        assert_eq!(out, [1.0, 2.0, 3.0, 3.0, 4.0, 7.0]);
        // The fused products, in chains of eight and the rest, are dot_fma's bits.
        let (k, rows, cols) = (37, 3, 19);
        let a: Vec<f32> = (0..rows * k).map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 301.0).collect();
        let b: Vec<f32> = (0..cols * k).map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 299.0).collect();
        let mut out = vec![f32::NAN; rows * cols];
        products(&a, &b, k, true, &mut out);
        for (i, v) in out.iter().enumerate() {
            let want = dot_fma(&a[i / cols * k..][..k], &b[i % cols * k..][..k]);
            assert_eq!(v.to_bits(), want.to_bits(), "output {i}");
        }
        let (s, m) = products_f64(&[1.0, -2.0], &[3.0, 4.0], 2);
        assert_eq!((s, m), (vec![-5.0], vec![11.0]));
    }

    #[test]
    fn random_values_are_the_seeds_and_spread_over_the_interval() {
        let v = random_f32(7, 100_000);
        assert_eq!(v, random_f32(7, 100_000));
        assert_ne!(v[..8], random_f32(8, 8)[..]);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!(v.iter().filter(|&&x| x < -0.9).count() > 4_500 && v.iter().filter(|&&x| x > 0.9).count() > 4_500);
        let b = random_bf16(7, 1000);
        assert_eq!(bf16s_to_f32(&b), v[..1000].iter().map(|&x| bf16_to_f32(f32_to_bf16(x))).collect::<Vec<_>>());
    }
}

/// Where the keys and values of one attention row lie: key `i` is `k[i * stride + offset ..][..d]`, value
/// `i` the same elements of `v`.
#[derive(Clone, Copy, Debug)]
pub struct KvRows<'a> {
    /// Keys.
    pub k: &'a [f32],
    /// Values.
    pub v: &'a [f32],
    /// Elements from one key to the next.
    pub stride: usize,
    /// Elements before key 0.
    pub offset: usize,
    /// Keys (and values) the row attends.
    pub n: usize,
}

/// One attention row in f64: `out = Σ_i p_i v_i / Σ_i p_i` with `p_i = 2^(s_i - max s)`, `s_i = scale_log2 ·
/// (q · k_i)`, into `out` (`q.len()` elements); returns `(max s, Σ p)` (`(-inf, 0)` for no keys, out zero).
/// `round_p` rounds each `p_i` to bf16 for the weighted sum (what a tensor-core `P · V` product takes) while
/// the sum keeps it unrounded, as the decode kernel does. The dot products are f64 sums of exact f32
/// products.
#[inline(never)]
pub fn attend_row(q: &[f32], kv: KvRows<'_>, scale_log2: f64, round_p: bool, out: &mut [f64]) -> (f64, f64) {
    let d = q.len();
    out[..d].iter_mut().for_each(|o| *o = 0.0);
    if kv.n == 0 {
        return (f64::NEG_INFINITY, 0.0);
    }
    let row = |i: usize| kv.offset + i * kv.stride;
    let scores: Vec<f64> = (0..kv.n).map(|i| dot_f64(q, &kv.k[row(i)..row(i) + d]).0 * scale_log2).collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for (i, s) in scores.iter().enumerate() {
        let p = (s - max).exp2();
        sum += p;
        let w = if round_p { f64::from(bf16_to_f32(f32_to_bf16(p as f32))) } else { p };
        for (o, x) in out[..d].iter_mut().zip(&kv.v[row(i)..row(i) + d]) {
            *o += w * f64::from(*x);
        }
    }
    out[..d].iter_mut().for_each(|o| *o /= sum);
    (max, sum)
}
