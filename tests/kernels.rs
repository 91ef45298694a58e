//! The repository's kernels: each cubin parses for sm_90, and the simulator's hand-written parameter
//! tables agree with the cubins' own (KPARAM_INFO), so a kernel checked on `sim` is checked like on a GPU.
//! The same for every CUDA C++ module with host references (`mixed`, `matmul`): every kernel nvcc built
//! has one, under its symbol name, with the cubin's parameters, static shared memory and stack use.

use omega_hal::{arch, cubin::Module};

#[test]
fn every_kernel_has_a_cubin_and_a_host_reference_with_the_same_parameters() {
    let ptxas = omega::kernels::ptxas();
    assert!(ptxas.is_ok(), "CI installs ptxas; the build said: {:?}", ptxas);
    assert!(!omega::kernels::names().is_empty());
    for name in omega::kernels::names() {
        let spec = omega::kernels::host_spec(name).unwrap_or_else(|| panic!("`{name}` has no host reference"));
        let cubin = omega::kernels::sm90_cubin(name).unwrap();
        let module = Module::parse(cubin, &arch::HOPPER).unwrap_or_else(|e| panic!("{name}: {e}"));
        let k = module.kernel(name).unwrap();
        let from_cubin: Vec<(u32, u32, u32)> = k.params.iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
        let by_hand: Vec<(u32, u32, u32)> = spec.params().iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
        assert_eq!(from_cubin, by_hand, "{name}: parameter tables differ");
        assert_eq!(k.local_bytes_per_thread > 0, spec.local_bytes_per_thread > 0, "{name}: stack use differs");
        assert!(omega::kernels::ptx_source(name).unwrap().contains(&format!(".entry {name}(")));
    }
}

#[test]
fn every_cuda_module_kernel_has_a_host_reference_with_the_cubins_parameters_and_shared_memory() {
    let nvcc = omega::kernels::nvcc();
    assert!(nvcc.is_ok(), "CI installs the pinned nvcc set; the build said: {nvcc:?}");
    let mut modules: Vec<&str> = omega::kernels::CUDA_HOST_SPECS.iter().map(|(m, _)| *m).collect();
    modules.sort();
    assert_eq!(modules, omega::kernels::cuda_module_names(), "every module in kernels/cuda/ has its references");
    for (module, specs) in omega::kernels::CUDA_HOST_SPECS {
        let cubin = omega::kernels::cuda_module(module).unwrap();
        let m = Module::parse(cubin, &arch::HOPPER).unwrap_or_else(|e| panic!("{module}: {e}"));
        let mut names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
        let mut by_hand: Vec<&str> = specs.iter().map(|s| s.name).collect();
        names.sort();
        by_hand.sort();
        assert_eq!(names, by_hand, "{module}: the cubin's kernels and the host references");
        for spec in *specs {
            let k = m.kernel(spec.name).unwrap();
            let from_cubin: Vec<(u32, u32, u32)> = k.params.iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
            let by_hand: Vec<(u32, u32, u32)> = spec.params().iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
            assert_eq!(from_cubin, by_hand, "{module}::{}: parameter tables differ", spec.name);
            // The kernel's `.nv.shared` section: the 1 KiB the system reserves, then its own arrays, padded
            // to a whole KiB.
            let own = k.shared_bytes - arch::HOPPER.reserved_shared_bytes;
            assert!(
                spec.static_shared_bytes <= own && own < spec.static_shared_bytes + 1024,
                "{module}::{}: {} bytes of static shared memory by hand, the cubin's section has {}",
                spec.name,
                spec.static_shared_bytes,
                k.shared_bytes
            );
            assert_eq!(k.stack_bytes > 0, spec.local_bytes_per_thread > 0, "{module}::{}: stack use", spec.name);
            assert!(omega::kernels::host_reference(spec.name).is_some(), "{}", spec.name);
        }
    }
}

