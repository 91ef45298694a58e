//! CUDA C++ modules built by nvcc in this build (`kernels/cuda/`), loaded through the typed API on the
//! simulator: plain, template and printf kernels of one module, its shared `__device__` data, device
//! printf captured in order with overflow marked, and kernels refused one by one for what they need.
//! Tests in this binary take turns on the process's one lock.

use std::path::Path;

use omega::error::{CubinError, LoadError, SettingError, Stage};
use omega::kernels::{self, MIXED, MIXED_COUNTER, MIXED_PLAIN, MIXED_PRINTF};
use omega::{Error, Launch, Scoped};
use omega_hal::{arch, cubin::Module};

fn mixed() -> &'static [u8] {
    let nvcc = kernels::nvcc();
    assert!(nvcc.is_ok(), "CI installs the pinned nvcc set; the build said: {nvcc:?}");
    kernels::cuda_module(MIXED).unwrap()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("hal/tests/fixtures").join(name)).unwrap()
}

/// The process's device in a fresh session (closed and reopened: nothing of an earlier test's printf
/// buffer or modules is left), on the simulator.
fn fresh() -> omega::Locked<omega::Open> {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    dev.close().open().expect("reopen")
}

#[test]
fn the_build_compiled_the_mixed_module_whose_kernels_match_their_host_references() {
    assert_eq!(
        kernels::cuda_module_names(),
        ["attention", "cluster", "decoder", "elementwise", "matmul", MIXED, "prefill"]
    );
    assert!(kernels::cuda_module_source(MIXED).unwrap().contains("extern \"C\" __global__ void mixed_plain("));
    let m = Module::parse(mixed(), &arch::HOPPER).unwrap();
    let mut names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    let mut specs: Vec<&str> = kernels::MIXED_HOST_SPECS.iter().map(|s| s.name).collect();
    names.sort();
    specs.sort();
    assert_eq!(names, specs, "every kernel of the module has a host reference, under its symbol name");
    for spec in kernels::MIXED_HOST_SPECS {
        let k = m.kernel(spec.name).unwrap();
        let from_cubin: Vec<(u32, u32)> = k.params.iter().map(|p| (p.offset, p.size)).collect();
        let by_hand: Vec<(u32, u32)> = spec.params().iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(from_cubin, by_hand, "{}", spec.name);
        assert_eq!(k.stack_bytes > 0, spec.local_bytes_per_thread > 0, "{}", spec.name);
    }
    // The references' copies of the module data and of the printf format are the cubin's.
    let table = m.symbol("mixed_table").unwrap();
    let words: Vec<f32> = m.image[table.offset as usize..][..32]
        .chunks(4)
        .map(|c| f32::from_bits(u32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    assert_eq!(words, kernels::MIXED_TABLE);
    let init = m.symbol("mixed_init").unwrap();
    let words: Vec<i32> =
        m.data[init.offset as usize..][..16].chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words, kernels::MIXED_INIT);
    let format = format!("{}\0", kernels::MIXED_PRINTF_FORMAT);
    assert!(
        m.symbols.iter().any(
            |s| s.name.starts_with("$str") && &m.data[s.offset as usize..][..s.bytes as usize] == format.as_bytes()
        ),
        "the source's printf format is MIXED_PRINTF_FORMAT"
    );
    // The printf library was built relocatable beside it.
    let lib = Module::parse(kernels::device_library("printf").unwrap(), &arch::HOPPER).unwrap();
    assert!(lib.function("omega_vprintf").is_ok());
}

#[test]
fn plain_and_template_kernels_run_and_share_the_module_data() {
    let dev = fresh();
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let module = s.load_module(mixed())?;
        assert_eq!(module.kernel_names().len(), kernels::MIXED_HOST_SPECS.len());
        let n = 1000u32;
        let mut out = s.alloc::<f32>(n as usize)?;
        out.fill(f32::NAN)?;
        let plain = module.kernel(MIXED_PLAIN)?;
        assert!(!plain.meta().printf);
        let gpu = gpu.launch(&Launch::new(&plain).grid([4, 1, 1]).block([256, 1, 1]).arg(&out).arg(n))?.gpu;
        assert_eq!(out.to_vec()?, kernels::mixed_plain_ref(n as usize));
        // The counter is the module's: the second kernel reads what the first one wrote, and so does the host.
        let mut count = [0u8; 4];
        module.read_global("mixed_count", &mut count)?;
        assert_eq!(u32::from_le_bytes(count), n);
        let counter = module.kernel(MIXED_COUNTER)?;
        let mut seen = s.alloc::<u32>(1)?;
        seen.fill(u32::MAX)?;
        let gpu = gpu.launch(&Launch::new(&counter).arg(&seen))?.gpu;
        assert_eq!(seen.to_vec()?, [n]);
        module.read_global("mixed_count", &mut count)?;
        assert_eq!(u32::from_le_bytes(count), 0, "mixed_counter resets it");
        // The host writes module data the kernels read.
        module.write_global("mixed_init", &[2, 0, 0, 0])?;
        let gpu = gpu.launch(&Launch::new(&plain).grid([1, 1, 1]).block([4, 1, 1]).arg(&out).arg(4u32))?.gpu;
        assert_eq!(out.to_vec()?[..4], [2.0, -2.0, 2.0, 4.0], "init[0] is 2 now");
        module.write_global("mixed_init", &3i32.to_le_bytes())?;

        // Template kernels, by their mangled names: explicit instances and `static` (LOCAL) ones.
        let data: Vec<f32> = (0..300).map(|i| i as f32 * 0.37 - 20.0).collect();
        let mut buf = s.alloc_from(&data)?;
        let scale = module.kernel(kernels::MIXED_SCALE_F32)?;
        let gpu =
            gpu.launch(&Launch::new(&scale).grid([2, 1, 1]).block([256, 1, 1]).arg(&buf).arg(1.5f32).arg(300u32))?.gpu;
        assert_eq!(buf.to_vec()?, kernels::mixed_scale_f32_ref(&data, 1.5));
        let ints: Vec<i32> = (0..100).map(|i| i * 7 - 300).collect();
        let mut ibuf = s.alloc_from(&ints)?;
        let iscale = module.kernel(kernels::MIXED_SCALE_I32)?;
        let mut gpu = gpu.launch(&Launch::new(&iscale).block([128, 1, 1]).arg(&ibuf).arg(-3i32).arg(100u32))?.gpu;
        assert_eq!(ibuf.to_vec()?, kernels::mixed_scale_i32_ref(&ints, -3));
        for (name, factor) in [(kernels::MIXED_FILL_7, 7), (kernels::MIXED_FILL_MINUS_3, -3)] {
            ibuf.fill(i32::MIN)?;
            let fill = module.kernel(name)?;
            gpu = gpu.launch(&Launch::new(&fill).block([128, 1, 1]).arg(&ibuf).arg(100u32))?.gpu;
            assert_eq!(ibuf.to_vec()?, kernels::mixed_fill_ref(factor, 100), "{name}");
        }
        // A name the module lacks is refused with the names it has.
        let e = module.kernel("mixed_scale<float>").unwrap_err();
        assert!(
            matches!(&e, Error::Load(LoadError::Cubin(CubinError::NoSuchKernel { name, known }))
                if name == "mixed_scale<float>" && known.iter().any(|k| k == kernels::MIXED_SCALE_F32)),
            "{e}"
        );
        Ok(())
    });
    let (_dev, r) = r.into_open().expect("no latch");
    r.unwrap();
}

