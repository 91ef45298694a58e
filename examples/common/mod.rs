//! What the GPU harness programs under examples/ (hello_gpu, gpu_suite, gpu_bench, doctor) share: the
//! device line and the simulator's banner, the run's seed and random inputs, poisoned outputs, and the
//! timing helpers. Each program includes it with `#[path = "common/mod.rs"] mod common;` (examples are
//! separate crates, and this is not a program of its own: cargo builds only examples/*.rs).

#![allow(dead_code)] // each program uses part of it

use std::time::Instant;

use rand::{Rng, SeedableRng};

/// `NAME (sm_XY, N SMs, M MiB, driver D)`: the open device, as every program names it.
pub fn device_line(info: &omega::DeviceInfo) -> String {
    format!(
        "{} (sm_{}{}, {} SMs, {} MiB, driver {})",
        info.name,
        info.arch_major,
        info.arch_minor,
        info.sm_count,
        info.memory_bytes >> 20,
        info.driver_version
    )
}

/// True on the simulator, whose times are its virtual clock's or host time, never a GPU's.
pub fn is_sim(platform: &str) -> bool {
    platform == "sim"
}

/// A fresh seed for each run (print it, so a failure can be replayed): the clock's nanoseconds, the
/// process id in the high half so two runs started in the same tick differ.
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 32
}

/// The generator of a run's random inputs, from `seed`.
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `n` random f32 in ±1e6: large enough that a dropped or doubled term shows in the sum's bits.
pub fn random_f32(rng: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1e6f32..1e6)).collect()
}

/// A device output of `n` f32, poisoned with NaN so an element the kernel never wrote cannot pass a
/// bit-exact check.
pub fn poisoned_f32<'s>(s: &'s omega::Scope<'s>, n: usize) -> omega::Result<omega::Mem<'s, omega::Data<f32>>> {
    let mut m = s.alloc::<f32>(n)?;
    m.fill(f32::NAN)?;
    Ok(m)
}

/// The indices where `got` and `want` differ bit for bit (NaN payloads and signed zeros included).
pub fn mismatches(got: &[f32], want: &[f32]) -> Vec<usize> {
    (0..got.len().max(want.len()))
        .filter(|&i| got.get(i).map(|v| v.to_bits()) != want.get(i).map(|v| v.to_bits()))
        .collect()
}

/// The `p`-quantile (0..=1) of `v`, nearest rank; sorts `v`.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Microseconds since `t`.
pub fn us_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}