#[test]
fn the_matmul_kernels_launch_bounds_are_the_block_shapes_their_references_take() {
    use omega::kernels::matmul as mm;
    let m = Module::parse(omega::kernels::cuda_module(mm::MATMUL).unwrap(), &arch::HOPPER).unwrap();
    let threads = |name: &str| m.kernel(name).unwrap().max_threads;
    for name in [
        mm::GEMM_BF16_TN,
        mm::GEMM_BF16_TN_SPLITK,
        mm::GEMM_BF16_TN_N128,
        mm::GEMM_BF16_TN_TS,
        mm::GEMM_BF16_TN_MC,
        mm::GEMM_BF16_TN_TS_N128,
        mm::GEMM_BF16_TN_MC_N128,
        mm::GEMM_BF16_TN_SK,
        mm::GEMM_BF16_TN_SK_N128,
        mm::GEMM_BF16_TN_PP_N128,
        mm::GEMM_BF16_TN_PP_N128_Y16,
    ]
    .into_iter()
    .chain(mm::GEMM_FITTED.iter().flat_map(|f| [f.ts, f.mc]))
    .chain(mm::GEMM_SWIGLU.iter().flat_map(|f| [f.f32, f.y16]))
    .chain(mm::GEMM_SWAPAB.iter().flat_map(|f| [f.f32, f.y16]))
    {
        assert_eq!(threads(name), Some(mm::GEMM_THREADS), "{name}");
        assert!(m.kernel(name).unwrap().reg_reconfig, "{name}: its register split needs setmaxnreg");
    }
    for name in
        mm::GEMV_BF16_TN.iter().chain(&mm::MOE_GEMV_BF16).chain(&[mm::MOE_GEMV_BF16_ROWS, mm::GEMV_BF16_TN_ROWS])
    {
        assert_eq!(threads(name), Some(mm::GEMV_THREADS), "{name}");
    }
    for name in mm::SKINNY_BF16_TN {
        assert_eq!(threads(name), Some(mm::SKINNY_THREADS), "{name}");
    }
    assert_eq!(threads(mm::MOE_ROUTE), Some(mm::ROUTE_THREADS));
    assert_eq!(threads(mm::GEMM_F32_TN), Some(mm::SIMT_THREADS));
    assert_eq!(threads(mm::GEMM_BF16_SIMT_TN), Some(mm::SIMT_THREADS));
    // The f32 candidates cap their registers (`.maxnreg 248`, chosen while the launch limit after Omega's
    // rounding to 8 was 255; it is 256 now, so a 255-register build would launch too) instead of declaring
    // a block; their references take `v.threads`.
    for name in mm::GEMM_F32_TN_V2.map(|v| v.name).into_iter().chain([mm::GEMM_F32_TN_PERSISTENT]) {
        assert_eq!(m.kernel(name).unwrap().max_registers, Some(248), "{name}");
    }
    assert_eq!(threads(mm::CONVERT_F32_BF16), Some(mm::CONVERT_THREADS));
    // The GEMMs' stages, barriers and alignment slack, as gemm_bf16.cuh sizes them (kernel_abi.md).
    assert_eq!((mm::GEMM_SMEM_BYTES, mm::GEMM_N128_SMEM_BYTES), (197_696, 197_728));
    // The TMA-store forms: 4 stages and two 8 KiB staging buffers per consumer, within the 227 KiB a
    // block may have; the cluster form is built in pairs (its cubin says so, the loader reads it).
    assert_eq!((mm::GEMM_TS_SMEM_BYTES, mm::GEMM_MC_SMEM_BYTES), (230_464, 230_464));
    const { assert!(mm::GEMM_TS_SMEM_BYTES <= 227 * 1024) };
    // The narrow forms: 6 stages of 32 KiB beside the same rings, 32 bytes short of the 227 KiB.
    assert_eq!((mm::GEMM_TS_N128_SMEM_BYTES, mm::GEMM_MC_N128_SMEM_BYTES), (230_496, 230_496));
    const { assert!(mm::GEMM_TS_N128_SMEM_BYTES <= 227 * 1024) };
    // The fitted widths: 5 stages of 36 KiB (160), 4 of 40 (192), 6 of 28 (96), 8 of 24 (64) beside the
    // same rings, each within the 227 KiB.
    let fitted = mm::GEMM_FITTED.map(|f| (f.tile_n, f.smem_bytes()));
    assert_eq!(fitted, [(160, 218_192), (192, 197_696), (96, 205_920), (64, 230_528)]);
    assert!(mm::GEMM_FITTED.iter().all(|f| f.smem_bytes() <= 227 * 1024));
    for mc in [mm::GEMM_BF16_TN_MC, mm::GEMM_BF16_TN_MC_N128].into_iter().chain(mm::GEMM_FITTED.map(|f| f.mc)) {
        assert_eq!(m.kernel(mc).unwrap().cluster_dims, Some([mm::GEMM_MC_CLUSTER, 1, 1]), "{mc}");
    }
    // The swapped small-M entries: the deepest ring of W's 16 KiB and x's box beside 227 KiB (9 stages at
    // 64 rows, 13 at 8).
    let swapab = mm::GEMM_SWAPAB.map(|f| (f.mb, f.smem_bytes()));
    assert_eq!(swapab, [(8, 227_536), (16, 222_400), (32, 226_480), (64, 222_352)]);
    assert!(mm::GEMM_SWAPAB.iter().all(|f| f.smem_bytes() <= 227 * 1024));
    // The stream-K entries take the TMA-store layouts: their fix-up goes through global memory.
    assert_eq!((mm::GEMM_SK_SMEM_BYTES, mm::GEMM_SK_N128_SMEM_BYTES), (230_464, 230_496));
    let one_cta = [
        mm::GEMM_BF16_TN_TS,
        mm::GEMM_BF16_TN_TS_N128,
        mm::GEMM_BF16_TN_SK,
        mm::GEMM_BF16_TN_SK_N128,
        mm::GEMM_BF16_TN_PP_N128,
        mm::GEMM_BF16_TN_PP_N128_Y16,
    ];
    let swiglu = mm::GEMM_SWIGLU.iter().flat_map(|f| [f.f32, f.y16]);
    let swapab = mm::GEMM_SWAPAB.iter().flat_map(|f| [f.f32, f.y16]);
    for ts in one_cta.into_iter().chain(mm::GEMM_FITTED.map(|f| f.ts)).chain(swiglu).chain(swapab) {
        assert_eq!(m.kernel(ts).unwrap().cluster_dims, None, "{ts}");
    }
    let src = omega::kernels::cuda_module_source(mm::MATMUL).unwrap();
    assert!(src.contains("#include \"matmul/gemm_bf16.cuh\""), "{src}");
}

