//! Constant bank 0: the driver words a kernel's code reads (`LDC c[0x0][..]`), then the parameters.

use crate::arch::Arch;

/// The per-launch values of constant bank 0's driver words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cbuf0Params {
    /// Threads per block (`blockDim`).
    pub block: [u32; 3],
    /// Blocks per grid (`gridDim`, CTAs, not clusters).
    pub grid: [u32; 3],
    /// CTAs per cluster (`[1, 1, 1]` without a cluster); every grid side is a multiple of its side.
    pub cluster: [u32; 3],
    /// Shared-memory window base, as programmed on the channel.
    pub shared_window: u64,
    /// Local-memory window base, as programmed on the channel.
    pub local_window: u64,
    /// The dynamic part of the launch's shared memory, in bytes.
    pub dynamic_shared_bytes: u32,
    /// GPU address the bank itself is placed at (64-byte aligned, as the QMD requires): the parameters
    /// lie at `cbuf0_va + param_base`, and that address goes into the bank's
    /// [`param_address`](crate::arch::Cbuf0Layout::param_address) word.
    pub cbuf0_va: u64,
}

/// Builds constant bank 0 for one launch into `out`: the driver words of `arch`, zeros elsewhere, then
/// `args` at [`Arch::param_base`]; `out` ends up `param_base + 4 * args.len()` bytes rounded up to 16
/// (what the QMD's size field can express), and its previous contents are discarded.
///
/// Written: block and grid dimensions, both windows, the stack top (0xfffdc0), the dynamic shared size
/// where the arch has a word for it, 0 as the global-memory descriptor, and, where the arch has the
/// word (0x198 on Hopper), the GPU address of the parameters and of the byte after them, and, where the
/// arch has them, the cluster words (shape, reciprocals, cluster count, CTAs per cluster; a launch
/// without a cluster as 1×1×1 clusters). The bank's address must be 64-byte aligned; that is the
/// caller's allocation.
///
/// The parameter address is what `__grid_constant__` parameters are read through: nvcc places a
/// `CUtensorMap` parameter at a parameter offset whose bank offset (`param_base` + offset) is a
/// multiple of 64 (0x70 on sm_90: bank offset 0x280), and TMA fetches it from `c[0x0][0x198]` + offset,
/// so the descriptor is as aligned as the bank.
///
/// # Panics
/// When `args` is longer than [`Arch::max_param_bytes`]: the session checks argument sizes against the
/// kernel before building a launch, so this is a usage bug, not an input error.
pub fn fill_cbuf0(arch: &Arch, p: &Cbuf0Params, args: &[u32], out: &mut Vec<u32>) {
    assert!(
        args.len() * 4 <= arch.max_param_bytes as usize,
        "{} parameter bytes exceed the {} an {} kernel takes",
        args.len() * 4,
        arch.max_param_bytes,
        arch.name
    );
    let c = arch.cbuf0;
    let base = (arch.param_base / 4) as usize;
    let words = (base + args.len()).next_multiple_of(4);
    out.clear();
    out.resize(words, 0);
    let mut put = |offset: u32, value: u32| out[(offset / 4) as usize] = value;
    for axis in 0..3 {
        put(c.block_dim + 4 * axis as u32, p.block[axis]);
        put(c.grid_dim + 4 * axis as u32, p.grid[axis]);
    }
    for (offset, value) in [(c.shared_window, p.shared_window), (c.local_window, p.local_window)] {
        put(offset, value as u32);
        put(offset + 4, (value >> 32) as u32);
    }
    put(c.stack_top, arch.stack_top_value);
    if let Some(offset) = c.dynamic_shared {
        put(offset, p.dynamic_shared_bytes);
    }
    put(c.global_memory_descriptor, 0);
    put(c.global_memory_descriptor + 4, 0);
    if let Some(offset) = c.param_address {
        let start = p.cbuf0_va + u64::from(arch.param_base);
        let end = start + 4 * args.len() as u64;
        for (at, value) in [(offset, start), (offset + 8, end)] {
            put(at, value as u32);
            put(at + 4, (value >> 32) as u32);
        }
    }
    if let Some(w) = c.cluster {
        let sides = p.cluster.map(|side| side.max(1));
        put(w.explicit, u32::from(sides != [1, 1, 1]));
        for (axis, (&side, &grid)) in sides.iter().zip(&p.grid).enumerate() {
            let at = 4 * axis as u32;
            put(w.dims + at, side);
            put(w.reciprocal + at, cluster_reciprocal(side).to_bits());
            put(w.count + at, grid / side);
        }
        put(w.ctas, sides.iter().product());
    }
    out[base..base + args.len()].copy_from_slice(args);
}