#[test]
fn printf_output_is_captured_after_each_launch_in_order() {
    let dev = fresh();
    let capture = omega::printf::capture();
    let (base, scale, threads, lines) = (-5, 0.75, 24u32, 3u32);
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let module = s.load_module(mixed())?;
        let k = module.kernel(MIXED_PRINTF)?;
        assert!(k.meta().printf, "mixed_printf calls vprintf");
        let gpu = gpu.launch(&Launch::new(&k).grid([3, 1, 1]).block([8, 1, 1]).arg(base).arg(scale).arg(lines))?.gpu;
        // Drained when the launch completed: one record per printf, each formatted as C's snprintf does.
        let expected = kernels::mixed_printf_expected(base, scale, threads, lines);
        assert_eq!(capture.take(), expected.concat().concat());
        // A launch of a kernel without printf prints nothing; the next printf launch starts empty.
        let plain = module.kernel(MIXED_PLAIN)?;
        let out = s.alloc::<f32>(8)?;
        let gpu = gpu.launch(&Launch::new(&plain).block([8, 1, 1]).arg(&out).arg(8u32))?.gpu;
        assert_eq!(capture.take(), "");
        let gpu = gpu.launch(&Launch::new(&k).block([2, 1, 1]).arg(base).arg(scale).arg(1u32))?.gpu;
        assert_eq!(capture.take(), kernels::mixed_printf_expected(base, scale, 2, 1).concat().concat());
        // A command list drains after its submission too, in launch order.
        let mut list = s.cmdlist()?;
        let first = Launch::new(&k).block([1, 1, 1]).arg(1).arg(1.0).arg(2u32);
        let second = Launch::new(&k).block([1, 1, 1]).arg(2).arg(2.0).arg(1u32);
        list.add(&first)?;
        list.add(&second)?;
        gpu.submit(&mut list).map_err(Error::from)?;
        let both = [kernels::mixed_printf_expected(1, 1.0, 1, 2), kernels::mixed_printf_expected(2, 2.0, 1, 1)];
        assert_eq!(capture.take(), both.concat().concat().concat());
        Ok(())
    });
    omega::printf::set_output(omega::printf::Output::Stdout);
    let (_dev, r) = r.into_open().expect("no latch");
    r.unwrap();
}