#[test]
fn the_split_k_gemm_planner_fills_whole_waves_and_keeps_only_the_splits_k_needs() {
    use omega::kernels::matmul::{GemmSplit, GEMM_N128_TILE_N, GEMM_TILE_N};
    // Qwen3 at M = 512 on 132 SMs: 4 x 8 tiles take 4 splits of 8 K blocks; 4 x 16 narrow tiles take 2.
    let s = GemmSplit::planned(512, 2048, 2048, GEMM_TILE_N, 132);
    assert_eq!(s, GemmSplit { tiles: 32, kblocks: 32, per: 8, splits: 4, units: 128 });
    let s = GemmSplit::planned(512, 2048, 2048, GEMM_N128_TILE_N, 132);
    assert_eq!(s, GemmSplit { tiles: 64, kblocks: 32, per: 16, splits: 2, units: 128 });
    // More tiles than SMs: no split. A split past K's blocks keeps one block each; 5 of 16 blocks
    // split as 4 blocks a split, so 4 splits remain.
    assert_eq!(GemmSplit::planned(4096, 4096, 4096, GEMM_TILE_N, 132).splits, 1);
    assert_eq!(
        GemmSplit::new(1, 1, 1000, GEMM_TILE_N, 40),
        GemmSplit { tiles: 1, kblocks: 16, per: 1, splits: 16, units: 16 }
    );
    assert_eq!(
        GemmSplit::new(1, 1, 1000, GEMM_TILE_N, 5),
        GemmSplit { tiles: 1, kblocks: 16, per: 4, splits: 4, units: 4 }
    );
    assert_eq!(GemmSplit::new(300, 300, 64, GEMM_TILE_N, 0).splits, 1);
    assert_eq!(GemmSplit::new(7, 300, 64, GEMM_N128_TILE_N, 3).work_floats(7, 300), 0);
    assert_eq!(GemmSplit::new(7, 300, 640, GEMM_N128_TILE_N, 3).work_floats(7, 300), 3 * 7 * 300);
}

