//! Seeded bf16 weights that a PyTorch script reproduces bit for bit (`benches/torch/qwen_weights.py`).
//!
//! No model file can be downloaded where Omega is tested, so a model's weights are generated: element
//! `index` of tensor `tensor` under `seed` is a counter-based hash of the three (splitmix64's finalizer,
//! applied three times: `h = mix(mix(mix(seed) ^ tensor) ^ index)`), so any element is computed alone, in
//! any order, on any machine. Its top 24 bits `u` give `v = (u · 2⁻²³ − 1) · a` in f32 — the first two
//! steps are exact (24-bit integers, a power of two, a difference on the same grid), the product by `a`
//! is one f32 rounding, which numpy's float32 makes the same way — uniform in `[-a, a)`, then rounded to
//! bf16 to nearest, ties to even. Every step is integer or one IEEE f32 operation, which is why a numpy
//! (or pure Python) twin matches exactly.

/// splitmix64's step: the golden-ratio increment, then its finalizer.
pub fn splitmix64(z: u64) -> u64 {
    let z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of element `index` of tensor `tensor` under `seed`.
pub fn element_hash(seed: u64, tensor: u64, index: u64) -> u64 {
    splitmix64(splitmix64(splitmix64(seed) ^ tensor) ^ index)
}

/// `x` rounded to bf16, to nearest, ties to even (the bit pattern). `x` is finite (every generated value
/// is), so the carry into the exponent is the right rounding and no NaN needs keeping quiet.
pub fn bf16_rne(x: f32) -> u16 {
    let bits = x.to_bits();
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// Element `index` of tensor `tensor` under `seed`, uniform in `[-a, a)`, as f32 before the bf16 rounding.
pub fn uniform_f32(seed: u64, tensor: u64, index: u64, a: f32) -> f32 {
    let u = (element_hash(seed, tensor, index) >> 40) as f32;
    (u * (1.0 / 8_388_608.0) - 1.0) * a
}

/// Elements `start..start + out.len()` of tensor `tensor` under `seed`, uniform in `[-a, a]`, as bf16 bits.
pub fn fill_bf16(seed: u64, tensor: u64, start: u64, a: f32, out: &mut [u16]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = bf16_rne(uniform_f32(seed, tensor, start + i as u64, a));
    }
}

/// [`fill_bf16`] with every value moved by `center` before the rounding (one more f32 operation, the
/// sum): a norm's weights lie around 1.
pub fn fill_bf16_centered(seed: u64, tensor: u64, start: u64, center: f32, a: f32, out: &mut [u16]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = bf16_rne(center + uniform_f32(seed, tensor, start + i as u64, a));
    }
}

/// `n` elements of tensor `tensor` under `seed` from element 0 (see [`fill_bf16`]).
pub fn bf16_tensor(seed: u64, tensor: u64, n: usize, a: f32) -> Vec<u16> {
    let mut v = vec![0u16; n];
    fill_bf16(seed, tensor, 0, a, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2^-8 lies halfway between bf16 1.0 and 1 + 2^-7: even (1.0) wins; a hair above rounds up.
        assert_eq!(bf16_rne(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(bf16_rne(f32::from_bits(0x3f80_8001)), 0x3f81);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
        assert_eq!(bf16_rne(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16_rne(-2.0), 0xc000);
        for x in [0.3f32, -1.7, 1e-3, 123.456] {
            assert_eq!(half::bf16::from_f32(x).to_bits(), bf16_rne(x), "{x}");
        }
    }

    #[test]
    fn values_fill_the_range_and_depend_on_every_input() {
        let v: Vec<f32> = (0..4096).map(|i| uniform_f32(7, 3, i, 0.5)).collect();
        assert!(v.iter().all(|x| (-0.5..0.5).contains(x)));
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        // Uniform on [-0.5, 0.5): standard deviation 0.289; the mean of 4096 is within 5 sigma of 0.
        assert!(mean.abs() < 5.0 * 0.289 / 64.0, "mean {mean}");
        assert!(v.iter().any(|&x| x < -0.45) && v.iter().any(|&x| x > 0.45));
        assert_ne!(element_hash(7, 3, 0), element_hash(8, 3, 0));
        assert_ne!(element_hash(7, 3, 0), element_hash(7, 4, 0));
        assert_ne!(element_hash(7, 3, 0), element_hash(7, 3, 1));
        let mut tail = [0u16; 5];
        fill_bf16(7, 3, 100, 0.5, &mut tail);
        assert_eq!(tail[..], bf16_tensor(7, 3, 105, 0.5)[100..], "a slice is the tensor's own elements");
    }
}
