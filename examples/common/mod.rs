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

/// Bytes each way of the sync-speed measure of the host-pointer entries' goal ([`sync_speeds`]).
pub const SYNC_MEASURE_BYTES: usize = 256 << 20;

/// The session's sync speeds in GB/s, `(to the GPU, to the CPU)`: the best of five syncs each way of a
/// host-visible buffer of `bytes` (as `gpu_bench` measures them), in a session of its own, so call it
/// with no lock held. The host-pointer entries' goal is their wall time against their bytes at these
/// speeds plus their device time ([`HostCall::floor_us`]).
pub fn sync_speeds(bytes: usize) -> omega::Result<(f64, f64)> {
    let dev = omega::lock().open().map_err(|e| e.error)?;
    let r = dev.scope(|s, _gpu| -> omega::Result<(f64, f64)> {
        let mut m = s.alloc::<u8>(bytes)?;
        m.fill(0x5a)?;
        let mut best = [f64::MAX; 2];
        for _ in 0..5 {
            for (i, to_gpu) in [true, false].into_iter().enumerate() {
                let t = Instant::now();
                if to_gpu {
                    omega::session::runtime().sync_to_gpu(m.raw())?;
                } else {
                    omega::session::runtime().sync_to_cpu(m.raw())?;
                }
                best[i] = best[i].min(t.elapsed().as_secs_f64());
            }
        }
        Ok((bytes as f64 / best[0] / 1e9, bytes as f64 / best[1] / 1e9))
    });
    let speeds = r.value()?;
    println!("omega.sync_{}m_to_gpu_gbps {:.2}", bytes >> 20, speeds.0);
    println!("omega.sync_{}m_to_cpu_gbps {:.2}", bytes >> 20, speeds.1);
    Ok(speeds)
}

/// One host-pointer library entry's figures: the median wall time and device time of its calls, and
/// the bytes each call copies each way.
pub struct HostCall {
    pub wall_us: f64,
    pub device_us: f64,
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
}

impl HostCall {
    /// `timed` calls of an entry after three untimed ones (the first grows its staging), each `call`
    /// running it once and returning its info's `(device ns, h2d bytes, d2h bytes)`, or why it failed:
    /// the median wall and device times, and the last call's bytes.
    pub fn measure<E>(timed: usize, mut call: impl FnMut() -> Result<(u64, u64, u64), E>) -> Result<HostCall, E> {
        let (mut wall, mut dev, mut bytes) = (Vec::new(), Vec::new(), (0, 0));
        for i in 0..3 + timed.max(1) {
            let t = Instant::now();
            let (device_ns, h2d, d2h) = call()?;
            if i >= 3 {
                wall.push(us_since(t));
                dev.push(device_ns as f64 / 1e3);
            }
            bytes = (h2d, d2h);
        }
        Ok(HostCall {
            wall_us: median_of(&mut wall),
            device_us: median_of(&mut dev),
            h2d_bytes: bytes.0,
            d2h_bytes: bytes.1,
        })
    }

    /// The goal's floor: the bytes each way at `(to_gpu, to_cpu)` GB/s, plus the device time.
    pub fn floor_us(&self, (to_gpu, to_cpu): (f64, f64)) -> f64 {
        self.h2d_bytes as f64 / (to_gpu * 1e3) + self.d2h_bytes as f64 / (to_cpu * 1e3) + self.device_us
    }

    /// `omega.<tag>_us`, `_device_us`, `_floor_us` and `_of_floor` (wall over floor; the goal is <= 1.1),
    /// after a `#` line with the bytes.
    pub fn print(&self, tag: &str, speeds: (f64, f64)) {
        let floor = self.floor_us(speeds);
        println!("# {tag}: h2d {} bytes, d2h {} bytes", self.h2d_bytes, self.d2h_bytes);
        println!("omega.{tag}_us {:.3}", self.wall_us);
        println!("omega.{tag}_device_us {:.3}", self.device_us);
        println!("omega.{tag}_floor_us {floor:.3}");
        println!("omega.{tag}_of_floor {:.3}", self.wall_us / floor);
    }
}

/// The median of `v` (sorts it).
pub fn median_of(v: &mut [f64]) -> f64 {
    percentile(v, 0.5)
}