#[test]
fn a_printf_buffer_that_overflows_keeps_what_fit_in_order_and_says_how_much_was_lost() {
    let dev = omega::lock().open().expect("open").close();
    omega::printf::set_buffer_bytes(4096).unwrap();
    let dev = dev.open().expect("reopen");
    let capture = omega::printf::capture();
    let (threads, lines) = (16u32, 4u32);
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let module = s.load_module(mixed())?;
        // The buffer exists now: its size is fixed for the session.
        let e = omega::printf::set_buffer_bytes(1 << 20).unwrap_err();
        assert_eq!(e, Error::Setting { stage: Stage::Printf, detail: SettingError::PrintfBufferExists(4096) });
        let k = module.kernel(MIXED_PRINTF)?;
        gpu.launch(&Launch::new(&k).block([threads, 1, 1]).arg(0).arg(1.0).arg(lines)).map_err(Error::from)?;
        Ok(())
    });
    omega::printf::set_output(omega::printf::Output::Stdout);
    let text = capture.take();
    let printed: Vec<&str> = text.lines().filter(|l| l.starts_with("t=")).collect();
    let expected: Vec<String> = kernels::mixed_printf_expected(0, 1.0, threads, lines).concat();
    let total = (threads * lines) as usize;
    assert!(!printed.is_empty() && printed.len() < total, "{} of {total} printed", printed.len());
    // What fit is the first records, in order (the simulator's threads run one after another).
    for (got, want) in printed.iter().zip(&expected) {
        assert_eq!(format!("{got}\n"), *want);
    }
    let mark = text.lines().last().unwrap();
    assert!(mark.starts_with(omega::printf::OVERFLOW_MARK), "{mark}");
    assert!(mark.contains(&format!("{} record(s) lost", total - printed.len())), "{mark}");
    assert!(mark.contains("holds 4096 bytes"), "{mark}");
    // A new session gets the default size back only when asked: the setting stays.
    let (dev, r) = r.into_open().expect("no latch");
    r.unwrap();
    let closed = dev.close();
    omega::printf::set_buffer_bytes(omega::printf::DEFAULT_BUFFER_BYTES).unwrap();
    assert!(omega::printf::set_buffer_bytes(8).is_err(), "too small to hold a record");
    drop(closed);
}