/// The f32 the code multiplies a CTA index by to get its cluster index: 1/side, nudged up one ulp when
/// it is not exact, so that `trunc(i * r)` never falls one short at a multiple of `side` (i < 2^24).
fn cluster_reciprocal(side: u32) -> f32 {
    let r = 1.0 / side as f32;
    if side.is_power_of_two() {
        r
    } else {
        f32::from_bits(r.to_bits() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{BLACKWELL_GB10, HOPPER};

    #[test]
    fn cbuf0_hopper_words() {
        let p = Cbuf0Params {
            block: [64, 2, 1],
            grid: [3, 2, 1],
            cluster: [1, 1, 1],
            shared_window: 0x7294_0000_0000,
            local_window: 0x7293_0000_0000,
            dynamic_shared_bytes: 0x1000,
            cbuf0_va: 0x10_0000_2180,
        };
        let mut out = vec![0xdead_beef; 3];
        fill_cbuf0(&HOPPER, &p, &[0x1111, 0x2222, 0x3333, 0x4444, 5, 6, 7], &mut out);
        // 0x210 + 28 bytes = 0x22c, rounded up to 0x230.
        assert_eq!(out.len() * 4, 0x230);
        let at = |off: usize| out[off / 4];
        assert_eq!([at(0x0), at(0x4), at(0x8)], [64, 2, 1]);
        assert_eq!([at(0xc), at(0x10), at(0x14)], [3, 2, 1]);
        assert_eq!([at(0x18), at(0x1c)], [0, 0x7294]);
        assert_eq!([at(0x20), at(0x24)], [0, 0x7293]);
        assert_eq!(at(0x28), 0xfffdc0);
        assert_eq!(at(0x2c), 0x1000);
        assert_eq!([at(0x208), at(0x20c)], [0, 0]);
        assert_eq!(&out[0x210 / 4..0x210 / 4 + 7], &[0x1111, 0x2222, 0x3333, 0x4444, 5, 6, 7]);
        assert_eq!(at(0x22c), 0, "padding");
        // 0x198: where the parameters lie (bank + 0x210), 0x1a0: the byte after the 28 parameter bytes.
        assert_eq!([at(0x198), at(0x19c)], [0x0000_2390, 0x10]);
        assert_eq!([at(0x1a0), at(0x1a4)], [0x0000_23ac, 0x10]);
        // Every other driver word is zero (the old contents are gone).
        // A grid without a cluster is 3×2×1 clusters of one CTA.
        assert_eq!(at(0x140), 0, "not an explicit cluster");
        assert_eq!([at(0x144), at(0x148), at(0x14c)], [1, 1, 1]);
        assert_eq!([at(0x150), at(0x154), at(0x158)], [1f32.to_bits(); 3]);
        assert_eq!([at(0x15c), at(0x160), at(0x164)], [3, 2, 1]);
        assert_eq!(at(0x188), 1);
        let written = [
            0x0, 0x4, 0x8, 0xc, 0x10, 0x14, 0x1c, 0x24, 0x28, 0x2c, 0x144, 0x148, 0x14c, 0x150, 0x154, 0x158, 0x15c,
            0x160, 0x164, 0x188, 0x198, 0x19c, 0x1a0, 0x1a4,
        ];
        for off in (0..0x210).step_by(4).filter(|o| !written.contains(o)) {
            assert_eq!(at(off), 0, "word {off:#x}");
        }
    }

    #[test]
    fn cbuf0_blackwell_words() {
        let p = Cbuf0Params {
            block: [32, 4, 2],
            grid: [7, 5, 3],
            cluster: [1, 1, 1],
            shared_window: 0x1_2345_6789_0000,
            local_window: 0x9_8765_4321_0000,
            dynamic_shared_bytes: 0x800,
            cbuf0_va: 0x10_0000_0000,
        };
        let mut out = Vec::new();
        fill_cbuf0(&BLACKWELL_GB10, &p, &[0xaa], &mut out);
        assert_eq!(out.len() * 4, 0x390, "0x380 + 4 rounded up to 16");
        let at = |off: usize| out[off / 4];
        assert_eq!([at(0x360), at(0x364), at(0x368)], [32, 4, 2]);
        assert_eq!([at(0x370), at(0x374), at(0x378)], [7, 5, 3]);
        assert_eq!([at(0x2f0), at(0x2f4)], [0x6789_0000, 0x1_2345]);
        assert_eq!([at(0x2f8), at(0x2fc)], [0x4321_0000, 0x9_8765]);
        assert_eq!(at(0x37c), 0xfffdc0);
        assert_eq!(at(0x380), 0xaa);
        assert_eq!(out.iter().filter(|&&w| w == 0x800).count(), 0, "no dynamic-shared word on Blackwell");
        assert_eq!(out.iter().filter(|&&w| w == 0x10).count(), 0, "no parameter-address word on Blackwell (yet)");
    }

    #[test]
    fn cbuf0_hopper_cluster_words() {
        let p = Cbuf0Params {
            block: [128, 1, 1],
            grid: [12, 4, 2],
            cluster: [3, 2, 1],
            shared_window: 0,
            local_window: 0,
            dynamic_shared_bytes: 0,
            cbuf0_va: 0x10_0000_0000,
        };
        let mut out = Vec::new();
        fill_cbuf0(&HOPPER, &p, &[], &mut out);
        let at = |off: usize| out[off / 4];
        assert_eq!([at(0xc), at(0x10), at(0x14)], [12, 4, 2], "gridDim counts CTAs");
        assert_eq!(at(0x140), 1, "an explicit cluster");
        assert_eq!([at(0x144), at(0x148), at(0x14c)], [3, 2, 1]);
        assert_eq!([at(0x15c), at(0x160), at(0x164)], [4, 2, 2]);
        assert_eq!(at(0x188), 6);
        // The code's own cluster index, trunc(ctaid * reciprocal), for every CTA index of every side.
        for (axis, side) in [(0usize, 3u32), (1, 2), (2, 1)] {
            let r = f32::from_bits(at(0x150 + 4 * axis));
            for i in 0..p.grid[axis] {
                assert_eq!((i as f32 * r) as u32, i / side, "axis {axis} cta {i}");
            }
        }
        for side in 1..=16u32 {
            let r = cluster_reciprocal(side);
            for i in 0..(1u32 << 16) {
                assert_eq!((i as f32 * r) as u32, i / side, "side {side} cta {i}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "parameter bytes exceed")]
    fn cbuf0_refuses_oversized_arguments() {
        let p = Cbuf0Params {
            block: [1; 3],
            grid: [1; 3],
            cluster: [1; 3],
            shared_window: 0,
            local_window: 0,
            dynamic_shared_bytes: 0,
            cbuf0_va: 0,
        };
        fill_cbuf0(&HOPPER, &p, &vec![0; 8192], &mut Vec::new());
    }
}