#[test]
fn the_gemv_planner_fills_the_sms_in_slices_of_whole_chunks() {
    use omega::kernels::matmul::{gemv_plan, gemv_variant, GemvPlan};
    // Qwen3's O projection on 132 SMs: 32 blocks want 17 slices; 241 rounds up to 256, so 16.
    assert_eq!(gemv_plan(2048, 4096, 132), GemvPlan { blocks: 32, split: 16, k_per_split: 256 });
    // lm_head: thousands of blocks already fill the SMs.
    assert_eq!(gemv_plan(151_936, 2048, 132), GemvPlan { blocks: 2374, split: 1, k_per_split: 2048 });
    // Never below 128 of K per slice: K = 256 splits in two at most.
    assert_eq!(gemv_plan(64, 256, 132), GemvPlan { blocks: 1, split: 2, k_per_split: 128 });
    assert_eq!(gemv_plan(1, 32, 132), GemvPlan { blocks: 1, split: 1, k_per_split: 32 });
    for (k, n) in [(32u32, 1u32), (4096, 5120), (768, 2048), (2048, 128), (4064, 7)] {
        let p = gemv_plan(n, k, 132);
        assert!(p.k_per_split.is_multiple_of(32) && p.split == k.div_ceil(p.k_per_split), "{p:?}");
        assert_eq!(p.blocks, n.div_ceil(64));
    }
    let mb: Vec<usize> = [1, 8, 9, 16, 17, 32, 33, 64, 1000].iter().map(|&m| gemv_variant(m)).collect();
    assert_eq!(mb, [0, 0, 1, 1, 2, 2, 3, 3, 3]);
}

#[test]
fn a_cubin_for_another_architecture_is_refused_by_name() {
    let cubin = omega::kernels::sm90_cubin("vector_add").unwrap();
    let e = Module::parse(cubin, &arch::BLACKWELL_GB10).unwrap_err();
    assert!(matches!(e, omega_hal::cubin::CubinError::ForeignArch { found: 90, .. }), "{e}");
}

#[test]
fn module_data_binds_its_constant_table_and_the_relocated_address_of_its_counter() {
    let cubin = omega::kernels::sm90_cubin("module_data").unwrap();
    let module = Module::parse(cubin, &arch::HOPPER).unwrap();
    let k = module.kernel("module_data").unwrap();
    let bank = |i: u32| *k.const_banks.iter().find(|b| b.index == i).unwrap_or_else(|| panic!("no bank {i}"));
    let (table, addresses) = (bank(3), bank(4));
    assert_eq!(k.const_banks.len(), 2, "{:?}", k.const_banks);
    // Any 128-byte aligned load addresses; the banks must come out where the launch will point the QMD.
    let (va, data_va) = (0x7f_1234_5680u64, 0x7f_2000_0000u64);
    let r = module.relocate(va, data_va, &|_| None).unwrap();
    let at = |off: u64, len: usize| &r.image[off as usize..off as usize + len];
    assert_eq!(table.bytes, 64);
    let words: Vec<u32> = at(table.offset, 64).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words, omega::kernels::MODULE_DATA_TABLE, "bank 3 holds the __constant__ table");
    assert_eq!(addresses.bytes, 8);
    let counter_va = u64::from_le_bytes(at(addresses.offset, 8).try_into().unwrap());
    assert!(
        counter_va >= data_va && counter_va + 4 <= data_va + r.data.len() as u64,
        "bank 4 points into the data image: {counter_va:#x}"
    );
    let counter = u32::from_le_bytes(r.data[(counter_va - data_va) as usize..][..4].try_into().unwrap());
    assert_eq!(counter, omega::kernels::MODULE_DATA_COUNTER, "bank 4 holds the counter's address");
    // Both banks must be addressable by a QMD (64-byte aligned once the image is).
    assert!(table.offset.is_multiple_of(64) && addresses.offset.is_multiple_of(64));
    // Every other repository kernel binds nothing beyond bank 0.
    for name in omega::kernels::names().iter().filter(|n| **n != "module_data") {
        let m = Module::parse(omega::kernels::sm90_cubin(name).unwrap(), &arch::HOPPER).unwrap();
        assert!(m.kernel(name).unwrap().const_banks.is_empty(), "{name}");
    }
}
