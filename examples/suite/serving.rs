//! The serving seal on the installed platform (issue 14): reserve for Qwen3-30B-A3B's decode products,
//! prepare each, seal, then 1000 sealed steps (each a command list of the four products, submitted once)
//! and 1000 single products, with the driver counters (every ioctl, mmap and munmap of the process) and
//! `alloc_stats` unchanged, the outputs checked against f64 at a sample, an allocation refused by name,
//! and release back to normal. On the simulator, 3 steps (its host GEMVs are slow in a debug build).

use omega::libs::matmul::Shape;
use omega::libs::serving::{Serving, ServingBounds};

use super::{check_matmul, common, err, random_bf16, rng, sample_positions, with_scope, CaseResult};

/// Fused QKV, O, the down projection of 32 tokens' experts, QKV at batch 8: `[m, n, k]`.
const SHAPES: [[u32; 3]; 4] = [[1, 5120, 2048], [1, 2048, 4096], [32, 2048, 768], [8, 5120, 2048]];

const BOUNDS: ServingBounds = ServingBounds {
    max_m: 32,
    max_n: 5120,
    max_k: 4096,
    max_seq: 1024,
    max_batch: 8,
    pages: 64,
    page_tokens: 64,
    layers: 2,
    kv_heads: 4,
    head_dim: 128,
    flags: 0,
};

/// The case: see the module's text.
pub fn sealed_matmul_steps() -> CaseResult {
    let mut g = rng();
    with_scope(|s, gpu| {
        let steps = if common::is_sim(s.platform()) { 3 } else { 1000 };
        let mut sv = Serving::reserve(s, BOUNDS).map_err(err)?;
        let mut gpu = gpu;
        let mut ops = Vec::new();
        for [m, n, k] in SHAPES {
            gpu = sv.prepare_matmul(gpu, Shape::new(m, n, k)).map_err(err)?;
            let ((xb, x), (wb, w)) = (random_bf16(&mut g, (m * k) as usize), random_bf16(&mut g, (n * k) as usize));
            let (xd, wd) = (s.alloc_device_from(&xb).map_err(err)?, s.alloc_device_from(&wb).map_err(err)?);
            let yd = s.alloc_device_from(&vec![f32::NAN; (m * n) as usize]).map_err(err)?;
            ops.push((Shape::new(m, n, k), x, w, xd, wd, yd));
        }
        let mut list = s.cmdlist().map_err(err)?;
        for (shape, _, _, xd, wd, yd) in &ops {
            sv.matmul().add_bf16(&mut list, xd, wd, yd, *shape).map_err(err)?;
        }
        // Once before the seal: whatever a first submission or read sets up is set up now.
        gpu = gpu.submit(&mut list).map_err(|e| e.to_string())?.gpu;
        let before = (s.driver_stats().ok_or("the platform counts no driver calls")?, s.alloc_stats());
        let sealed = sv.seal().map_err(err)?;
        let t = std::time::Instant::now();
        for i in 0..steps {
            gpu = gpu.submit(&mut list).map_err(|e| format!("sealed step {i}: {e}"))?.gpu;
        }
        let list_s = t.elapsed().as_secs_f64();
        drop(list);
        for i in 0..steps {
            let (shape, _, _, xd, wd, yd) = &mut ops[i % SHAPES.len()];
            gpu = sealed
                .serving()
                .matmul()
                .bf16(gpu, xd, wd, yd, *shape)
                .map_err(|f| format!("sealed product {i}: {f}"))?
                .gpu;
        }
        for (shape, x, w, _, _, yd) in &mut ops {
            let dims = [shape.m as usize, shape.n as usize, shape.k as usize];
            let at = sample_positions(&mut g, dims[0], dims[1]);
            check_matmul("sealed", &yd.to_vec().map_err(err)?, x, w, dims, &at)?;
        }
        // The list's adds had workspaces of their own, which went back to the memory manager's chunks with
        // the list (frees, no driver call); nothing may have been allocated.
        let after = (s.driver_stats().ok_or("the counters went away")?, s.alloc_stats());
        if after.0 != before.0 || after.1.allocs != before.1.allocs {
            return Err(format!("the driver was asked while sealed: before {before:?}, after {after:?}"));
        }
        let refused = s.alloc_device::<u8>(256 << 20).err().ok_or("an allocation after seal was served")?;
        if !refused.to_string().contains("serving sealed: allocation of") {
            return Err(format!("the refusal does not name the seal: {refused}"));
        }
        sealed.release().map_err(err)?;
        let normal = s.alloc_device::<u8>(256 << 20).map_err(|e| format!("after release: {e}"))?;
        drop((normal, gpu));
        Ok(format!(
            "{steps} sealed steps (a list of 4 products) in {list_s:.3} s + {steps} single products: 0 driver calls \
             ({} ioctls, {} mmaps before and after), the refusal `{refused}`",
            before.0.ioctls, before.0.mmaps
        ))
    })
}