#[test]
fn kernels_are_refused_one_by_one_for_what_they_need_and_their_neighbours_load() {
    let dev = fresh();
    let cubin = fixture("nvcc_features.sm_90a.cubin");
    let r = dev.scope(|s, _gpu| -> Result<(), Error> {
        let module = s.load_module(&cubin)?;
        assert!(module.kernel("neighbour").is_ok());
        assert!(module.kernel("barrier").is_ok());
        let e = module.kernel("allocates").unwrap_err();
        assert_eq!(e.stage(), Stage::Load);
        assert_eq!(
            e.to_string(),
            "load: kernel `allocates`: needs symbol `free`, which the module does not define and Omega does not provide"
        );
        // A kernel built for clusters loads and carries its shape to every launch.
        assert_eq!(module.kernel("clustered")?.meta().cluster, Some([2, 1, 1]));
        // printf through a device function: provided, and the launch gets vprintf's registers.
        let say = module.kernel("say")?;
        assert!(say.meta().printf);
        let lib = Module::parse(kernels::device_library("printf").unwrap(), &arch::HOPPER).unwrap();
        let vprintf = lib.function("omega_vprintf").unwrap();
        assert!(say.meta().registers >= vprintf.registers);
        assert!(say.meta().local_bytes_per_thread > 0);
        // The whole rdc pair, linked by nvlink, loads; the unlinked caller's kernel names its callee.
        let linked = s.load_module(&fixture("rdc_linked.sm_90a.cubin"))?;
        assert!(linked.kernel("rdc_kernel").is_ok());
        let caller = s.load_module(&fixture("rdc_caller.sm_90a.cubin"))?;
        let e = caller.kernel("rdc_kernel").unwrap_err();
        let undefined = LoadError::UndefinedSymbol { symbol: "_Z11triple_plusi".into() };
        assert_eq!(e, Error::Load(undefined.for_kernel("rdc_kernel")));
        Ok(())
    });
    let (_dev, r) = r.into_open().expect("no latch");
    r.unwrap();
}

#[test]
fn load_cubin_takes_any_kernel_of_a_module() {
    let dev = fresh();
    let r = dev.scope(|s, _gpu| {
        // `load_cubin` loads the whole module: printf is provided for the kernel that calls it.
        assert!(s.load_cubin(mixed(), MIXED_PRINTF).is_ok());
        assert!(s.load_cubin(mixed(), MIXED_PLAIN).is_ok());
    });
    assert!(matches!(r, Scoped::Open(..)));
}

#[test]
fn cluster_kernels_run_in_their_shape_and_refuse_another() {
    use omega::kernels::cluster::{cluster_ref, CLUSTER_ANY, CLUSTER_PAIRS, CLUSTER_THREADS, CLUSTER_WORDS_PER_BLOCK};
    let dev = fresh();
    let module = kernels::cuda_module(kernels::CLUSTER).unwrap();
    let r = dev.scope(|s, gpu| -> Result<(), Error> {
        let m = s.load_module(module)?;
        let pairs = m.kernel(CLUSTER_PAIRS)?;
        assert_eq!(pairs.meta().cluster, Some([2, 1, 1]));
        let mut out = s.alloc::<u32>(8 * CLUSTER_WORDS_PER_BLOCK)?;
        out.fill(0xdead_beef)?;
        fn shape<'k, 's>(l: Launch<'k, 's>) -> Launch<'k, 's> {
            l.grid([8, 1, 1]).block([CLUSTER_THREADS, 1, 1]).arg(7u32)
        }
        // Its own shape runs; another is refused before submit, naming both.
        let gpu = gpu.launch(&shape(Launch::new(&pairs).arg(&out))).map_err(|e| e.error)?.gpu;
        let want: Vec<u32> = (0..8).flat_map(|b| cluster_ref(b, 8, 2, true, 7)).collect();
        assert_eq!(out.to_vec()?, want);
        let e = gpu.launch(&shape(Launch::new(&pairs).arg(&out)).cluster([4, 1, 1])).unwrap_err();
        assert!(matches!(
            &e.error,
            Error::LaunchArguments(omega::LaunchArgError::ClusterFixed { fixed: [2, 1, 1], asked: [4, 1, 1], .. })
        ));
        // The same body in runtime clusters of 4.
        let any = m.kernel(CLUSTER_ANY)?;
        let gpu = e.gpu.expect("a refusal hands the token back");
        gpu.launch(&shape(Launch::new(&any).arg(&out)).cluster([4, 1, 1])).map_err(|e| e.error)?;
        let want: Vec<u32> = (0..8).flat_map(|b| cluster_ref(b, 8, 4, true, 7)).collect();
        assert_eq!(out.to_vec()?, want);
        Ok(())
    });
    r.value().unwrap();
}
