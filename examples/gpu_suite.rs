//! The GPU test suite: every case runs on the installed platform (the H200 through `make gpu-test`, or
//! `sim` anywhere), checks its result against a CPU reference on fresh random inputs with the output
//! poisoned first, and the run ends with `N passed, M failed`.
//!
//! Cases that latch or fault the process run in a child process of their own (`gpu_suite --case NAME`),
//! so the parent stays usable and each child must exit cleanly.

use std::process::{Command, ExitCode};
use std::time::Instant;

use omega::{Error, Launch, Scoped};
use rand::Rng;

#[path = "suite/attention.rs"]
mod attention;
#[path = "suite/attention_ref.rs"]
mod attention_ref;
#[path = "common/mod.rs"]
mod common;
#[path = "suite/decoder.rs"]
mod decoder;
#[path = "suite/elementwise.rs"]
mod elementwise;
#[path = "suite/prefill.rs"]
mod prefill;
#[path = "suite/qwen3.rs"]
mod qwen3;
#[path = "suite/serving.rs"]
mod serving;

type CaseResult = Result<String, String>;
type Case = (&'static str, fn() -> CaseResult);

omega::kernel!(VectorAdd = "kernels/vector_add.ptx", params(a: &f32, b: &f32, c: &mut f32, n: u32));
omega::kernel!(ScaleCopy = "kernels/scale_copy.ptx", params(src: &f32, dst: &mut f32, alpha: f32, n: u32));

#[derive(omega::LaunchArgs)]
struct ScaleCopyArgs<'a, 's> {
    src: &'a omega::Mem<'s, omega::Data<f32>>,
    dst: &'a mut omega::Mem<'s, omega::Data<f32>>,
    alpha: f32,
    n: u32,
}

fn rng() -> rand::rngs::StdRng {
    common::rng(common::fresh_seed())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs `f` in a scope of the open device; a latch is a failure here.
fn with_scope<R>(
    f: impl for<'s> FnOnce(&'s omega::Scope<'s>, omega::Gpu<'s>) -> Result<R, String>,
) -> Result<R, String> {
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    match dev.scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(l, r) => Err(format!("latched ({}); case said {:?}", l.cause(), r.err())),
    }
}

/// A vector add of `n` random f32 into a poisoned output, checked against the reference. With `declare`,
/// the launch goes through the C layer's descriptor declaring that many registers a thread instead of
/// the kernel's own count (see [`raw_vector_add`]).
fn vector_add(n: usize, declare: Option<u32>) -> CaseResult {
    let mut g = rng();
    let a = common::random_f32(&mut g, n);
    let b = common::random_f32(&mut g, n);
    with_scope(|s, gpu| {
        let da = s.alloc_from(&a).map_err(err)?;
        let db = s.alloc_from(&b).map_err(err)?;
        let mut dc = common::poisoned_f32(s, n).map_err(err)?;
        let k = s.load("vector_add").map_err(err)?;
        let grid = n.div_ceil(256) as u32;
        let elapsed_ns = match declare {
            None => {
                let l = Launch::new(&k).grid([grid, 1, 1]).block([256, 1, 1]);
                gpu.launch(&l.arg(&da).arg(&db).arg(&dc).arg(n as u32)).map_err(err)?.elapsed_ns
            }
            Some(gpr_count) => raw_vector_add(&k, [da.va(), db.va(), dc.va()], n as u32, grid, gpr_count)?.elapsed_ns,
        };
        let c = dc.to_vec().map_err(err)?;
        let want = omega::kernels::vector_add_ref(&a, &b);
        let bad = common::mismatches(&c, &want).len();
        if bad > 0 {
            return Err(format!("{bad} of {n} elements wrong"));
        }
        // On the simulator the launch time is its virtual clock's: say so.
        let simulated = common::is_sim(s.platform());
        let clock = if simulated { " of simulated time" } else { "" };
        let declared = match declare {
            Some(r) => format!(", {r} registers declared, {} sent", omega::session::round_gpr(r)),
            None => String::new(),
        };
        Ok(format!("{n} elements, {:.1} us{clock}{declared}", elapsed_ns as f64 / 1e3))
    })
}

/// One launch of `vector_add(a, b, c, n)` in `grid` blocks of 256 threads through the C layer's
/// descriptor, declaring `gpr_count` registers a thread. Declaring 255 (a kernel that uses every register
/// a thread has) is rounded to 256, as libcuda rounds it, and the QMD carries 256: 256 threads of it take
/// the SM's whole 64K-register file. Until the limit was 256 this launch was refused.
fn raw_vector_add(
    k: &omega::Kernel<'_>,
    bufs: [u64; 3],
    n: u32,
    grid: u32,
    gpr_count: u32,
) -> Result<omega::session::LaunchCompletion, String> {
    let mut words: Vec<u32> = bufs.iter().flat_map(|&va| [va as u32, (va >> 32) as u32]).collect();
    words.push(n);
    let l = omega::session::RawLaunch {
        code_va: k.entry_va(),
        gpr_count,
        threads_x: 256,
        threads_y: 1,
        grid_x: grid,
        grid_y: 1,
        num_elements: n,
        args: words.as_ptr(),
        n_args: words.len() as u32,
        timeout_ms: 1000,
        shared_bytes: 0,
        spin_us: 0,
    };
    // SAFETY: `l.args` points to `l.n_args` words that live until the call returns; the calling scope
    // holds the session lock on this thread and keeps the three buffers alive.
    unsafe { omega::session::runtime().launch_raw(&l) }.map_err(err)
}

fn ten_thousand_launches() -> CaseResult {
    with_scope(|s, gpu| {
        let mut out = s.alloc::<u32>(1).map_err(err)?;
        out.fill(u32::MAX).map_err(err)?;
        let k = s.load("store_to").map_err(err)?;
        let mut gpu = gpu;
        let mut last_marker = 0u32;
        let start = Instant::now();
        for i in 0..10_000u32 {
            let done = gpu.launch(&Launch::new(&k).arg(&out).arg(i)).map_err(|e| format!("launch {i}: {e}"))?;
            if i > 0 && done.marker != last_marker.wrapping_add(1) {
                return Err(format!("launch {i}: marker {} after {last_marker}", done.marker));
            }
            last_marker = done.marker;
            gpu = done.gpu;
        }
        let per = start.elapsed().as_secs_f64() * 1e6 / 10_000.0;
        let v = out.to_vec().map_err(err)?;
        if v[0] != 9_999 {
            return Err(format!("last store read {} (want 9999)", v[0]));
        }
        Ok(format!("10000 launches, {per:.1} us each"))
    })
}

fn grid_2d() -> CaseResult {
    let mut g = rng();
    let block = [g.random_range(1..=32u32), g.random_range(1..=16u32)];
    let grid = [g.random_range(1..=40u32), g.random_range(1..=20u32)];
    with_scope(|s, gpu| {
        let n = (block[0] * grid[0] * block[1] * grid[1]) as usize;
        let mut out = s.alloc::<u32>(n).map_err(err)?;
        out.fill(0xdead_beef).map_err(err)?;
        let k = s.load("grid_index").map_err(err)?;
        gpu.launch(&Launch::new(&k).grid([grid[0], grid[1], 1]).block([block[0], block[1], 1]).arg(&out))
            .map_err(err)?;
        if out.to_vec().map_err(err)? != omega::kernels::grid_index_ref(block, grid) {
            return Err(format!("grid {grid:?} of blocks {block:?}: wrong indices"));
        }
        Ok(format!("grid {grid:?} x block {block:?}"))
    })
}

fn shared_memory() -> CaseResult {
    let mut g = rng();
    let (n, blocks) = (g.random_range(32..=256usize), g.random_range(1..=64usize));
    let input: Vec<f32> = (0..n * blocks).map(|_| g.random_range(-1.0f32..1.0)).collect();
    with_scope(|s, gpu| {
        let din = s.alloc_from(&input).map_err(err)?;
        let mut dout = common::poisoned_f32(s, input.len()).map_err(err)?;
        let k = s.load("shared_reverse").map_err(err)?;
        let l = Launch::new(&k)
            .grid([blocks as u32, 1, 1])
            .block([n as u32, 1, 1])
            .dynamic_shared((n * 4) as u32)
            .arg(&din)
            .arg(&dout);
        gpu.launch(&l).map_err(err)?;
        if dout.to_vec().map_err(err)? != omega::kernels::shared_reverse_ref(&input, n) {
            return Err("block slices not reversed".into());
        }
        Ok(format!("{blocks} blocks of {n}: static 1 KiB + dynamic {} B", n * 4))
    })
}

fn local_memory() -> CaseResult {
    let mut g = rng();
    let (threads, blocks, key) = (g.random_range(32..=512u32), g.random_range(1..=200u32), g.random::<u32>());
    with_scope(|s, gpu| {
        let mut out = s.alloc::<u32>((threads * blocks) as usize).map_err(err)?;
        out.fill(0).map_err(err)?;
        let k = s.load("local_array").map_err(err)?;
        gpu.launch(&Launch::new(&k).grid([blocks, 1, 1]).block([threads, 1, 1]).arg(&out).arg(key)).map_err(err)?;
        if out.to_vec().map_err(err)? != omega::kernels::local_array_ref(threads, blocks, key) {
            return Err("stack array contents wrong".into());
        }
        Ok(format!("{blocks} x {threads} threads, {} B stack each", k.meta().local_bytes_per_thread))
    })
}

fn four_threads() -> CaseResult {
    let results: Vec<CaseResult> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|_| sc.spawn(|| (0..5).map(|_| vector_add(1 << 16, None)).collect::<Result<Vec<_>, _>>()))
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| "thread panicked".to_string())?.map(|v| format!("{}", v.len())))
            .collect()
    });
    for r in &results {
        r.clone()?;
    }
    Ok("4 threads x 5 checked vector adds".into())
}

/// Dependent launches of a command list must not overlap: each launch of the `timestamps` kernel records
/// every block's start and end, and every block of launch i+1 must start after every block of launch i
/// ended. Independent launches are also run, and whether they overlapped is reported.
fn cmdlist_ordering() -> CaseResult {
    let launches = 8usize;
    let blocks = 264u32; // two per SM: the whole chip is busy, so an overlap would show
    let spin_ns = 20_000u64;
    with_scope(|s, gpu| {
        let k = s.load("timestamps").map_err(err)?;
        let mut stamps = Vec::new();
        for _ in 0..2 * launches {
            let mut m = s.alloc::<u64>(2 * blocks as usize).map_err(err)?;
            m.fill(0).map_err(err)?;
            stamps.push(m);
        }
        let mut gpu = gpu;
        let mut report = String::new();
        for (round, independent) in [(0usize, false), (1, true)] {
            let mut list = s.cmdlist().map_err(err)?;
            let ls: Vec<Launch> = (0..launches)
                .map(|i| {
                    Launch::new(&k)
                        .grid([blocks, 1, 1])
                        .block([32, 1, 1])
                        .arg(&stamps[round * launches + i])
                        .arg(spin_ns)
                })
                .collect();
            for (i, l) in ls.iter().enumerate() {
                if independent && i > 0 {
                    list.add_independent(l).map_err(err)?;
                } else {
                    list.add(l).map_err(err)?;
                }
            }
            gpu = gpu.submit(&mut list).map_err(err)?.gpu;
            let got: Vec<Vec<u64>> =
                (0..launches).map(|i| stamps[round * launches + i].to_vec()).collect::<Result<_, _>>().map_err(err)?;
            if !independent {
                for i in 1..launches {
                    omega::cmdlist::check_no_overlap(&got[i - 1], &got[i])
                        .map_err(|e| format!("launches {} and {i}: {e}", i - 1))?;
                }
                report +=
                    &format!("{launches} dependent launches of {blocks} blocks x {} us: no overlap", spin_ns / 1000);
            } else {
                let overlapped =
                    (1..launches).filter(|&i| omega::cmdlist::check_no_overlap(&got[i - 1], &got[i]).is_err()).count();
                report += &format!("; independent: {overlapped} of {} pairs overlapped", launches - 1);
            }
        }
        Ok(report)
    })
}

/// A kernel that reads module data: a `__constant__` table (constant bank 3) and an initialised
/// `__device__` counter whose address is in constant bank 4. Unbound banks read zeros, so every element
/// would come out 0. Run as a single launch twice (the second replays the prepared encoding, with the
/// output poisoned again in between) and as a dependent command list with a different scale per launch.
fn module_data() -> CaseResult {
    let mut g = rng();
    let n = g.random_range(1_000..=300_000usize);
    let scales: Vec<f32> = (0..4).map(|_| g.random_range(-4.0f32..4.0)).collect();
    let grid = [n.div_ceil(256).min(528) as u32, 1, 1];
    let check = |got: &[f32], scale: f32, what: &str| -> Result<(), String> {
        let want = omega::kernels::module_data_ref(scale, n);
        let bad = common::mismatches(got, &want);
        match bad.first() {
            None => Ok(()),
            Some(&i) => Err(format!("{what}: {} of {n} wrong, [{i}] = {} (want {})", bad.len(), got[i], want[i])),
        }
    };
    with_scope(|s, gpu| {
        let k = s.load("module_data").map_err(err)?;
        let banks: Vec<u32> = k.meta().const_banks.iter().map(|b| b.index).collect();
        let mut out = s.alloc::<f32>(n).map_err(err)?;
        let mut gpu = gpu;
        for round in 0..2 {
            out.fill(f32::NAN).map_err(err)?;
            let l = Launch::new(&k).grid(grid).block([256, 1, 1]).arg(&out).arg(scales[0]).arg(n as u32);
            gpu = gpu.launch(&l).map_err(err)?.gpu;
            check(&out.to_vec().map_err(err)?, scales[0], &format!("launch {round}"))?;
        }
        let mut outs = Vec::new();
        for _ in 1..scales.len() {
            outs.push(common::poisoned_f32(s, n).map_err(err)?);
        }
        {
            let mut list = s.cmdlist().map_err(err)?;
            let ls: Vec<Launch> = outs
                .iter()
                .zip(&scales[1..])
                .map(|(o, &sc)| Launch::new(&k).grid(grid).block([256, 1, 1]).arg(o).arg(sc).arg(n as u32))
                .collect();
            for l in &ls {
                list.add(l).map_err(err)?;
            }
            gpu.submit(&mut list).map_err(err)?;
        }
        for (i, (o, &sc)) in outs.iter_mut().zip(&scales[1..]).enumerate() {
            check(&o.to_vec().map_err(err)?, sc, &format!("list launch {i}"))?;
        }
        Ok(format!("{n} elements, banks {banks:?}, 2 launches + a 3-launch list"))
    })
}

/// What launch i writes, launch i + 1 reads: a dependent command list of `scale_copy` launches that
/// ping-pong between two buffers spread over the whole chip, against the same chain on the CPU. Both
/// buffers are checked (the last launch's output and the one before it).
fn chain_visibility() -> CaseResult {
    let mut g = rng();
    let launches = 64usize;
    let n = g.random_range((1 << 20)..=(1 << 21));
    let x: Vec<f32> = (0..n).map(|_| g.random_range(-1e3f32..1e3)).collect();
    let alphas: Vec<f32> = (0..launches).map(|_| g.random_range(0.5f32..2.0)).collect();
    let mut want = [x.clone(), x.clone()];
    for (i, &a) in alphas.iter().enumerate() {
        want[(i + 1) % 2] = omega::kernels::scale_copy_ref(&want[i % 2], a);
    }
    with_scope(|s, gpu| {
        let k = s.load("scale_copy").map_err(err)?;
        let mut bufs = [s.alloc_from(&x).map_err(err)?, {
            let mut b = s.alloc::<f32>(n).map_err(err)?;
            b.fill(f32::NAN).map_err(err)?;
            b
        }];
        {
            let mut list = s.cmdlist().map_err(err)?;
            let ls: Vec<Launch> = alphas
                .iter()
                .enumerate()
                .map(|(i, &a)| {
                    Launch::new(&k)
                        .grid([528, 1, 1])
                        .block([256, 1, 1])
                        .arg(&bufs[i % 2])
                        .arg(&bufs[(i + 1) % 2])
                        .arg(a)
                        .arg(n as u32)
                })
                .collect();
            for l in &ls {
                list.add(l).map_err(err)?;
            }
            gpu.submit(&mut list).map_err(err)?;
        }
        for (b, w) in bufs.iter_mut().zip(&want) {
            let got = b.to_vec().map_err(err)?;
            let bad = (0..n).filter(|&i| got[i].to_bits() != w[i].to_bits()).count();
            if bad > 0 {
                return Err(format!("{bad} of {n} elements differ from the CPU chain"));
            }
        }
        Ok(format!("{launches} dependent launches over {n} elements ping-ponged, both buffers exact"))
    })
}

/// The job engine's VECTOR_1D job on the process's device, against a CPU reference.
fn engine_vector_job() -> CaseResult {
    let mut g = rng();
    let n = g.random_range(1_000..200_000usize);
    let a: Vec<f32> = (0..n).map(|_| g.random_range(-1e3f32..1e3)).collect();
    let b: Vec<f32> = (0..n).map(|_| g.random_range(-1e3f32..1e3)).collect();
    let mut out = vec![f32::NAN; n];
    let lock = omega::lock();
    let r = {
        let job = omega::engine::Job::vector_1d(&a, &b, &mut out).map_err(err)?;
        omega::engine::execute(&job)
    };
    drop(lock);
    if r.failure != 0 {
        return Err(format!(
            "failure {} at step {} (wait {})",
            omega::engine::failure_name(r.failure),
            omega::engine::step_name(r.step),
            omega::engine::wait_name(r.wait)
        ));
    }
    if out != omega::kernels::vector_add_ref(&a, &b) {
        return Err("output differs from the reference".into());
    }
    Ok(format!("{n} elements, state {}", omega::engine::state_name(r.state)))
}

/// Typed launches: handles generated by `omega::kernel!` from the PTX (checked at load against the cubin's
/// own parameter table) and a `#[derive(LaunchArgs)]` struct.
fn typed_handles() -> CaseResult {
    let mut g = rng();
    let n = g.random_range(1..=(1usize << 20));
    let (x, y, alpha) = (
        (0..n).map(|_| g.random_range(-1e3f32..1e3)).collect::<Vec<_>>(),
        (0..n).map(|_| g.random_range(-1e3f32..1e3)).collect::<Vec<_>>(),
        g.random_range(-4.0f32..4.0),
    );
    with_scope(|s, gpu| {
        let a = s.alloc_from(&x).map_err(err)?;
        let b = s.alloc_from(&y).map_err(err)?;
        let mut c = s.alloc::<f32>(n).map_err(err)?;
        c.fill(f32::NAN).map_err(err)?;
        let va = VectorAdd::load(s).map_err(err)?;
        let blocks = (n as u32).div_ceil(256);
        let gpu =
            gpu.launch(&va.launch(&a, &b, &mut c, n as u32).grid([blocks, 1, 1]).block([256, 1, 1])).map_err(err)?.gpu;
        if c.to_vec().map_err(err)? != omega::kernels::vector_add_ref(&x, &y) {
            return Err("kernel! vector_add: wrong result".into());
        }
        let sc = ScaleCopy::load(s).map_err(err)?;
        let mut d = s.alloc::<f32>(n).map_err(err)?;
        d.fill(f32::NAN).map_err(err)?;
        let args = ScaleCopyArgs { src: &a, dst: &mut d, alpha, n: n as u32 };
        gpu.launch(&Launch::new(sc.kernel()).grid([264, 1, 1]).block([256, 1, 1]).args(&args)).map_err(err)?;
        if d.to_vec().map_err(err)? != omega::kernels::scale_copy_ref(&x, alpha) {
            return Err("derived args scale_copy: wrong result".into());
        }
        Ok(format!("kernel! vector_add and derive(LaunchArgs) scale_copy, {n} elements"))
    })
}

/// Child: a kernel that never ends with a 100 ms timeout.
fn hang_latches() -> CaseResult {
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    let t0 = Instant::now();
    let scoped = dev.scope(|s, gpu| -> Result<(), String> {
        let mut flag = s.alloc::<u32>(1).map_err(err)?;
        flag.fill(0).map_err(err)?;
        let _other = s.alloc::<f32>(1 << 20).map_err(err)?;
        let k = s.load("spin").map_err(err)?;
        let e =
            gpu.launch(&Launch::new(&k).grid([132, 1, 1]).block([128, 1, 1]).timeout_ms(100).arg(&flag)).unwrap_err();
        if e.gpu.is_some() || !matches!(e.error, Error::Timeout { .. }) {
            return Err(format!("expected a latching timeout, got {}", e.error));
        }
        Ok(())
    });
    let Scoped::Latched(latched, r) = scoped else { return Err("scope did not end latched".into()) };
    r?;
    let p = latched.parked();
    if p.buffers < 4 {
        return Err(format!("only {} buffers parked", p.buffers));
    }
    // The channel's own buffers the hung kernel's work may still touch, parked at the latch without a
    // handle: the GPFIFO ring, the error notifier, the command arena, the prepared pool, the semaphores.
    if p.untracked < 5 {
        return Err(format!("only {} of the platform's own buffers counted as parked", p.untracked));
    }
    drop(latched);
    let again = omega::lock();
    if !again.is_blocked() {
        return Err("is_blocked is 0 after the latch".into());
    }
    let Err(e) = again.open() else { return Err("reopen accepted after the latch".into()) };
    Ok(format!(
        "latched after {} ms; {} buffers ({} of the platform's own, {} bytes) parked; reopen refused: {}",
        t0.elapsed().as_millis(),
        p.buffers,
        p.untracked,
        p.bytes,
        e.error
    ))
}

/// Child: recovery from a latch. A kernel that never ends and beats a counter (`spin_beat`, 132 blocks)
/// latches the process at its 100 ms timeout; `Latched::recover` stops and frees the channel and its group
/// (the group's free is what proves the stop when the channel stop is refused, as the H200's was) and
/// watches the parked buffers, which must show the counter moving before the stop and nothing moving
/// after it; then the parked bytes are back to zero, the driver's free framebuffer is what it was before
/// the case allocated anything (the memory went back), and the reopened device in this same process adds
/// 1M random vectors into a poisoned output, checked. The recovery's time and the step that proved the
/// stop are printed as a bench line.
fn recover_after_hang() -> CaseResult {
    const MIB: f64 = (1u64 << 20) as f64;
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    // The driver's figure with only the session's own buffers allocated: what a fresh open holds.
    let free_open = dev.mem_info().map_err(err)?.free_bytes;
    let scoped = dev.scope(|s, gpu| -> Result<u64, String> {
        let mut flag = s.alloc::<u32>(1).map_err(err)?;
        flag.fill(0).map_err(err)?;
        let mut beat = s.alloc::<u32>(1).map_err(err)?;
        beat.fill(0).map_err(err)?;
        let _weights = s.alloc::<f32>(16 << 20).map_err(err)?;
        let held = omega::session::runtime().mem_info().map_err(err)?.free_bytes;
        let k = s.load("spin_beat").map_err(err)?;
        let l = Launch::new(&k).grid([132, 1, 1]).block([128, 1, 1]).timeout_ms(100).arg(&flag).arg(&beat);
        let e = gpu.launch(&l).unwrap_err();
        if e.gpu.is_some() || !matches!(e.error, Error::Timeout { .. }) {
            return Err(format!("expected a latching timeout, got {}", e.error));
        }
        Ok(held)
    });
    let Scoped::Latched(latched, held) = scoped else { return Err("scope did not end latched".into()) };
    let free_latched = held?;
    let parked = latched.parked();
    let t = Instant::now();
    let (closed, r) = latched.recover().map_err(|f| format!("recovery failed: {f}"))?;
    let recover_ms = t.elapsed().as_secs_f64() * 1e3;
    if r.moved_before_stop == 0 {
        return Err(format!("the heartbeat never saw the kernel's counter move before the stop: {r:?}"));
    }
    if closed.is_blocked() || closed.parked() != omega::session::ParkStats::default() {
        return Err(format!("after recovery: blocked {}, parked {:?}", closed.is_blocked(), closed.parked()));
    }
    let dev = closed.open().map_err(|e| format!("reopen after recovery: {}", e.error))?;
    let free_reopened = dev.mem_info().map_err(err)?.free_bytes;
    // The reopened session holds what the first open held; the parked buffers (64 MiB of weights among
    // them) went back to the driver. A few MiB of slack for the driver's own bookkeeping.
    if free_reopened + (8 << 20) < free_open {
        return Err(format!(
            "device memory not returned: {:.1} MiB free at the first open, {:.1} MiB after reopening",
            free_open as f64 / MIB,
            free_reopened as f64 / MIB
        ));
    }
    let n = 1 << 20;
    let mut g = rng();
    let (a, b) = (common::random_f32(&mut g, n), common::random_f32(&mut g, n));
    let bad = match dev.scope(|s, gpu| -> Result<usize, String> {
        let (da, db) = (s.alloc_from(&a).map_err(err)?, s.alloc_from(&b).map_err(err)?);
        let mut dc = common::poisoned_f32(s, n).map_err(err)?;
        let k = s.load("vector_add").map_err(err)?;
        let l = Launch::new(&k).grid([n.div_ceil(256) as u32, 1, 1]).block([256, 1, 1]);
        gpu.launch(&l.arg(&da).arg(&db).arg(&dc).arg(n as u32)).map_err(err)?;
        Ok(common::mismatches(&dc.to_vec().map_err(err)?, &omega::kernels::vector_add_ref(&a, &b)).len())
    }) {
        Scoped::Open(_, r) => r?,
        Scoped::Latched(l, _) => return Err(format!("the reopened device latched: {}", l.cause())),
    };
    if bad > 0 {
        return Err(format!("vector add after recovery: {bad} of {n} elements wrong"));
    }
    println!(
        "bench recover: {recover_ms:.2} ms wall ({:.2} ms on the platform clock, {} us heartbeat intervals x 2); \
         stop proved by {}",
        r.elapsed_ns as f64 / 1e6,
        r.interval_us,
        r.proved_by
    );
    let refused: Vec<String> = r.refused.iter().map(|f| f.to_string()).collect();
    Ok(format!(
        "latched, {} buffers / {:.1} MiB parked ({:.1} MiB of device memory held); stop proved by {} \
         (steps: {}; refused on the way: {}); channel: {}; \
         heartbeat over {} buffers ({} bytes, {} unwatched) moved in {} before the stop, none after; \
         released, reopened: free {:.1} MiB at first open, {:.1} MiB after; 1M vector add checked",
        parked.buffers,
        parked.bytes as f64 / MIB,
        free_open.saturating_sub(free_latched) as f64 / MIB,
        r.proved_by,
        r.steps.join(", "),
        if refused.is_empty() { "none".to_string() } else { refused.join("; ") },
        r.channel,
        r.watched_buffers,
        r.watched_bytes,
        r.unwatched_buffers,
        r.moved_before_stop,
        free_open as f64 / MIB,
        free_reopened as f64 / MIB,
    ))
}

/// Child: a store to an unmapped address.
/// Host-visible memory of the platform's own (GPU-uncached, polled), below the session: the public API
/// hands out none, and a data buffer cannot be read back once its channel has faulted.
struct StampPage {
    platform: std::sync::Arc<dyn omega::testing::Platform>,
    a: omega_hal::Allocation,
}

impl StampPage {
    /// One page. Only inside a scope of the open device (the session lock is this thread's).
    fn alloc(platform: std::sync::Arc<dyn omega::testing::Platform>) -> Result<StampPage, String> {
        use omega_hal::{BufferDesc, BufferKind, CachePolicy, Rights};
        let rights = Rights::HOST_POLLED | Rights::GPU_WRITE | Rights::CPU_READ | Rights::CPU_WRITE;
        let desc = BufferDesc { bytes: 4096, rights, cache: CachePolicy::Uncached, kind: BufferKind::Queue };
        let mem = platform.memory().ok_or("the platform has no memory service")?;
        // SAFETY: called inside `Locked::scope` of the open device, so the device is open and this thread
        // holds the session lock; the descriptor passes `check_buffer` (polled and uncached, one page).
        let a = unsafe { mem.alloc(&desc) }.map_err(err)?;
        Ok(StampPage { platform, a })
    }

    /// The u64 at byte `at`, as the GPU last wrote it.
    fn read(&self, at: usize) -> u64 {
        // SAFETY: `at` is below 4096 - 8 and 8-aligned in every call; the page is live until drop, and
        // HOST_POLLED memory is coherent with the GPU's writes.
        unsafe { (self.a.cpu.add(at) as *const u64).read_volatile() }
    }

    fn clear(&self) {
        // SAFETY: the page's CPU view is writable and 4096 bytes long.
        unsafe { std::ptr::write_bytes(self.a.cpu, 0, 4096) };
    }
}

impl Drop for StampPage {
    fn drop(&mut self) {
        if let Some(mem) = self.platform.memory() {
            // SAFETY: allocated by `alloc` on this platform and freed once, inside the same scope (the lock
            // is still held); the last launch that wrote it either completed or faulted, and a faulted
            // channel runs nothing more.
            unsafe { mem.free(&self.a) };
        }
    }
}

/// The fault signal the platform reports, if it reports one.
fn fault_signal_note(platform: &dyn omega::testing::Platform) -> String {
    platform
        .notes()
        .into_iter()
        .find(|(what, _)| *what == "fault signal")
        .map_or_else(|| "the platform names no fault signal".to_string(), |(_, note)| note)
}

/// Child: a store to an unmapped address, named as an MMU fault, and the time from the fault to the error.
///
/// `stamp_then_store` writes %globaltimer to a polled page, fences, then stores to the unmapped address.
/// The GPU's clock is aligned with the platform's first: 32 launches of the same kernel on a mapped
/// address, each bracketed by platform-clock reads, the tightest bracket kept (the stamp lies inside it,
/// so the offset is known to half its width). The latency is the time the launch returned the error
/// minus the stamp on the platform's clock. Without any alignment, the time from just before the launch
/// call to the error is an upper bound of it, and that bound is what is asserted: at most 10 ms when the
/// platform says it watches UVM's fault events, only reported otherwise.
fn mmu_fault() -> CaseResult {
    let t0 = Instant::now();
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    let platform = omega::testing::platform_of(omega::session::runtime()).map_err(err)?;
    let signal = fault_signal_note(&*platform);
    let claims_fast = signal.starts_with("UVM fatal-fault events");
    let simulated = common::is_sim(dev.platform());
    let r = dev.scope(|s, mut gpu| -> Result<String, String> {
        let clock = platform.clock().ok_or("the platform has no clock")?;
        let k = s.load("stamp_then_store").map_err(err)?;
        let page = StampPage::alloc(platform.clone())?;
        let mut best: Option<(u64, i128)> = None;
        for i in 0..32u32 {
            page.clear();
            let before = clock.now_ns();
            let l = Launch::new(&k).arg(page.a.va).arg(page.a.va + 8).arg(i);
            gpu = gpu.launch(&l).map_err(|e| format!("alignment launch {i}: {}", e.error))?.gpu;
            let after = clock.now_ns();
            let (g, v) = (page.read(0), page.read(8) as u32);
            if v != i || g == 0 {
                return Err(format!("alignment launch {i}: stamp {g:#x}, value {v} (want {i})"));
            }
            let offset = g as i128 - (before as i128 + after as i128) / 2;
            if best.is_none_or(|(w, _)| after - before < w) {
                best = Some((after - before, offset));
            }
        }
        let (window, offset) = best.expect("32 launches");
        page.clear();
        // A typed launch only takes device buffers; the raw addresses go in as plain u64 on purpose.
        let l = Launch::new(&k).timeout_ms(10_000).arg(page.a.va).arg(0x7f00_0000_1000u64).arg(1u32);
        let submit = clock.now_ns();
        let r = gpu.launch(&l);
        let returned = clock.now_ns();
        let msg = match r {
            Err(e) if matches!(&e.error, Error::Fault(f) if f.xid == 31) => e.error.to_string(),
            Err(e) => return Err(format!("expected an Xid 31 fault, got {}", e.error)),
            Ok(_) => return Err("the store to an unmapped address completed".into()),
        };
        let g = page.read(0);
        if g == 0 {
            return Err(format!("{msg}: the kernel's stamp never reached the page"));
        }
        let fault_at = g as i128 - offset;
        let latency_ms = (returned as i128 - fault_at) as f64 / 1e6;
        let bound_ms = (returned - submit) as f64 / 1e6;
        let clock_note = if simulated { " (simulated time)" } else { "" };
        println!(
            "bench fault_to_error_ms {latency_ms:.3} (+-{:.1} us alignment){clock_note}; submit_to_error_ms {bound_ms:.3}; signal: {signal}",
            window as f64 / 2e3
        );
        if claims_fast && bound_ms > 10.0 {
            return Err(format!(
                "{msg}: named {bound_ms:.1} ms after the launch call ({latency_ms:.1} ms after the fault), \
                 past the 10 ms the fault signal claims ({signal})"
            ));
        }
        Ok(format!("{msg}; {latency_ms:.3} ms from the fault to the error, {bound_ms:.3} ms from the launch call"))
    });
    let msg = match r {
        Scoped::Open(_, r) => r?,
        Scoped::Latched(..) => return Err("a fault must not latch".into()),
    };
    if t0.elapsed().as_secs() >= 5 {
        return Err(format!("fault seen only after {:?}", t0.elapsed()));
    }
    Ok(format!("{msg} (case {} ms)", t0.elapsed().as_millis()))
}

/// Groups printed `mixed_printf` lines by thread (the `t=` field), in the order they were printed.
fn lines_by_thread(text: &str, threads: u32) -> Result<Vec<Vec<String>>, String> {
    let mut by = vec![Vec::new(); threads as usize];
    for line in text.split_inclusive('\n').filter(|l| !l.starts_with(omega::printf::OVERFLOW_MARK)) {
        let t: u32 = line
            .strip_prefix("t=")
            .and_then(|r| r.split(' ').next())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("not a mixed_printf line: {line:?}"))?;
        by.get_mut(t as usize).ok_or_else(|| format!("thread {t} of {threads}: {line:?}"))?.push(line.to_string());
    }
    Ok(by)
}

/// Device printf from 2048 threads, 3 lines each, in two rounds with fresh random arguments: every line
/// formatted as the C library formats it, each thread's lines in program order; then a 64 KiB buffer in
/// a fresh session overflows, keeping a prefix of each thread's lines and marking how many were lost.
fn device_printf() -> CaseResult {
    let mut g = rng();
    let (blocks, block, lines) = (16u32, 128u32, 3u32);
    let threads = blocks * block;
    let capture = omega::printf::capture();
    let run = |base: i32, scale: f64, lines: u32| -> Result<(), String> {
        with_scope(|s, gpu| {
            let module =
                s.load_module(omega::kernels::cuda_module(omega::kernels::MIXED).map_err(err)?).map_err(err)?;
            let k = module.kernel(omega::kernels::MIXED_PRINTF).map_err(err)?;
            let l = Launch::new(&k).grid([blocks, 1, 1]).block([block, 1, 1]).arg(base).arg(scale).arg(lines);
            gpu.launch(&l).map_err(err)?;
            Ok(())
        })
    };
    let mut report = Vec::new();
    for round in 0..2 {
        let (base, scale) = (g.random_range(-1_000_000..1_000_000), g.random_range(-1e3..1e3));
        run(base, scale, lines)?;
        let text = capture.take();
        let got = lines_by_thread(&text, threads)?;
        let want = omega::kernels::mixed_printf_expected(base, scale, threads, lines);
        if let Some(t) = (0..threads as usize).find(|&t| got[t] != want[t]) {
            return Err(format!("round {round}: thread {t} printed {:?}, want {:?}", got[t], want[t]));
        }
        report.push(format!("{} lines", text.lines().count()));
    }
    // Overflow: a session whose buffer holds only part of the output.
    let small = 64 << 10;
    let set = (|| {
        let closed = omega::lock().open().map_err(|e| err(e.error))?.close();
        omega::printf::set_buffer_bytes(small).map_err(err)?;
        drop(closed);
        let (base, scale) = (g.random_range(-1000..1000), g.random_range(-10.0..10.0));
        run(base, scale, lines)?;
        let text = capture.take();
        let got = lines_by_thread(&text, threads)?;
        let want = omega::kernels::mixed_printf_expected(base, scale, threads, lines);
        let printed: usize = got.iter().map(Vec::len).sum();
        for t in 0..threads as usize {
            if got[t][..] != want[t][..got[t].len()] {
                return Err(format!("overflow: thread {t} printed {:?}, not a prefix of its lines", got[t]));
            }
        }
        let lost = (threads * lines) as usize - printed;
        let mark = text.lines().last().unwrap_or_default().to_string();
        if lost == 0
            || !mark.starts_with(omega::printf::OVERFLOW_MARK)
            || !mark.contains(&format!("{lost} record(s) lost"))
        {
            return Err(format!("overflow: {printed} printed, {lost} lost, last line {mark:?}"));
        }
        Ok(format!("{small} B buffer: {printed} kept, {lost} marked lost"))
    })();
    // Back to the default buffer in a fresh session, whatever happened.
    if let Ok(dev) = omega::lock().open() {
        let closed = dev.close();
        let _ = omega::printf::set_buffer_bytes(omega::printf::DEFAULT_BUFFER_BYTES);
        drop(closed);
    }
    omega::printf::set_output(omega::printf::Output::Stdout);
    report.push(set?);
    Ok(format!("{threads} threads x {lines} lines: {}", report.join(", ")))
}

/// The nvcc-built `mixed` module on the device: its plain, template and printf kernels and the module
/// data they share, each output poisoned first and checked bit for bit against its reference.
fn mixed_module() -> CaseResult {
    use omega::kernels as k;
    let mut g = rng();
    let n = g.random_range(1_000..=200_000usize);
    let grid = [n.div_ceil(256) as u32, 1, 1];
    let capture = omega::printf::capture();
    let r = with_scope(|s, gpu| {
        let module = s.load_module(k::cuda_module(k::MIXED).map_err(err)?).map_err(err)?;
        let plain = module.kernel(k::MIXED_PLAIN).map_err(err)?;
        let counter = module.kernel(k::MIXED_COUNTER).map_err(err)?;
        let mut out = s.alloc::<f32>(n).map_err(err)?;
        out.fill(f32::NAN).map_err(err)?;
        let gpu =
            gpu.launch(&Launch::new(&plain).grid(grid).block([256, 1, 1]).arg(&out).arg(n as u32)).map_err(err)?.gpu;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if bits(&out.to_vec().map_err(err)?) != bits(&k::mixed_plain_ref(n)) {
            return Err("mixed_plain: output differs from the reference (__constant__ / __device__ data)".into());
        }
        let mut count = [0u8; 4];
        module.read_global("mixed_count", &mut count).map_err(err)?;
        if u32::from_le_bytes(count) != n as u32 {
            return Err(format!("mixed_count is {} after {n} elements", u32::from_le_bytes(count)));
        }
        let mut seen = s.alloc::<u32>(1).map_err(err)?;
        seen.fill(u32::MAX).map_err(err)?;
        let gpu = gpu.launch(&Launch::new(&counter).arg(&seen)).map_err(err)?.gpu;
        if seen.to_vec().map_err(err)? != [n as u32] {
            return Err(format!("mixed_counter read {:?}, want [{n}]", seen.to_vec().map_err(err)?));
        }
        // In one dependent list: plain writes the counter, counter reads and resets it.
        seen.fill(u32::MAX).map_err(err)?;
        let mut gpu = gpu;
        {
            let m = (n / 3) as u32;
            let mut list = s.cmdlist().map_err(err)?;
            let a = Launch::new(&plain).grid(grid).block([256, 1, 1]).arg(&out).arg(m);
            let b = Launch::new(&counter).arg(&seen);
            list.add(&a).map_err(err)?;
            list.add(&b).map_err(err)?;
            gpu = gpu.submit(&mut list).map_err(err)?.gpu;
            if seen.to_vec().map_err(err)? != [m] {
                return Err(format!("list: mixed_counter read {:?}, want [{m}]", seen.to_vec().map_err(err)?));
            }
        }
        // Template kernels by their mangled names.
        let data: Vec<f32> = (0..n).map(|_| g.random_range(-1e4f32..1e4)).collect();
        let factor = g.random_range(-8.0f32..8.0);
        let mut buf = s.alloc_from(&data).map_err(err)?;
        let scale = module.kernel(k::MIXED_SCALE_F32).map_err(err)?;
        gpu = gpu
            .launch(&Launch::new(&scale).grid(grid).block([256, 1, 1]).arg(&buf).arg(factor).arg(n as u32))
            .map_err(err)?
            .gpu;
        if bits(&buf.to_vec().map_err(err)?) != bits(&k::mixed_scale_f32_ref(&data, factor)) {
            return Err("mixed_scale<float>: output differs from the reference".into());
        }
        let ints: Vec<i32> = (0..n).map(|_| g.random_range(-1_000_000..1_000_000)).collect();
        let ifactor = g.random_range(-100..100);
        let mut ibuf = s.alloc_from(&ints).map_err(err)?;
        let iscale = module.kernel(k::MIXED_SCALE_I32).map_err(err)?;
        gpu = gpu
            .launch(&Launch::new(&iscale).grid(grid).block([256, 1, 1]).arg(&ibuf).arg(ifactor).arg(n as u32))
            .map_err(err)?
            .gpu;
        if ibuf.to_vec().map_err(err)? != k::mixed_scale_i32_ref(&ints, ifactor) {
            return Err("mixed_scale<int>: output differs from the reference".into());
        }
        for (name, f) in [(k::MIXED_FILL_7, 7), (k::MIXED_FILL_MINUS_3, -3)] {
            ibuf.fill(i32::MIN).map_err(err)?;
            let fill = module.kernel(name).map_err(err)?;
            gpu = gpu
                .launch(&Launch::new(&fill).grid(grid).block([256, 1, 1]).arg(&ibuf).arg(n as u32))
                .map_err(err)?
                .gpu;
            if ibuf.to_vec().map_err(err)? != k::mixed_fill_ref(f, n) {
                return Err(format!("{name}: output differs from the reference"));
            }
        }
        // The printf kernel of the same module, beside the others.
        let printf = module.kernel(k::MIXED_PRINTF).map_err(err)?;
        let (base, pscale) = (g.random_range(-1000..1000), g.random_range(-10.0..10.0));
        gpu.launch(&Launch::new(&printf).block([4, 1, 1]).arg(base).arg(pscale).arg(2u32)).map_err(err)?;
        let got = lines_by_thread(&capture.take(), 4)?;
        if got != k::mixed_printf_expected(base, pscale, 4, 2) {
            return Err(format!("mixed_printf printed {got:?}"));
        }
        Ok(format!(
            "{n} elements; plain, counter, a 2-launch list, scale<float>, scale<int>, fill<7>, fill<-3>, printf \
             (registers {}, local {} B)",
            printf.meta().registers,
            printf.meta().local_bytes_per_thread
        ))
    });
    omega::printf::set_output(omega::printf::Output::Stdout);
    r
}

// ----- memory and waiting (issue 11) -------------------------------------------------------------------------

const GIB: u64 = 1 << 30;

/// The large buffer's contents: exact integers below 2^24 as f32, so `a + a` is exact, spread so that a
/// window read from the wrong place shows.
fn big_pattern(i: u64) -> f32 {
    ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) & 0xFF_FFFF) as f32
}

/// `out[j] = f(first + j)` on every core.
fn fill_parallel(out: &mut [f32], first: u64, f: fn(u64) -> f32) {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let per = out.len().div_ceil(threads).max(1);
    std::thread::scope(|t| {
        for (c, part) in out.chunks_mut(per).enumerate() {
            let base = first + (c * per) as u64;
            t.spawn(move || part.iter_mut().enumerate().for_each(|(j, v)| *v = f(base + j as u64)));
        }
    });
}

/// The first index `j` where `got[j] != 2 * f(first + j)`, on every core.
fn first_mismatch(got: &[f32], first: u64, f: fn(u64) -> f32) -> Option<usize> {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let per = got.len().div_ceil(threads).max(1);
    std::thread::scope(|t| {
        let handles: Vec<_> = got
            .chunks(per)
            .enumerate()
            .map(|(c, part)| {
                let base = first + (c * per) as u64;
                t.spawn(move || {
                    part.iter()
                        .enumerate()
                        .position(|(j, v)| v.to_bits() != (2.0 * f(base + j as u64)).to_bits())
                        .map(|j| c * per + j)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().expect("a checker thread")).min()
    })
}

/// One device-only buffer of at least 130 GiB, sized from the free memory the driver reports: written from
/// the host through the staging ring in windows, read whole by a kernel (`vector_add` of each window with
/// itself into a window-sized buffer, read back and checked), freed, and the memory seen free again.
fn large_buffer() -> CaseResult {
    const WINDOW: u64 = 256 << 20;
    with_scope(|s, gpu| {
        let rt = omega::session::runtime();
        let before = rt.mem_info().map_err(err)?;
        let gib = |b: u64| b as f64 / GIB as f64;
        if before.free_bytes < 131 * GIB {
            return Err(format!(
                "{:.2} GiB free of {:.2} GiB: the case needs 131 GiB free (a buffer of 130 GiB and room beside it)",
                gib(before.free_bytes),
                gib(before.total_bytes)
            ));
        }
        // Room beside it: the output window, the kernel, the session's chunks, the driver's own needs.
        let bytes = (before.free_bytes - WINDOW - (512 << 20)) / WINDOW * WINDOW;
        if bytes < 130 * GIB {
            return Err(format!(
                "{:.2} GiB free leaves only {:.2} GiB for the buffer",
                gib(before.free_bytes),
                gib(bytes)
            ));
        }
        let n = (bytes / 4) as usize;
        let per = (WINDOW / 4) as usize;
        let t = Instant::now();
        let mut big = s.alloc_device::<f32>(n).map_err(|e| format!("alloc {:.2} GiB: {e}", gib(bytes)))?;
        let alloc_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut host = vec![0f32; per];
        let t = Instant::now();
        for w in 0..n / per {
            fill_parallel(&mut host, (w * per) as u64, big_pattern);
            big.write_at(w * per, &host).map_err(|e| format!("write window {w}: {e}"))?;
        }
        let write_s = t.elapsed().as_secs_f64();
        let mut out = s.alloc_device::<f32>(per).map_err(err)?;
        let k = s.load("vector_add").map_err(err)?;
        let mut gpu = gpu;
        let t = Instant::now();
        for w in 0..n / per {
            let va = big.va() + w as u64 * WINDOW;
            let l = Launch::new(&k)
                .grid([(per / 256) as u32, 1, 1])
                .block([256, 1, 1])
                .timeout_ms(10_000)
                .arg(va)
                .arg(va)
                .arg(&out)
                .arg(per as u32);
            gpu = gpu.launch(&l).map_err(|e| format!("kernel on window {w}: {e}"))?.gpu;
            out.read(&mut host).map_err(|e| format!("read window {w}: {e}"))?;
            if let Some(j) = first_mismatch(&host, (w * per) as u64, big_pattern) {
                let i = (w * per + j) as u64;
                return Err(format!("element {i} read {} by the kernel, want {}", host[j] / 2.0, big_pattern(i)));
            }
        }
        let check_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        drop(big);
        let free_ms = t.elapsed().as_secs_f64() * 1e3;
        let after = rt.mem_info().map_err(err)?;
        if after.free_bytes + WINDOW + (256 << 20) < before.free_bytes {
            return Err(format!(
                "freed, but {:.2} GiB free after against {:.2} GiB before",
                gib(after.free_bytes),
                gib(before.free_bytes)
            ));
        }
        Ok(format!(
            "{:.2} GiB of {:.2} GiB free: alloc {alloc_ms:.1} ms, written at {:.1} GB/s, read by {} kernels and \
             checked at {:.1} GB/s, freed in {free_ms:.1} ms",
            gib(bytes),
            gib(before.free_bytes),
            bytes as f64 / write_s / 1e9,
            n / per,
            bytes as f64 / check_s / 1e9
        ))
    })
}

/// 10^5 buffers live at once, each holding its own value: written from the host, 1000 of them rewritten by
/// a kernel, then every one read back.
fn many_buffers() -> CaseResult {
    const N: usize = 100_000;
    with_scope(|s, gpu| {
        let t = Instant::now();
        let mut bufs = Vec::with_capacity(N);
        for i in 0..N {
            bufs.push(s.alloc::<u32>(1).map_err(|e| format!("buffer {i}: {e}"))?);
        }
        let alloc_us = t.elapsed().as_secs_f64() * 1e6 / N as f64;
        let ms = omega::session::runtime().memory_stats();
        for (i, b) in bufs.iter_mut().enumerate() {
            b.write(&[i as u32]).map_err(|e| format!("write {i}: {e}"))?;
        }
        let k = s.load("store_to").map_err(err)?;
        let mut gpu = gpu;
        for (i, b) in bufs.iter().enumerate().step_by(100) {
            gpu = gpu.launch(&Launch::new(&k).arg(b).arg(i as u32 + 7)).map_err(|e| format!("launch {i}: {e}"))?.gpu;
        }
        let mut got = [0u32];
        for (i, b) in bufs.iter_mut().enumerate() {
            b.read(&mut got).map_err(|e| format!("read {i}: {e}"))?;
            let want = if i % 100 == 0 { i as u32 + 7 } else { i as u32 };
            if got[0] != want {
                return Err(format!("buffer {i} holds {} (want {want})", got[0]));
            }
        }
        let t = Instant::now();
        drop(bufs);
        let free_us = t.elapsed().as_secs_f64() * 1e6 / N as f64;
        Ok(format!(
            "{N} buffers in {} chunks; {alloc_us:.2} us per alloc, {free_us:.2} us per free; 1000 rewritten by a \
             kernel; every one checked",
            ms.carved.chunks
        ))
    })
}

/// CPU time this thread has used, seconds (getrusage RUSAGE_THREAD).
fn thread_cpu_s() -> Result<f64, String> {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a writable rusage; RUSAGE_THREAD asks for the calling thread's own figures.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } != 0 {
        return Err(format!("getrusage: {}", std::io::Error::last_os_error()));
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok(tv(u.ru_utime) + tv(u.ru_stime))
}

/// The default wait (no spin window anywhere): an empty launch completes, and its time is reported; a
/// thread waiting on a ~100 ms kernel uses at most 10% of the wall time in CPU.
fn default_wait() -> CaseResult {
    let rt = omega::session::runtime();
    rt.set_spin_us(0).map_err(err)?;
    with_scope(|s, gpu| {
        let k = s.load("empty").map_err(err)?;
        let empty = Launch::new(&k).spin_us(0).timeout_ms(5_000);
        let mut gpu = gpu;
        let mut lat = Vec::with_capacity(2000);
        for i in 0..2200 {
            let t = Instant::now();
            gpu = gpu.launch(&empty).map_err(|e| format!("empty launch {i}: {e}"))?.gpu;
            if i >= 200 {
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        let p50 = lat[lat.len() / 2];
        let ts = s.load("timestamps").map_err(err)?;
        let mut stamps = s.alloc::<u64>(2).map_err(err)?;
        stamps.fill(0).map_err(err)?;
        let long = Launch::new(&ts).spin_us(0).timeout_ms(5_000).arg(&stamps).arg(100_000_000u64);
        let (cpu0, t) = (thread_cpu_s()?, Instant::now());
        gpu.launch(&long).map_err(|e| format!("100 ms kernel: {e}"))?;
        let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_s()? - cpu0);
        let st = stamps.to_vec().map_err(err)?;
        let kernel_ms = st[1].saturating_sub(st[0]) as f64 / 1e6;
        if kernel_ms < 99.0 {
            return Err(format!(
                "the kernel ran {kernel_ms:.1} ms, not 100 (on sim a kernel takes virtual time: this half is the GPU's)"
            ));
        }
        let share = cpu / wall;
        if share > 0.10 {
            return Err(format!(
                "waiting {:.1} ms on a {kernel_ms:.1} ms kernel cost {:.2} ms of CPU ({:.1}% > 10%); empty launch p50 {p50:.1} us",
                wall * 1e3,
                cpu * 1e3,
                share * 100.0
            ));
        }
        Ok(format!(
            "empty launch + completion p50 {p50:.1} us; {kernel_ms:.1} ms kernel waited {:.1} ms for {:.2} ms of CPU ({:.1}%)",
            wall * 1e3,
            cpu * 1e3,
            share * 100.0
        ))
    })
}

// ----- matmul kernels (issue 12) ---------------------------------------------------------------------------
//
// Each kernel of the `matmul` module launched through Omega as the matmul library launches it, at shapes
// large enough to matter, on random inputs with the output poisoned first. A big output is checked at a
// random sample of at least 4096 positions (tile corners and edges always among them) against an f64
// product, within K * 2^-22 * sum|x*w| (tests/matmul_kernels.rs argues the bound), and scanned whole for
// an output left unwritten. On the simulator these run the host references; its virtual clock counts
// about a millisecond per 4 million multiply-adds, so the cases give their launches a long timeout.

use omega::kernels::matmul as mm;

/// A long launch timeout: the largest GEMM takes about four virtual seconds on the simulator.
const MATMUL_TIMEOUT_MS: u32 = 120_000;
/// Positions a big output is checked at, at least.
const MATMUL_SAMPLE: usize = 4096;

/// `n` random bf16 in [-1, 1]: the bit patterns and their f32 values.
fn random_bf16(g: &mut impl Rng, n: usize) -> (Vec<u16>, Vec<f32>) {
    let bits = mm::random_bf16(g.random(), n);
    let values = mm::bf16s_to_f32(&bits);
    (bits, values)
}

/// The SM count of the open device (the persistent GEMM's grid, the GEMV planner's input).
fn device_sms() -> Result<u32, String> {
    let dev = omega::lock().open().map_err(|e| e.error.to_string())?;
    Ok(dev.device().sm_count.max(1))
}

/// The positions of an `[m, n]` output to check: all of them when there are at most `MATMUL_SAMPLE`,
/// else the corners, the tile edges (rows and columns around multiples of 64, 128 and 256) and random
/// ones up to the sample's size.
fn sample_positions(g: &mut impl Rng, m: usize, n: usize) -> Vec<(usize, usize)> {
    if m * n <= MATMUL_SAMPLE {
        return (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).collect();
    }
    let edges = |len: usize| -> Vec<usize> {
        let mut v: Vec<usize> = [0, len - 1].into();
        for t in [64, 128, 256] {
            v.extend([t - 1, t].into_iter().filter(|&e| e < len));
            v.extend([len / t * t, (len / t * t).saturating_sub(1)].into_iter().filter(|&e| e < len));
        }
        v.sort_unstable();
        v.dedup();
        v
    };
    let (rows, cols) = (edges(m), edges(n));
    let mut at: Vec<(usize, usize)> = rows.iter().flat_map(|&i| cols.iter().map(move |&j| (i, j))).collect();
    while at.len() < MATMUL_SAMPLE {
        at.push((g.random_range(0..m), g.random_range(0..n)));
    }
    at
}

/// Checks `y` (`[m, n]`) at `at` against rows of `x` (`row_of(i)` gives the x row of output row i) times
/// rows of `w`, and that no output is still the poison; the first failure names the shape, the position,
/// what came back and what was wanted.
fn check_matmul(
    what: &str,
    y: &[f32],
    x: &[f32],
    w: &[f32],
    [m, n, k]: [usize; 3],
    at: &[(usize, usize)],
) -> Result<(), String> {
    if let Some(i) = y.iter().position(|v| v.is_nan()) {
        return Err(format!("{what} {m}x{n}x{k}: y[{}, {}] is NaN: never written", i / n, i % n));
    }
    for &(i, j) in at {
        let (want, mag) = mm::dot_f64(&x[i * k..][..k], &w[j * k..][..k]);
        let got = y[i * n + j];
        let bound = k as f64 * 2f64.powi(-22) * mag;
        if (f64::from(got) - want).abs() > bound {
            return Err(format!("{what} {m}x{n}x{k}: y[{i}, {j}] = {got:e}, want {want:e} within {bound:e}"));
        }
    }
    Ok(())
}

/// `time` in the units a result line uses, with the throughput of `macs` multiply-adds.
fn matmul_rate(platform: &str, ns: u64, macs: f64) -> String {
    if common::is_sim(platform) {
        format!("{:.2} ms of simulated time", ns as f64 / 1e6)
    } else {
        format!("{:.3} ms launch to completion, {:.1} TFLOP/s", ns as f64 / 1e6, 2.0 * macs / ns.max(1) as f64 / 1e3)
    }
}

/// The TMA GEMM (`omega_gemm_bf16_tn`) at `[m, n, k]`: descriptors encoded on the host into a device
/// buffer, one CTA per SM (persistent), checked at a sample.
fn matmul_tma_gemm(m: u32, n: u32, k: u32) -> CaseResult {
    let mut g = rng();
    let sms = device_sms()?;
    let (xb, x) = random_bf16(&mut g, (m * k) as usize);
    let (wb, w) = random_bf16(&mut g, (n * k) as usize);
    let at = sample_positions(&mut g, m as usize, n as usize);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(mm::GEMM_BF16_TN).map_err(err)?;
        let dx = s.alloc_device_from(&xb).map_err(err)?;
        let dw = s.alloc_device_from(&wb).map_err(err)?;
        let mut maps = omega::tma::encode_tiled(&mm::gemm_tmap_a(dx.va(), m, k)).map_err(err)?.0.to_vec();
        maps.extend_from_slice(&omega::tma::encode_tiled(&mm::gemm_tmap_b(dw.va(), n, k)).map_err(err)?.0);
        let dmaps = s.alloc_device_from(&maps).map_err(err)?;
        let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
        let tiles = m.div_ceil(mm::GEMM_TILE_M) * n.div_ceil(mm::GEMM_TILE_N);
        let grid = tiles.min(sms);
        let l = Launch::new(&kernel)
            .grid([grid, 1, 1])
            .block([mm::GEMM_THREADS, 1, 1])
            .dynamic_shared(mm::GEMM_SMEM_BYTES)
            .timeout_ms(MATMUL_TIMEOUT_MS)
            .arg(dmaps.va())
            .arg(dmaps.va() + 128)
            .arg(&y)
            .arg(m)
            .arg(n)
            .arg(k);
        let done = gpu.launch(&l).map_err(|e| format!("{m}x{n}x{k}: {e}"))?;
        let dims = [m, n, k].map(|v| v as usize);
        check_matmul(mm::GEMM_BF16_TN, &y.to_vec().map_err(err)?, &x, &w, dims, &at)?;
        let macs = f64::from(m) * f64::from(n) * f64::from(k);
        Ok(format!(
            "{m}x{n}x{k}, {tiles} tiles on {grid} CTAs, {} positions checked; {}",
            at.len(),
            matmul_rate(s.platform(), done.elapsed_ns, macs)
        ))
    })
}

/// The split-K TMA GEMM `name` (`omega_gemm_bf16_tn_splitk`, or the narrow `omega_gemm_bf16_tn_n128` of
/// 128-column tiles) at `[m, n, k]`, split as the planner splits it for the device's SMs; checked at a
/// sample, the tickets zero after.
fn matmul_tma_gemm_split(name: &'static str, m: u32, n: u32, k: u32) -> CaseResult {
    let (tile_n, smem) = if name == mm::GEMM_BF16_TN_N128 {
        (mm::GEMM_N128_TILE_N, mm::GEMM_N128_SMEM_BYTES)
    } else {
        (mm::GEMM_TILE_N, mm::GEMM_SMEM_BYTES)
    };
    let mut g = rng();
    let sms = device_sms()?;
    let split = mm::GemmSplit::planned(m, n, k, tile_n, sms);
    let (xb, x) = random_bf16(&mut g, (m * k) as usize);
    let (wb, w) = random_bf16(&mut g, (n * k) as usize);
    let at = sample_positions(&mut g, m as usize, n as usize);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(name).map_err(err)?;
        let dx = s.alloc_device_from(&xb).map_err(err)?;
        let dw = s.alloc_device_from(&wb).map_err(err)?;
        let mut maps = omega::tma::encode_tiled(&mm::gemm_tmap_a(dx.va(), m, k)).map_err(err)?.0.to_vec();
        maps.extend_from_slice(&omega::tma::encode_tiled(&mm::gemm_tmap_b_rows(dw.va(), n, k, tile_n)).map_err(err)?.0);
        let dmaps = s.alloc_device_from(&maps).map_err(err)?;
        let work = s.alloc_device::<f32>(split.work_floats(m, n).max(1) as usize).map_err(err)?;
        let mut tickets = s.alloc_device_from(&vec![0u32; split.tiles as usize]).map_err(err)?;
        let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
        let grid = split.units.min(sms);
        let l = Launch::new(&kernel)
            .grid([grid, 1, 1])
            .block([mm::GEMM_THREADS, 1, 1])
            .dynamic_shared(smem)
            .timeout_ms(MATMUL_TIMEOUT_MS)
            .arg(dmaps.va())
            .arg(dmaps.va() + 128)
            .arg(&y)
            .arg(&work)
            .arg(&tickets)
            .arg(m)
            .arg(n)
            .arg(k)
            .arg(split.splits);
        let done = gpu.launch(&l).map_err(|e| format!("{name} {m}x{n}x{k}: {e}"))?;
        check_matmul(name, &y.to_vec().map_err(err)?, &x, &w, [m, n, k].map(|v| v as usize), &at)?;
        if let Some(t) = tickets.to_vec().map_err(err)?.iter().position(|&t| t != 0) {
            return Err(format!("{name} {m}x{n}x{k}: ticket {t} left non-zero"));
        }
        let macs = f64::from(m) * f64::from(n) * f64::from(k);
        Ok(format!(
            "{m}x{n}x{k}, {} tiles x {} splits of {} K blocks on {grid} CTAs, {} positions checked; {}",
            split.tiles,
            split.splits,
            split.per,
            at.len(),
            matmul_rate(s.platform(), done.elapsed_ns, macs)
        ))
    })
}

/// The split-K GEMV (`omega_gemv_bf16_tn_m*`) at each M of `ms` on `[n, k]`, planned for the device's
/// SMs; every output checked up to the sample size; the tickets must be zero again after each launch.
fn matmul_gemv(ms: &[u32], n: u32, k: u32) -> CaseResult {
    let mut g = rng();
    let sms = device_sms()?;
    let plan = mm::gemv_plan(n, k, sms);
    let (wb, w) = random_bf16(&mut g, (n * k) as usize);
    let m_max = ms.iter().copied().max().unwrap_or(1);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let dw = s.alloc_device_from(&wb).map_err(err)?;
        let work = s.alloc_device::<f32>(plan.work_floats(m_max, n).max(1) as usize).map_err(err)?;
        let mut tickets = s.alloc_device_from(&vec![0u32; plan.blocks as usize]).map_err(err)?;
        let mut gpu = gpu;
        let mut lines = Vec::new();
        for &m in ms {
            let name = mm::GEMV_BF16_TN[mm::gemv_variant(m)];
            let kernel = module.kernel(name).map_err(err)?;
            let (xb, x) = random_bf16(&mut g, (m * k) as usize);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
            // One row streamed unsplit: the planner's rows entry runs too and must give the m1 entry's bits.
            let rows = (m == 1 && plan.split == 1).then_some(mm::GEMV_BF16_TN_ROWS);
            let rows_kernel = rows.map(|r| module.kernel(r)).transpose().map_err(err)?;
            let mut y_rows = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
            let gemv = |kernel, y| {
                Launch::new(kernel)
                    .grid([plan.blocks, plan.split, 1])
                    .block([mm::GEMV_THREADS, 1, 1])
                    .timeout_ms(MATMUL_TIMEOUT_MS)
                    .arg(&dx)
                    .arg(&dw)
                    .arg(y)
                    .arg(&work)
                    .arg(&tickets)
                    .arg(m)
                    .arg(n)
                    .arg(k)
                    .arg(plan.k_per_split)
            };
            let done = gpu.launch(&gemv(&kernel, &y)).map_err(|e| format!("{name} M={m}: {e}"))?;
            let elapsed_ns = done.elapsed_ns;
            gpu = done.gpu;
            let mut rows_ns = 0;
            if let Some(rows_kernel) = &rows_kernel {
                let d = gpu
                    .launch(&gemv(rows_kernel, &y_rows))
                    .map_err(|e| format!("{} M={m}: {e}", mm::GEMV_BF16_TN_ROWS))?;
                rows_ns = d.elapsed_ns;
                gpu = d.gpu;
            }
            let at = sample_positions(&mut g, m as usize, n as usize);
            let got = y.to_vec().map_err(err)?;
            check_matmul(name, &got, &x, &w, [m, n, k].map(|v| v as usize), &at)?;
            if let Some(t) = tickets.to_vec().map_err(err)?.iter().position(|&t| t != 0) {
                return Err(format!("{name} M={m}: ticket {t} left non-zero"));
            }
            let clock = if common::is_sim(s.platform()) { " simulated" } else { "" };
            let mut rows_note = String::new();
            if let Some(rows) = rows {
                let got_rows = y_rows.to_vec().map_err(err)?;
                if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != got_rows[i].to_bits()) {
                    return Err(format!("{rows}: y[{i}] = {:e}, the m1 entry's {:e}", got_rows[i], got[i]));
                }
                rows_note = format!(" ({rows}: the same bits, {:.1} us{clock})", rows_ns as f64 / 1e3);
            }
            let bytes = f64::from(n) * f64::from(k) * 2.0;
            let rate = if common::is_sim(s.platform()) {
                format!("{:.2} ms simulated", elapsed_ns as f64 / 1e6)
            } else {
                format!("{:.1} us, {:.0} GB/s of W", elapsed_ns as f64 / 1e3, bytes / elapsed_ns.max(1) as f64)
            };
            lines.push(format!("M={m} {rate}{rows_note}"));
        }
        Ok(format!(
            "N={n} K={k}, {} x {} CTAs of {} K: {}",
            plan.blocks,
            plan.split,
            plan.k_per_split,
            lines.join(", ")
        ))
    })
}

/// The M the skinny GEMM's suite case runs (issue 12's small M).
const SKINNY_MS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The skinny GEMM (`omega_skinny_bf16_tn_m*`) launched directly by the planner's launch
/// (`skinny_plan`) at each M: the f32 output checked at a sample against f64, the bf16 output against
/// its rounding at every position, the tickets back at zero; the f32 launch's time and W's GB/s.
fn matmul_skinny(ms: &[u32], n: u32, k: u32) -> CaseResult {
    let mut g = rng();
    let sms = device_sms()?;
    let (wb, w) = random_bf16(&mut g, (n * k) as usize);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let dw = s.alloc_device_from(&wb).map_err(err)?;
        let mut gpu = gpu;
        let mut lines = Vec::new();
        for &m in ms {
            let plan = mm::skinny_plan(m, n, k, sms, 1024);
            let name = mm::SKINNY_BF16_TN[plan.variant];
            let kernel = module.kernel(name).map_err(err)?;
            let (xb, x) = random_bf16(&mut g, (m * k) as usize);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let floats = mm::skinny_work_floats(plan.variant, plan.tiles, plan.splits).max(4);
            let work = s.alloc_device::<f32>(floats as usize).map_err(err)?;
            let mut tickets = s.alloc_device_from(&vec![0u32; plan.tiles as usize]).map_err(err)?;
            let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
            let mut y16 = s.alloc::<u16>((m * n) as usize).map_err(err)?;
            y16.fill(0x7fc1).map_err(err)?;
            let mut f32_ns = 0;
            for (y_va, bf16) in [(y.va(), 0u32), (y16.va(), 1)] {
                let l = Launch::new(&kernel)
                    .grid([plan.grid, 1, 1])
                    .block([mm::SKINNY_THREADS, 1, 1])
                    .dynamic_shared(mm::skinny_smem_bytes(plan.variant))
                    .timeout_ms(MATMUL_TIMEOUT_MS)
                    .arg(&dx)
                    .arg(&dw)
                    .arg(y_va)
                    .arg(&work)
                    .arg(&tickets)
                    .arg(m)
                    .arg(n)
                    .arg(k)
                    .arg(plan.k_per_split)
                    .arg(plan.splits)
                    .arg(bf16);
                let done = gpu.launch(&l).map_err(|e| format!("{name} M={m} bf16={bf16}: {e}"))?;
                gpu = done.gpu;
                if bf16 == 0 {
                    f32_ns = done.elapsed_ns;
                }
            }
            let got = y.to_vec().map_err(err)?;
            let at = sample_positions(&mut g, m as usize, n as usize);
            check_matmul(name, &got, &x, &w, [m, n, k].map(|v| v as usize), &at)?;
            let got16 = y16.to_vec().map_err(err)?;
            if let Some(i) = (0..got.len()).find(|&i| got16[i] != mm::f32_to_bf16(got[i])) {
                return Err(format!("{name} M={m}: bf16 y[{i}] = {:#06x}, not the f32 rounded", got16[i]));
            }
            if let Some(t) = tickets.to_vec().map_err(err)?.iter().position(|&t| t != 0) {
                return Err(format!("{name} M={m}: ticket {t} left non-zero"));
            }
            let rate = if common::is_sim(s.platform()) {
                format!("{:.2} ms simulated", f32_ns as f64 / 1e6)
            } else {
                let bytes = f64::from(n) * f64::from(k) * 2.0;
                format!("{:.1} us, {:.0} GB/s of W", f32_ns as f64 / 1e3, bytes / f32_ns.max(1) as f64)
            };
            lines.push(format!("M={m} split {} grid {}: {rate}", plan.splits, plan.grid));
        }
        Ok(format!("N={n} K={k}: {}", lines.join(", ")))
    })
}

/// The device buffers `omega_moe_route` wrote (checked), which the grouped GEMV reads.
struct Routed<'s> {
    offsets: omega::Mem<'s, omega::Device<u32>>,
    rows: omega::Mem<'s, omega::Device<u32>>,
    active: omega::Mem<'s, omega::Device<u32>>,
    elapsed_ns: u64,
}

/// `omega_moe_route` over `topk` (`t` tokens of `top_k` choices among `e` experts) into poisoned
/// buffers, every output word checked exactly against `route_ref`.
fn route_checked<'s>(
    s: &'s omega::Scope<'s>,
    gpu: omega::Gpu<'s>,
    module: &omega::Module<'s>,
    topk: &[u32],
    [t, top_k, e]: [u32; 3],
) -> Result<(omega::Gpu<'s>, Routed<'s>), String> {
    let want = mm::route_ref(topk, top_k, e);
    let route = module.kernel(mm::MOE_ROUTE).map_err(err)?;
    let dtopk = s.alloc_device_from(topk).map_err(err)?;
    let doff = s.alloc_device_from(&vec![u32::MAX; e as usize + 1]).map_err(err)?;
    let slots = want.rows.len().max(1);
    let drows = s.alloc_device_from(&vec![u32::MAX; slots]).map_err(err)?;
    let mut dpairs = s.alloc_device_from(&vec![u32::MAX; slots]).map_err(err)?;
    let mut dropped = s.alloc_device_from(&[u32::MAX]).map_err(err)?;
    let room = topk.len().min(e as usize);
    let dactive = s.alloc_device_from(&vec![u32::MAX; 1 + room]).map_err(err)?;
    let l = Launch::new(&route)
        .block([mm::ROUTE_THREADS, 1, 1])
        .timeout_ms(MATMUL_TIMEOUT_MS)
        .arg(&dtopk)
        .arg(t)
        .arg(top_k)
        .arg(e)
        .arg(&doff)
        .arg(&drows)
        .arg(&dpairs)
        .arg(&dropped)
        .arg(&dactive);
    let done = gpu.launch(&l).map_err(|e| format!("{}: {e}", mm::MOE_ROUTE))?;
    let mut routed = Routed { offsets: doff, rows: drows, active: dactive, elapsed_ns: done.elapsed_ns };
    for (what, got, want) in [
        ("offsets", routed.offsets.to_vec().map_err(err)?, &want.offsets),
        ("rows", routed.rows.to_vec().map_err(err)?, &want.rows),
        ("pairs", dpairs.to_vec().map_err(err)?, &want.pairs),
        ("dropped", dropped.to_vec().map_err(err)?, &vec![want.dropped]),
        ("active", routed.active.to_vec().map_err(err)?, &want.active),
    ] {
        if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
            return Err(format!(
                "{} T={t} top-{top_k} E={e}: {what}[{i}] = {}, want {}",
                mm::MOE_ROUTE,
                got[i],
                want[i]
            ));
        }
    }
    Ok((done.gpu, routed))
}

/// `omega_moe_route` alone over routings the decode step does not make: repeated experts in a token,
/// choices past E (dropped), more than 1024 choices (several rounds of the block), more than 1024
/// experts (several passes) and one expert chosen by every token; each checked exactly.
fn matmul_moe_route() -> CaseResult {
    let mut g = rng();
    let mut lines = Vec::new();
    // (tokens, top_k, experts, choices drawn from 0..range: past E are dropped, small means repeats).
    let cases: [(u32, u32, u32, u32); 7] = [
        (1, 8, 128, 128),
        (32, 8, 128, 128),
        (300, 8, 128, 128),
        (5, 8, 128, 140),
        (64, 4, 3000, 3100),
        (40, 8, 128, 1),
        (7, 3, 16, 4),
    ];
    with_scope(|s, mut gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        for (t, top_k, e, range) in cases {
            let topk: Vec<u32> = (0..t * top_k).map(|_| g.random_range(0..range)).collect();
            let (next, routed) = route_checked(s, gpu, &module, &topk, [t, top_k, e])?;
            gpu = next;
            let want = mm::route_ref(&topk, top_k, e);
            let clock = if common::is_sim(s.platform()) { " simulated" } else { "" };
            lines.push(format!(
                "T={t} top-{top_k} E={e}: {} slots, {} dropped, {} experts, {:.1} us{clock}",
                want.rows.len(),
                want.dropped,
                want.active[0],
                routed.elapsed_ns as f64 / 1e3
            ));
        }
        Ok(lines.join("; "))
    })
}

/// The fused router (`omega_moe_router_route`) on fresh random x and router weights, outputs poisoned:
/// the logits bit for bit the host's replica of the kernel's sums (`router_logits_ref`), each token's
/// experts exactly the top k of those logits and their weights within 2^-20 of the f64 softmax
/// (`router_f64`), the routing exactly `route_ref`'s, the ticket back at zero.
fn matmul_moe_router() -> CaseResult {
    use omega::kernels::decoder as dk;
    let mut g = rng();
    let mut lines = Vec::new();
    with_scope(|s, mut gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(mm::MOE_ROUTER_ROUTE).map_err(err)?;
        // Batch 1, 2 and 32 of Qwen3's router, a K whose last loads a lane skips, and token counts that
        // leave warps of an expert idle or take two tokens in turn.
        for (t, e, k, top_k) in [
            (1u32, 128u32, 2048u32, 8u32),
            (2, 128, 2048, 8),
            (4, 64, 1000, 4),
            (8, 128, 2048, 8),
            (32, 128, 2048, 8),
            (5, 200, 1000, 3),
            (3, 16, 2048, 8),
        ] {
            let what = format!("{} T={t} E={e} K={k} top-{top_k}", mm::MOE_ROUTER_ROUTE);
            let (xb, x) = random_bf16(&mut g, (t * k) as usize);
            let (wb, w) = random_bf16(&mut g, (e * k) as usize);
            let (p, room) = ((t * top_k) as usize, ((t * top_k).min(e)) as usize);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let dw = s.alloc_device_from(&wb).map_err(err)?;
            let mut logits = s.alloc_device_from(&vec![f32::NAN; (t * e) as usize]).map_err(err)?;
            let mut ticket = s.alloc_device_from(&[0u32]).map_err(err)?;
            let mut topk = s.alloc_device_from(&vec![u32::MAX; p]).map_err(err)?;
            let mut weights = s.alloc_device_from(&vec![f32::NAN; p]).map_err(err)?;
            let mut offsets = s.alloc_device_from(&vec![u32::MAX; e as usize + 1]).map_err(err)?;
            let mut rows = s.alloc_device_from(&vec![u32::MAX; p]).map_err(err)?;
            let mut pairs = s.alloc_device_from(&vec![u32::MAX; p]).map_err(err)?;
            let mut dropped = s.alloc_device_from(&[u32::MAX]).map_err(err)?;
            let mut active = s.alloc_device_from(&vec![u32::MAX; 1 + room]).map_err(err)?;
            let l = Launch::new(&kernel)
                .grid([e.div_ceil(mm::ROUTER_ROWS), 1, 1])
                .block([mm::ROUTE_THREADS, 1, 1])
                .timeout_ms(MATMUL_TIMEOUT_MS)
                .arg(&dx)
                .arg(&dw)
                .arg(&logits)
                .arg(&ticket)
                .arg(t)
                .arg(k)
                .arg(e)
                .arg(top_k)
                .arg(&topk)
                .arg(&weights)
                .arg(&offsets)
                .arg(&rows)
                .arg(&pairs)
                .arg(&dropped)
                .arg(&active);
            let done = gpu.launch(&l).map_err(|e| format!("{what}: {e}"))?;
            gpu = done.gpu;
            let want_logits = mm::router_logits_ref(&x, &w, [t, k, e]);
            let got_logits = logits.to_vec().map_err(err)?;
            if let Some(i) = (0..want_logits.len()).find(|&i| got_logits[i].to_bits() != want_logits[i].to_bits()) {
                return Err(format!("{what}: logit {i} = {:e}, the replica {:e}", got_logits[i], want_logits[i]));
            }
            let (got_topk, got_w) = (topk.to_vec().map_err(err)?, weights.to_vec().map_err(err)?);
            let mut choices = Vec::with_capacity(p);
            for tk in 0..t as usize {
                let row = &want_logits[tk * e as usize..][..e as usize];
                let (want_i, want_w) = dk::router_f64(row, top_k as usize);
                let (gi, gw) = (
                    &got_topk[tk * top_k as usize..][..top_k as usize],
                    &got_w[tk * top_k as usize..][..top_k as usize],
                );
                if gi != &want_i[..] {
                    return Err(format!("{what}: token {tk}'s experts {gi:?}, want {want_i:?}"));
                }
                if let Some(j) =
                    (0..gw.len()).find(|&j| gw[j].is_nan() || (f64::from(gw[j]) - want_w[j]).abs() > 2f64.powi(-20))
                {
                    return Err(format!("{what}: token {tk}'s weight {j} = {:e}, want {:e}", gw[j], want_w[j]));
                }
                choices.extend_from_slice(gi);
            }
            let want = mm::route_ref(&choices, top_k, e);
            for (name, got, want) in [
                ("offsets", offsets.to_vec().map_err(err)?, &want.offsets),
                ("rows", rows.to_vec().map_err(err)?, &want.rows),
                ("pairs", pairs.to_vec().map_err(err)?, &want.pairs),
                ("dropped", dropped.to_vec().map_err(err)?, &vec![want.dropped]),
                ("active", active.to_vec().map_err(err)?, &want.active),
                ("ticket", ticket.to_vec().map_err(err)?, &vec![0]),
            ] {
                if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                    return Err(format!("{what}: {name}[{i}] = {}, want {}", got[i], want[i]));
                }
            }
            let clock = if common::is_sim(s.platform()) { " simulated" } else { "" };
            lines.push(format!(
                "T={t} E={e} K={k} top-{top_k}: logits bit for bit, {} experts, {:.1} us{clock}",
                want.active[0],
                done.elapsed_ns as f64 / 1e3
            ));
        }
        Ok(lines.join("; "))
    })
}

/// A mixture-of-experts decode step on the device: random top-k routing (`omega_moe_route`, checked
/// exactly against the host's CSR), then the grouped GEMV (`omega_moe_gemv_bf16_m*`) over every slot,
/// checked at a sample.
fn matmul_moe(t: u32, top_k: u32, e: u32, n: u32, k: u32) -> CaseResult {
    let mut g = rng();
    let sms = device_sms()?;
    let mut topk = Vec::with_capacity((t * top_k) as usize);
    for _ in 0..t {
        let mut mine: Vec<u32> = Vec::new();
        while mine.len() < top_k as usize {
            let c = g.random_range(0..e);
            if !mine.contains(&c) {
                mine.push(c);
            }
        }
        topk.extend(mine);
    }
    let (xb, x) = random_bf16(&mut g, (t * k) as usize);
    let (wb, w) = random_bf16(&mut g, (e * n * k) as usize);
    let mm::RouteRef { offsets, rows, .. } = mm::route_ref(&topk, top_k, e);
    let slots = rows.len();
    let room = slots.min(e as usize);
    let plan = mm::gemv_plan(n, k, sms);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let (gpu, routed) = route_checked(s, gpu, &module, &topk, [t, top_k, e])?;
        let (doff, drows, dactive) = (&routed.offsets, &routed.rows, &routed.active);
        let name = mm::MOE_GEMV_BF16[mm::gemv_variant(t)];
        let kernel = module.kernel(name).map_err(err)?;
        let dx = s.alloc_device_from(&xb).map_err(err)?;
        let dw = s.alloc_device_from(&wb).map_err(err)?;
        let max_slots = t * top_k;
        let work = s.alloc_device::<f32>(plan.work_floats(max_slots, n).max(1) as usize).map_err(err)?;
        let mut tickets = s.alloc_device_from(&vec![0u32; room * plan.blocks as usize]).map_err(err)?;
        let mut y = common::poisoned_f32(s, slots * n as usize).map_err(err)?;
        // One launch over the listed experts: z spans the list's room (the z past the count exit).
        let l = Launch::new(&kernel)
            .grid([plan.blocks, plan.split, room as u32])
            .block([mm::GEMV_THREADS, 1, 1])
            .timeout_ms(MATMUL_TIMEOUT_MS)
            .arg(&dx)
            .arg(&dw)
            .arg(&y)
            .arg(&work)
            .arg(&tickets)
            .arg(doff)
            .arg(drows)
            .arg(dactive)
            .arg(n)
            .arg(k)
            .arg(plan.k_per_split)
            .arg(max_slots);
        let done = gpu.launch(&l).map_err(|e| format!("{name}: {e}"))?;
        let got = y.to_vec().map_err(err)?;
        // The product each slot must hold, checked at a sample of (slot, column) positions.
        let (nn, kk) = (n as usize, k as usize);
        let expert_of: Vec<usize> = (0..slots).map(|i| offsets.partition_point(|&o| o as usize <= i) - 1).collect();
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            return Err(format!("{name}: y[{}, {}] is NaN: never written", i / nn, i % nn));
        }
        let at = sample_positions(&mut g, slots, nn);
        for &(i, j) in &at {
            let xr = &x[rows[i] as usize * kk..][..kk];
            let wr = &w[(expert_of[i] * nn + j) * kk..][..kk];
            let (want, mag) = mm::dot_f64(xr, wr);
            let bound = kk as f64 * 2f64.powi(-22) * mag;
            if (f64::from(got[i * nn + j]) - want).abs() > bound {
                return Err(format!(
                    "{name} T={t} top-{top_k} E={e} N={n} K={k}: slot {i} (token {}, expert {}) column {j} = {:e}, \
                     want {want:e} within {bound:e}",
                    rows[i],
                    expert_of[i],
                    got[i * nn + j]
                ));
            }
        }
        if let Some(i) = tickets.to_vec().map_err(err)?.iter().position(|&t| t != 0) {
            return Err(format!("{name}: ticket {i} left non-zero"));
        }
        // The rows entry (the planner's for rows streamed unsplit) must give the m1 entry's bits unsplit.
        let mut rows_note = String::new();
        if name == mm::MOE_GEMV_BF16[0] {
            let mut gpu = done.gpu;
            let mut outs = Vec::new();
            for unsplit in [mm::MOE_GEMV_BF16[0], mm::MOE_GEMV_BF16_ROWS] {
                let kernel = module.kernel(unsplit).map_err(err)?;
                let mut y = common::poisoned_f32(s, slots * n as usize).map_err(err)?;
                let l = Launch::new(&kernel)
                    .grid([plan.blocks, 1, room as u32])
                    .block([mm::GEMV_THREADS, 1, 1])
                    .timeout_ms(MATMUL_TIMEOUT_MS)
                    .arg(&dx)
                    .arg(&dw)
                    .arg(&y)
                    .arg(&y)
                    .arg(&tickets)
                    .arg(doff)
                    .arg(drows)
                    .arg(dactive)
                    .arg(n)
                    .arg(k)
                    .arg(k)
                    .arg(max_slots);
                let d = gpu.launch(&l).map_err(|e| format!("{unsplit} unsplit: {e}"))?;
                gpu = d.gpu;
                outs.push((y.to_vec().map_err(err)?, d.elapsed_ns));
            }
            let ((m1, _), (rows_y, ns)) = (&outs[0], &outs[1]);
            if let Some(i) = (0..m1.len()).find(|&i| m1[i].to_bits() != rows_y[i].to_bits()) {
                return Err(format!(
                    "{}: y[{}, {}] = {:e}, the m1 entry's {:e} (unsplit, the same sums)",
                    mm::MOE_GEMV_BF16_ROWS,
                    i / nn,
                    i % nn,
                    rows_y[i],
                    m1[i]
                ));
            }
            let clock = if common::is_sim(s.platform()) { " simulated" } else { "" };
            let rows = mm::MOE_GEMV_BF16_ROWS;
            rows_note = format!("; {rows} unsplit: the m1 entry's bits, {:.1} us{clock}", *ns as f64 / 1e3);
        }
        let touched = (0..e as usize).filter(|&x| offsets[x] != offsets[x + 1]).count();
        let bytes = touched as f64 * f64::from(n) * f64::from(k) * 2.0;
        let rate = if common::is_sim(s.platform()) {
            format!("{:.2} ms simulated", done.elapsed_ns as f64 / 1e6)
        } else {
            format!(
                "{:.1} us, {:.0} GB/s of touched experts' W",
                done.elapsed_ns as f64 / 1e3,
                bytes / done.elapsed_ns as f64
            )
        };
        let clock = if common::is_sim(s.platform()) { " simulated" } else { "" };
        Ok(format!(
            "T={t} top-{top_k} of E={e}, N={n} K={k}: {touched} experts touched, {slots} slots, {} positions \
             checked; routing {:.1} us{clock}, grouped GEMV {rate}{rows_note}",
            at.len(),
            routed.elapsed_ns as f64 / 1e3
        ))
    })
}

/// The f32 SIMT GEMM (`omega_gemm_f32_tn`, no TF32) at `[m, n, k]`, every output checked; how many are
/// bit for bit the fmaf chain the simulator's reference computes is reported.
fn matmul_simt_f32(m: u32, n: u32, k: u32) -> CaseResult {
    let mut g = rng();
    let x = mm::random_f32(g.random(), (m * k) as usize);
    let w = mm::random_f32(g.random(), (n * k) as usize);
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(mm::GEMM_F32_TN).map_err(err)?;
        let dx = s.alloc_device_from(&x).map_err(err)?;
        let dw = s.alloc_device_from(&w).map_err(err)?;
        let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
        let l = Launch::new(&kernel)
            .grid([n.div_ceil(mm::SIMT_TILE), m.div_ceil(mm::SIMT_TILE), 1])
            .block([mm::SIMT_THREADS, 1, 1])
            .timeout_ms(MATMUL_TIMEOUT_MS)
            .arg(&dx)
            .arg(&dw)
            .arg(&y)
            .arg(m)
            .arg(n)
            .arg(k);
        let done = gpu.launch(&l).map_err(|e| format!("{m}x{n}x{k}: {e}"))?;
        let got = y.to_vec().map_err(err)?;
        let (mm_, nn, kk) = (m as usize, n as usize, k as usize);
        let all: Vec<(usize, usize)> = (0..mm_).flat_map(|i| (0..nn).map(move |j| (i, j))).collect();
        check_matmul(mm::GEMM_F32_TN, &got, &x, &w, [mm_, nn, kk], &all)?;
        let exact = all
            .iter()
            .filter(|&&(i, j)| {
                let chain = (0..kk).fold(0f32, |acc, q| x[i * kk + q].mul_add(w[j * kk + q], acc));
                chain.to_bits() == got[i * nn + j].to_bits()
            })
            .count();
        let macs = f64::from(m) * f64::from(n) * f64::from(k);
        Ok(format!(
            "{m}x{n}x{k}, every output checked, {exact} of {} bit for bit the fmaf chain; {}",
            all.len(),
            matmul_rate(s.platform(), done.elapsed_ns, macs)
        ))
    })
}

/// `omega_convert_f32_bf16` over `n` random f32 (the specials among them) on a grid of one CTA per SM:
/// every element bit for bit round-to-nearest-even.
fn matmul_convert(n: usize) -> CaseResult {
    let mut g = rng();
    let sms = device_sms()?;
    let mut input: Vec<f32> = (0..n).map(|_| f32::from_bits(g.random::<u32>())).collect();
    let specials = [0.0f32, -0.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, f32::MAX, f32::INFINITY, f32::NAN];
    for (v, sp) in input.iter_mut().zip(specials) {
        *v = sp;
    }
    with_scope(|s, gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(mm::CONVERT_F32_BF16).map_err(err)?;
        let din = s.alloc_device_from(&input).map_err(err)?;
        let mut out = s.alloc_device_from(&vec![0xdeadu16; n]).map_err(err)?;
        let l = Launch::new(&kernel)
            .grid([sms, 1, 1])
            .block([mm::CONVERT_THREADS, 1, 1])
            .timeout_ms(MATMUL_TIMEOUT_MS)
            .arg(&din)
            .arg(&out)
            .arg(n as u64);
        let done = gpu.launch(&l).map_err(|e| format!("{n} elements: {e}"))?;
        let got = out.to_vec().map_err(err)?;
        if let Some(i) = (0..n).find(|&i| got[i] != mm::f32_to_bf16(input[i])) {
            return Err(format!(
                "element {i}: {:#010x} converted to {:#06x}, want {:#06x}",
                input[i].to_bits(),
                got[i],
                mm::f32_to_bf16(input[i])
            ));
        }
        let clock = if common::is_sim(s.platform()) { " of simulated time" } else { "" };
        Ok(format!(
            "{n} elements on {sms} CTAs (grid-stride), bit for bit; {:.1} us{clock}",
            done.elapsed_ns as f64 / 1e3
        ))
    })
}

/// The TMA-store and cluster cases' shapes: square and ragged through y's descriptor (an odd count of
/// tile rows leaves the last pair's second tile past M), a full wave, N % 4 == 2 and 3 stored directly.
const STAGED_SHAPES: [[u32; 3]; 6] =
    [[1024, 1024, 1024], [1000, 1000, 1000], [4096, 2048, 2048], [257, 516, 136], [999, 1002, 520], [130, 7, 64]];
/// The ping-pong case's: the staged cases' (a CTA with one tile or two), the shape whose two tiles a CTA hung
/// the harness's first form (the mainloops not yet taking turns), and down at M = 4096 (four tiles a CTA).
const PINGPONG_SHAPES: [[u32; 3]; 8] = [
    STAGED_SHAPES[0],
    STAGED_SHAPES[1],
    STAGED_SHAPES[2],
    STAGED_SHAPES[3],
    STAGED_SHAPES[4],
    STAGED_SHAPES[5],
    [1000, 4095, 1000],
    [4096, 2048, 768],
];
/// The library case's shapes: ragged through y's descriptor, N % 4 == 2, a Qwen-sized product, and N % 8
/// == 0 past whole tiles of every width (a bf16 y's last boxes clipped).
const STAGED_LIB_SHAPES: [[u32; 3]; 4] = [[300, 1024, 520], [129, 258, 200], [512, 5120, 2048], [200, 392, 136]];

/// The completion limit of the TMA-store and cluster cases: the simulator's virtual clock needs the long
/// one; on the GPU the largest product here takes well under a millisecond, and an entry that hangs (a
/// multicast or a bulk store that never completes) is found within seconds.
fn staged_timeout_ms(platform: &str) -> u32 {
    if common::is_sim(platform) {
        MATMUL_TIMEOUT_MS
    } else {
        5_000
    }
}

/// A TMA-store entry of the staged cases: its kernel, tile columns, W rows per box, dynamic shared
/// memory, whether it runs in 2-CTA clusters, and whether it is the ping-pong entry (its own shapes, its
/// own forced plan).
#[derive(Clone, Copy)]
struct StagedEntry {
    name: &'static str,
    tile_n: u32,
    b_rows: u32,
    smem: u32,
    cluster: bool,
    pingpong: bool,
}

/// A fitted width's entry ([`mm::GEMM_FITTED`]), one CTA or 2-CTA clusters.
const fn fitted_entry(i: usize, cluster: bool) -> StagedEntry {
    let f = mm::GEMM_FITTED[i];
    StagedEntry {
        name: if cluster { f.mc } else { f.ts },
        tile_n: f.tile_n,
        b_rows: if cluster { f.mc_b_box_rows() } else { f.tile_n },
        smem: f.smem_bytes(),
        cluster,
        pingpong: false,
    }
}

/// The staged cases' entries, by case name: the wide, narrow and fitted tiles, one CTA or 2-CTA
/// clusters, then the narrow tile's ping-pong entry.
const STAGED_ENTRIES: [(&str, StagedEntry); 13] = [
    (
        "matmul_ts",
        StagedEntry {
            name: mm::GEMM_BF16_TN_TS,
            tile_n: mm::GEMM_TILE_N,
            b_rows: mm::GEMM_TILE_N,
            smem: mm::GEMM_TS_SMEM_BYTES,
            cluster: false,
            pingpong: false,
        },
    ),
    (
        "matmul_mc",
        StagedEntry {
            name: mm::GEMM_BF16_TN_MC,
            tile_n: mm::GEMM_TILE_N,
            b_rows: mm::GEMM_MC_B_BOX_ROWS,
            smem: mm::GEMM_MC_SMEM_BYTES,
            cluster: true,
            pingpong: false,
        },
    ),
    (
        "matmul_ts_n128",
        StagedEntry {
            name: mm::GEMM_BF16_TN_TS_N128,
            tile_n: mm::GEMM_N128_TILE_N,
            b_rows: mm::GEMM_N128_TILE_N,
            smem: mm::GEMM_TS_N128_SMEM_BYTES,
            cluster: false,
            pingpong: false,
        },
    ),
    (
        "matmul_mc_n128",
        StagedEntry {
            name: mm::GEMM_BF16_TN_MC_N128,
            tile_n: mm::GEMM_N128_TILE_N,
            b_rows: mm::GEMM_MC_N128_B_BOX_ROWS,
            smem: mm::GEMM_MC_N128_SMEM_BYTES,
            cluster: true,
            pingpong: false,
        },
    ),
    ("matmul_ts_n160", fitted_entry(0, false)),
    ("matmul_mc_n160", fitted_entry(0, true)),
    ("matmul_ts_n192", fitted_entry(1, false)),
    ("matmul_mc_n192", fitted_entry(1, true)),
    ("matmul_ts_n96", fitted_entry(2, false)),
    ("matmul_mc_n96", fitted_entry(2, true)),
    ("matmul_ts_n64", fitted_entry(3, false)),
    ("matmul_mc_n64", fitted_entry(3, true)),
    (
        "matmul_pp_n128",
        StagedEntry {
            name: mm::GEMM_BF16_TN_PP_N128,
            tile_n: mm::GEMM_N128_TILE_N,
            b_rows: mm::GEMM_N128_TILE_N,
            smem: mm::GEMM_TS_N128_SMEM_BYTES,
            cluster: false,
            pingpong: true,
        },
    ),
];

/// A TMA-store GEMM entry (`omega_gemm_bf16_tn_ts`, its 2-CTA cluster form `omega_gemm_bf16_tn_mc` with
/// W multicast, and both on the narrow tile), launched through Omega at each of [`STAGED_SHAPES`] (the
/// ping-pong entry's [`PINGPONG_SHAPES`]): x's, W's and y's descriptors encoded on the host (y's only for N % 4 == 0: other N store directly, `tmap_y`
/// 0), the grid the library gives them (one CTA per tile up to the SMs; whole pairs for the cluster), y
/// poisoned, checked at a sample against f64 and scanned for an unwritten output. The first TMA stores
/// and the first multicast under Omega's own launches: a child runs it, so a hang latches only the child.
fn matmul_tma_store(e: StagedEntry) -> CaseResult {
    let StagedEntry { name, tile_n, b_rows, smem, cluster, pingpong } = e;
    let shapes: &[[u32; 3]] = if pingpong { &PINGPONG_SHAPES } else { &STAGED_SHAPES };
    let mut g = rng();
    let sms = device_sms()?;
    with_scope(|s, mut gpu| {
        let module = s.load_module(omega::kernels::cuda_module(mm::MATMUL).map_err(err)?).map_err(err)?;
        let kernel = module.kernel(name).map_err(err)?;
        let mut seen = Vec::new();
        for &[m, n, k] in shapes {
            let (xb, x) = random_bf16(&mut g, (m * k) as usize);
            let (wb, w) = random_bf16(&mut g, (n * k) as usize);
            let at = sample_positions(&mut g, m as usize, n as usize);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let dw = s.alloc_device_from(&wb).map_err(err)?;
            let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
            let by_tma = n % 4 == 0;
            let mut maps = omega::tma::encode_tiled(&mm::gemm_tmap_a(dx.va(), m, k)).map_err(err)?.0.to_vec();
            maps.extend_from_slice(
                &omega::tma::encode_tiled(&mm::gemm_tmap_b_rows(dw.va(), n, k, b_rows)).map_err(err)?.0,
            );
            if by_tma {
                maps.extend_from_slice(&omega::tma::encode_tiled(&mm::gemm_tmap_y(y.va(), m, n)).map_err(err)?.0);
            }
            let dmaps = s.alloc_device_from(&maps).map_err(err)?;
            let tmap_y = if by_tma { dmaps.va() + 256 } else { 0 };
            let (tiles_m, tiles_n) = (m.div_ceil(mm::GEMM_TILE_M), n.div_ceil(tile_n));
            let grid = if cluster {
                let c = mm::GEMM_MC_CLUSTER;
                c * (tiles_m.div_ceil(c) * tiles_n).min((sms / c).max(1))
            } else {
                (tiles_m * tiles_n).min(sms)
            };
            let l = Launch::new(&kernel)
                .grid([grid, 1, 1])
                .block([mm::GEMM_THREADS, 1, 1])
                .dynamic_shared(smem)
                .timeout_ms(staged_timeout_ms(s.platform()))
                .arg(dmaps.va())
                .arg(dmaps.va() + 128)
                .arg(tmap_y)
                .arg(&y)
                .arg(m)
                .arg(n)
                .arg(k);
            let done = gpu.launch(&l).map_err(|e| format!("{name} {m}x{n}x{k}: {e}"))?;
            gpu = done.gpu;
            check_matmul(name, &y.to_vec().map_err(err)?, &x, &w, [m, n, k].map(|v| v as usize), &at)?;
            let macs = f64::from(m) * f64::from(n) * f64::from(k);
            let how = if by_tma { "TMA stores" } else { "direct stores" };
            seen.push(format!(
                "{m}x{n}x{k} ({how}, {} tiles on {grid} CTAs, {} positions): {}",
                tiles_m * tiles_n,
                at.len(),
                matmul_rate(s.platform(), done.elapsed_ns, macs)
            ));
        }
        Ok(seen.join("; "))
    })
}

/// The matmul library with the TMA-store plans forced ([`omega::libs::matmul::ForcedPlan::GemmTmaStore`],
/// every tile, without and with the cluster, and the narrow tile's `GemmPingPong`) at each shape: an f32 output poisoned and checked at a sample
/// against f64, then the bf16 output against that f32 product rounded, bit for bit; the info must name the
/// entry: at N % 8 == 0 its `_y16` form, which stores the bf16 y itself, else the entry and the conversion.
fn matmul_lib_tma_store(shapes: &[[u32; 3]]) -> CaseResult {
    use omega::libs::matmul::{ForcedPlan, PLANNED_TILES};
    let mut seen = Vec::new();
    for &shape in shapes {
        let mut plans = Vec::new();
        for (_, e) in &STAGED_ENTRIES {
            // Every tile form is a planned one, so each entry's width names its form.
            let tile = PLANNED_TILES
                .into_iter()
                .find(|t| t.n() == e.tile_n)
                .expect("every staged entry's width is a tile form's");
            let bf16 = match shape[1] % 8 {
                0 => mm::y16_form(e.name).ok_or_else(|| format!("{} has no _y16 form", e.name))?,
                _ => e.name,
            };
            let forced = if e.pingpong {
                ForcedPlan::GemmPingPong { tile }
            } else {
                ForcedPlan::GemmTmaStore { tile, cluster: e.cluster }
            };
            plans.push((forced, [e.name, bf16]));
        }
        seen.push(forced_f32_then_bf16(&[shape], &plans)?);
    }
    Ok(seen.join("; "))
}

/// The stream-K case's shapes: the library case's, one tile cut among every CTA (128 K blocks), a tile row
/// of 64 live rows (the second consumer of every tile neither writes nor waits), and two Qwen3 products at
/// M = 512 (the few-tile shapes stream-K is for).
const STREAM_K_SHAPES: [[u32; 3]; 7] = [
    [300, 1024, 520],
    [129, 258, 200],
    [128, 128, 8192],
    [64, 5120, 2048],
    [200, 384, 4096],
    [512, 5120, 2048],
    [512, 1536, 2048],
];

/// The matmul library in stream-K order ([`omega::libs::matmul::ForcedPlan::GemmStreamK`], both tiles):
/// as the TMA-store case, f32 then bf16 output at each shape, through the same workspace, so each launch
/// relies on its flags left zero by the one before.
fn matmul_lib_stream_k() -> CaseResult {
    use omega::libs::matmul::{ForcedPlan, GemmTile};
    let plans = [(GemmTile::Wide, mm::GEMM_BF16_TN_SK), (GemmTile::Narrow, mm::GEMM_BF16_TN_SK_N128)]
        .map(|(tile, name)| (ForcedPlan::GemmStreamK { tile }, [name; 2]));
    forced_f32_then_bf16(&STREAM_K_SHAPES, &plans)
}

/// The GEMV at decode's shapes, f32 output and then bf16 (`omega_gemv_bf16_tn_m*_y16`, which stores the
/// rounded sum itself: one launch), unsplit and split: the bf16 output must be the f32 product rounded,
/// bit for bit (both sum the K slices in split order).
fn matmul_gemv_y16() -> CaseResult {
    use omega::libs::matmul::ForcedPlan;
    let shapes = [[1, 5120, 2048], [3, 2048, 4096], [8, 1536, 2048], [1, 2048, 768], [12, 128, 2048]];
    let mut seen = Vec::new();
    for split in [None, Some(1), Some(4)] {
        for &[m, n, k] in &shapes {
            let v = mm::gemv_variant(m);
            let names = [mm::GEMV_BF16_TN[v], mm::GEMV_BF16_TN_Y16[v]];
            seen.push(forced_f32_then_bf16(&[[m, n, k]], &[(ForcedPlan::Gemv { split }, names)])?);
        }
    }
    Ok(seen.join("; "))
}

/// The swapped small-M GEMM (`omega_gemm_bf16_tn_swapab_m*`, W as wgmma's 64-row operand) forced through
/// the library at every box height: Qwen3's QKV, O, down, gate+up and lm_head at decode's M, and ragged
/// shapes (K and W's last tile), unsplit and at the planner's split; f32 against f64, bf16 its rounding.
fn matmul_lib_swapab() -> CaseResult {
    use omega::libs::matmul::ForcedPlan;
    let shapes =
        [[1, 5120, 2048], [8, 2048, 4096], [16, 2048, 768], [32, 5120, 2048], [64, 1536, 2048], [64, 151936, 2048]];
    let ragged = [[13, 77, 1000], [47, 300, 136]];
    let mut seen = Vec::new();
    for splits in [None, Some(1)] {
        for &[m, n, k] in shapes.iter().chain(&ragged) {
            let f = mm::GEMM_SWAPAB[mm::swapab_variant(m).ok_or("M past the swapped entries")?];
            seen.push(forced_f32_then_bf16(&[[m, n, k]], &[(ForcedPlan::Swapab { splits }, [f.f32, f.y16])])?);
        }
    }
    Ok(seen.join("; "))
}

/// Each shape under each forced plan: an f32 output poisoned, the entry named `kernels[0]`, checked at a
/// sample against f64; then the bf16 output poisoned, the entry `kernels[1]`, against that f32 product
/// rounded, bit for bit.
fn forced_f32_then_bf16(shapes: &[[u32; 3]], plans: &[(omega::libs::matmul::ForcedPlan, [&str; 2])]) -> CaseResult {
    use omega::libs::matmul::{Matmul, Shape};
    let mut g = rng();
    with_scope(|s, mut gpu| {
        let lib = Matmul::new(s).map_err(err)?;
        lib.set_timeout_ms(staged_timeout_ms(s.platform()));
        let mut seen = Vec::new();
        for &[m, n, k] in shapes {
            let (xb, x) = random_bf16(&mut g, (m * k) as usize);
            let (wb, w) = random_bf16(&mut g, (n * k) as usize);
            let at = sample_positions(&mut g, m as usize, n as usize);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let dw = s.alloc_device_from(&wb).map_err(err)?;
            let shape = Shape::new(m, n, k);
            for &(forced, [want_f32, want_bf16]) in plans {
                lib.set_forced_plan(Some(forced));
                let mut y = common::poisoned_f32(s, (m * n) as usize).map_err(err)?;
                let done = lib.bf16(gpu, &dx, &dw, &mut y, shape).map_err(|f| format!("{shape} {forced}: {f}"))?;
                if done.info.kernel != want_f32 {
                    return Err(format!("{shape}: ran {}, forced {want_f32}", done.info.kernel));
                }
                let got = y.to_vec().map_err(err)?;
                check_matmul(want_f32, &got, &x, &w, [m, n, k].map(|v| v as usize), &at)?;
                let mut y16 = s.alloc::<u16>((m * n) as usize).map_err(err)?;
                y16.fill(0x7fc1).map_err(err)?;
                let d16 =
                    lib.bf16_to_bf16(done.gpu, &dx, &dw, &mut y16, shape).map_err(|f| format!("{shape} bf16: {f}"))?;
                gpu = d16.gpu;
                if d16.info.kernel != want_bf16 {
                    return Err(format!("{shape} bf16: ran {}, forced {want_bf16}", d16.info.kernel));
                }
                let got16 = y16.to_vec().map_err(err)?;
                if let Some(i) = (0..got.len()).find(|&i| got16[i] != mm::f32_to_bf16(got[i])) {
                    return Err(format!(
                        "{want_bf16} {shape} bf16 output [{}, {}] = {:#06x}, want {:#06x} (the f32 product rounded)",
                        i / n as usize,
                        i % n as usize,
                        got16[i],
                        mm::f32_to_bf16(got[i])
                    ));
                }
                seen.push(format!(
                    "{want_bf16} {m}x{n}x{k} on {} CTAs in {} launch(es)",
                    d16.info.ctas, d16.info.launches
                ));
            }
        }
        lib.set_forced_plan(None);
        Ok(format!("{}: f32 matches f64, bf16 its rounding", seen.join(", ")))
    })
}

/// The SwiGLU library call (`Matmul::swiglu_bf16`, `_to_bf16`: the gate+up GEMM with SwiGLU in its
/// epilogue) at an expert's gate+up at 4096 and 512 rows, a ragged product, and N % 8 == 4 (f32 only):
/// fresh random x and fused weight W `[2N, K]`, an f32 y poisoned and checked at a sample against f64
/// `silu(g) * u`, then the bf16 y poisoned, bit for bit the f32 y rounded; one launch each.
fn matmul_lib_swiglu() -> CaseResult {
    use omega::libs::matmul::{Matmul, Shape};
    let mut g = rng();
    with_scope(|s, mut gpu| {
        let lib = Matmul::new(s).map_err(err)?;
        lib.set_timeout_ms(staged_timeout_ms(s.platform()));
        let mut seen = Vec::new();
        for [m, n, k] in [[4096u32, 768, 2048], [512, 768, 2048], [129, 264, 136], [300, 100, 520]] {
            let (xb, x) = random_bf16(&mut g, (m * k) as usize);
            let (wb, w) = random_bf16(&mut g, (2 * n * k) as usize);
            let (mu, nu, ku) = (m as usize, n as usize, k as usize);
            let at = sample_positions(&mut g, mu, nu);
            let dx = s.alloc_device_from(&xb).map_err(err)?;
            let dw = s.alloc_device_from(&wb).map_err(err)?;
            let shape = Shape::new(m, n, k);
            let mut y = common::poisoned_f32(s, mu * nu).map_err(err)?;
            let done = lib.swiglu_bf16(gpu, &dx, &dw, &mut y, shape).map_err(|f| format!("SwiGLU {shape}: {f}"))?;
            gpu = done.gpu;
            let got = y.to_vec().map_err(err)?;
            if let Some(i) = got.iter().position(|v| v.is_nan()) {
                return Err(format!("SwiGLU {shape}: y[{}, {}] is NaN: never written", i / nu, i % nu));
            }
            for &(i, j) in &at {
                let xr = &x[i * ku..][..ku];
                let (want, tol) = mm::swiglu_f64(xr, &w[j * ku..][..ku], &w[(nu + j) * ku..][..ku]);
                let v = f64::from(got[i * nu + j]);
                if (v - want).abs() > tol {
                    return Err(format!("SwiGLU {shape}: y[{i}, {j}] = {v:e}, want {want:e} within {tol:e}"));
                }
            }
            let mut line = format!(
                "{} {m}x{n}x{k} ({} positions): {}",
                done.info.kernel,
                at.len(),
                matmul_rate(s.platform(), done.info.device_ns, f64::from(m) * f64::from(2 * n) * f64::from(k))
            );
            if n % 8 == 0 {
                let mut y16 = s.alloc::<u16>(mu * nu).map_err(err)?;
                y16.fill(0x7fc1).map_err(err)?;
                let d16 = lib
                    .swiglu_bf16_to_bf16(gpu, &dx, &dw, &mut y16, shape)
                    .map_err(|f| format!("SwiGLU {shape} bf16: {f}"))?;
                gpu = d16.gpu;
                let got16 = y16.to_vec().map_err(err)?;
                if let Some(i) = (0..got.len()).find(|&i| got16[i] != mm::f32_to_bf16(got[i])) {
                    return Err(format!(
                        "{} {shape} bf16 output [{}, {}] = {:#06x}, want {:#06x} (the f32 y rounded)",
                        d16.info.kernel,
                        i / nu,
                        i % nu,
                        got16[i],
                        mm::f32_to_bf16(got[i])
                    ));
                }
                line.push_str(&format!(", {} bit for bit its rounding", d16.info.kernel));
            }
            seen.push(line);
        }
        Ok(seen.join("; "))
    })
}

fn in_child(case: &str) -> CaseResult {
    in_child_env(case, &[])
}

/// [`in_child`] with `env` set in the child: the nvidia platform reads its launch tuning from the
/// environment when it is made, so a child is how one case runs under another switch value (the
/// simulator ignores them, and the case must pass there too).
fn in_child_env(case: &str, env: &[(&str, &str)]) -> CaseResult {
    let exe = std::env::current_exe().map_err(err)?;
    let out = Command::new(exe).args(["--case", case]).envs(env.iter().copied()).output().map_err(err)?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() {
        Ok(format!("{text} [child exited cleanly]"))
    } else {
        Err(format!("child {}: {} {}", out.status, text, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The ordering and visibility cases, a single checked launch and a 3-launch module-data list, run in
/// a child under one switch of the launch tuning (`in_child_env`): what must hold whatever mechanism
/// orders the launches and releases the markers.
fn chains_under_switch() -> CaseResult {
    let single = vector_add(1000, None)?;
    let ordering = cmdlist_ordering()?;
    let visibility = chain_visibility()?;
    let module = module_data()?;
    Ok(format!("single launch: {single}; ordering: {ordering}; visibility: {visibility}; module data: {module}"))
}

/// Thread-block clusters through the typed API: a kernel built with `__cluster_dims__(2, 1, 1)`, the same
/// body in runtime clusters of 4 (`Launch::cluster`), and without a cluster; each block's rank, cluster
/// index and counts, `%is_explicit_cluster`, and the 128 values it read from its neighbour's shared memory
/// through distributed shared memory, against the reference, the output poisoned first.
fn clusters() -> CaseResult {
    use omega::kernels::cluster::{cluster_ref, CLUSTER_ANY, CLUSTER_PAIRS, CLUSTER_THREADS, CLUSTER_WORDS_PER_BLOCK};
    let mut g = rng();
    let salt: u32 = g.random();
    let module = omega::kernels::cuda_module(omega::kernels::CLUSTER).map_err(|e| e.to_string())?;
    with_scope(|s, mut gpu| {
        let m = s.load_module(module).map_err(err)?;
        let mut seen = Vec::new();
        for (entry, grid, asked, built) in
            [(CLUSTER_PAIRS, 16u32, [1, 1, 1], 2u32), (CLUSTER_ANY, 32, [4, 1, 1], 4), (CLUSTER_ANY, 8, [1, 1, 1], 1)]
        {
            let k = m.kernel(entry).map_err(err)?;
            let mut out = s.alloc::<u32>(grid as usize * CLUSTER_WORDS_PER_BLOCK).map_err(err)?;
            out.fill(0xdead_beef).map_err(err)?;
            let l =
                Launch::new(&k).grid([grid, 1, 1]).block([CLUSTER_THREADS, 1, 1]).cluster(asked).arg(&out).arg(salt);
            gpu = gpu.launch(&l).map_err(err)?.gpu;
            let got = out.to_vec().map_err(err)?;
            for b in 0..grid {
                let want = cluster_ref(b, grid, built, built > 1, salt);
                let at = b as usize * CLUSTER_WORDS_PER_BLOCK;
                if got[at..at + CLUSTER_WORDS_PER_BLOCK] != want[..] {
                    let head = &got[at..at + 8];
                    return Err(format!(
                        "{entry} in clusters of {built}, block {b}: rank/id/nid/nrank/cluster_ctaid/nctaid/explicit {head:?}, want {:?}; neighbour values {}",
                        &want[..8],
                        if got[at + 8..at + CLUSTER_WORDS_PER_BLOCK] == want[8..] { "match" } else { "wrong" }
                    ));
                }
            }
            seen.push(format!("{entry} x {grid} in clusters of {built}"));
        }
        Ok(format!("{}: ranks, cluster ids and neighbours' shared memory match", seen.join(", ")))
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--case" {
        let r = match args[2].as_str() {
            "hang" => hang_latches(),
            "fault" => mmu_fault(),
            "recover" => recover_after_hang(),
            "registers_256" => vector_add(1 << 20, Some(255)),
            "chains" => chains_under_switch(),
            "matmul_lib_ts" => matmul_lib_tma_store(&STAGED_LIB_SHAPES),
            "matmul_lib_sk" => matmul_lib_stream_k(),
            "matmul_lib_swiglu" => matmul_lib_swiglu(),
            "matmul_lib_swapab" => matmul_lib_swapab(),
            "matmul_gemv_y16" => matmul_gemv_y16(),
            "moe_route" => matmul_moe_route(),
            "moe_router" => matmul_moe_router(),
            "moe" => matmul_moe(1, 8, 128, 1536, 2048),
            "gemv_lm_head" => matmul_gemv(&[1, 4], 151_936, 2048),
            "serving" => serving::sealed_matmul_steps(),
            "decoder" => decoder::selections(),
            "combine_norm" => decoder::combine_norm(),
            "l2_prefetch" => decoder::l2_prefetch(),
            "qwen3_tiny" => qwen3::tiny(),
            "qwen3_2layer" => qwen3::two_layer(),
            "prefill" => prefill::prefill_case(),
            // The suite runs it in process; a case of its own to run it alone.
            "matmul_skinny" => matmul_skinny(&SKINNY_MS, 5120, 2048),
            "elementwise" => elementwise::all(),
            other => match STAGED_ENTRIES.iter().find(|(case, _)| *case == other) {
                Some(&(_, e)) => matmul_tma_store(e),
                None => Err(format!("no case {other}")),
            },
        };
        return match r {
            Ok(m) => {
                println!("{m}");
                ExitCode::SUCCESS
            }
            Err(m) => {
                println!("{m}");
                ExitCode::FAILURE
            }
        };
    }
    {
        let l = omega::lock();
        let dev = match l.open() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("gpu_suite: cannot open the device: {}", e.error);
                return ExitCode::FAILURE;
            }
        };
        let info = dev.device();
        println!("gpu_suite on platform {}: {}", dev.platform(), common::device_line(&info));
    }
    let cases: Vec<Case> = vec![
        ("hello vector add (1M random f32)", || vector_add(1 << 20, None)),
        ("vector add declaring 255 registers: 256 in the QMD, a whole register file a block", || {
            in_child("registers_256")
        }),
        ("10,000 launches", ten_thousand_launches),
        ("typed launches (kernel! and derive(LaunchArgs))", typed_handles),
        ("blockDim/gridDim in a 2-D grid", grid_2d),
        ("static + dynamic shared memory", shared_memory),
        ("local memory (stack)", local_memory),
        ("four threads taking turns on the lock", four_threads),
        ("command list: dependent launches never overlap", cmdlist_ordering),
        ("command list: launch i+1 reads what launch i wrote", chain_visibility),
        ("module data: __constant__ table and __device__ counter", module_data),
        ("mixed module: nvcc plain + template + printf kernels, module data", mixed_module),
        ("device printf: many threads, order per thread, overflow marked", device_printf),
        ("job engine: VECTOR_1D job", engine_vector_job),
        ("many buffers: 10^5 live, each checked", many_buffers),
        ("default wait: empty launch, CPU of a 100 ms wait <= 10%", default_wait),
        ("large buffer: >= 130 GiB device-only, written, read by a kernel, freed", large_buffer),
        ("thread-block clusters: __cluster_dims__, runtime clusters, distributed shared memory", clusters),
        ("matmul: TMA GEMM bf16 1024x1024x1024", || matmul_tma_gemm(1024, 1024, 1024)),
        ("matmul: TMA GEMM bf16 ragged 1000x1000x1000", || matmul_tma_gemm(1000, 1000, 1000)),
        ("matmul: TMA GEMM bf16 4096x2048x2048", || matmul_tma_gemm(4096, 2048, 2048)),
        ("matmul: TMA GEMM bf16 split-K 512x2048x2048", || {
            matmul_tma_gemm_split(mm::GEMM_BF16_TN_SPLITK, 512, 2048, 2048)
        }),
        ("matmul: TMA GEMM bf16 128-wide tiles 512x2048x2048", || {
            matmul_tma_gemm_split(mm::GEMM_BF16_TN_N128, 512, 2048, 2048)
        }),
        ("matmul: split-K GEMV bf16 M=1,8,64 N=2048 K=4096", || matmul_gemv(&[1, 8, 64], 2048, 4096)),
        ("matmul: GEMV bf16 lm_head M=1,4 N=151936 K=2048 (row streaming)", || matmul_gemv(&[1, 4], 151_936, 2048)),
        ("matmul: skinny GEMM bf16 qkv M=1..64 N=5120 K=2048", || matmul_skinny(&SKINNY_MS, 5120, 2048)),
        ("matmul: skinny GEMM bf16 ragged M=5,13,64 N=77 K=1000", || matmul_skinny(&[5, 13, 64], 77, 1000)),
        ("matmul: MoE routing + grouped GEMV E=128 top-8 T=8 N=1536 K=2048", || matmul_moe(8, 8, 128, 1536, 2048)),
        ("matmul: MoE routing + grouped GEMV E=128 top-8 T=1 N=1536 K=2048", || matmul_moe(1, 8, 128, 1536, 2048)),
        ("matmul: MoE routing alone: repeats, drops, rounds and passes", matmul_moe_route),
        ("matmul: the fused router: product, top k and routing in one launch", matmul_moe_router),
        ("matmul: TMA-store GEMM bf16 (TMA stores, ragged, N % 4 != 0 direct)", || in_child("matmul_ts")),
        ("matmul: cluster GEMM bf16 (2-CTA clusters, W multicast, TMA stores)", || in_child("matmul_mc")),
        ("matmul: narrow TMA-store GEMM bf16 (128x128 tiles, TMA stores)", || in_child("matmul_ts_n128")),
        ("matmul: narrow cluster GEMM bf16 (128x128 tiles, 2-CTA clusters, W multicast)", || {
            in_child("matmul_mc_n128")
        }),
        ("matmul: fitted TMA-store GEMMs bf16 (128x{160,192,96,64} tiles, one CTA and 2-CTA clusters)", || {
            STAGED_ENTRIES[4..12]
                .iter()
                .map(|&(case, _)| case)
                .map(|case| in_child(case).map_err(|e| format!("{case}: {e}")))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.join("; "))
        }),
        ("matmul: ping-pong GEMM bf16 (128x128 tiles, consumers on alternate tiles, TMA stores)", || {
            in_child("matmul_pp_n128")
        }),
        ("matmul library: TMA-store, cluster and ping-pong plans forced, f32 and bf16 outputs (bf16 stored by the _y16 entries at N % 8 == 0)", || in_child("matmul_lib_ts")),
        ("matmul library: stream-K plans forced, both tiles, f32 and bf16 outputs", || in_child("matmul_lib_sk")),
        ("matmul library: SwiGLU over the fused gate+up weight in one launch, f32 against f64, bf16 its rounding", || {
            in_child("matmul_lib_swiglu")
        }),
        ("matmul library: the swapped small-M GEMM forced (every x box, QKV/O/down/gate+up/lm_head at M <= 64, ragged), f32 and bf16", || {
            in_child("matmul_lib_swapab")
        }),
        ("matmul library: the GEMV's bf16 output in one launch, bit for bit the f32 product rounded", matmul_gemv_y16),
        ("attention: prefill bf16 FA3-style, GQA 32/4/128, causal and full, seq 1..16K", || in_child("prefill")),
        ("matmul: SIMT GEMM f32 513x257x1000", || matmul_simt_f32(513, 257, 1000)),
        ("matmul: convert f32 -> bf16, 1M elements", || matmul_convert(1 << 20)),
        ("serving: 1000 sealed matmul steps, driver counters unchanged", serving::sealed_matmul_steps),
        ("decoder: router top-k and argmax, exact against references", decoder::selections),
        ("decoder: L2 prefetch, bulk and lines, stores nothing", decoder::l2_prefetch),
        ("decoder: combine + RMSNorm in one launch, bit for bit the two launches", decoder::combine_norm),
        ("qwen3: TINY decode vs the host reference, generator bits, sealed steps", || in_child("qwen3_tiny")),
        ("qwen3: full width, 2 layers, 8 steps vs the host reference", || in_child("qwen3_2layer")),
        ("ordering and visibility, marker 1 from the last QMD", || {
            in_child_env("chains", &[("OMEGA_NVIDIA_MARKER1", "qmd")])
        }),
        ("ordering and visibility, marker 1 from the last QMD behind FE_SYSMEMBAR", || {
            in_child_env("chains", &[("OMEGA_NVIDIA_MARKER1", "qmd"), ("OMEGA_NVIDIA_MARKER1_SYSMEMBAR", "1")])
        }),
        ("ordering and visibility, marker 1 after an acquire of marker 0", || {
            in_child_env("chains", &[("OMEGA_NVIDIA_MARKER1", "acquire")])
        }),
        ("ordering and visibility, marker 1 by the compute engine", || {
            in_child_env("chains", &[("OMEGA_NVIDIA_MARKER1", "compute")])
        }),
        ("ordering and visibility, a semaphore per launch", || {
            in_child_env("chains", &[("OMEGA_NVIDIA_CHAIN", "semaphore")])
        }),
        ("ordering and visibility, a semaphore per launch behind FE_SYSMEMBAR, no block-exit barrier", || {
            in_child_env(
                "chains",
                &[
                    ("OMEGA_NVIDIA_CHAIN", "semaphore"),
                    ("OMEGA_NVIDIA_CHAIN_RELEASE_MEMBAR", "1"),
                    ("OMEGA_NVIDIA_CHAIN_MEMBAR", "0"),
                ],
            )
        }),
        ("elementwise: RMSNorm f32 and bf16, 16384x2048 and odd widths", || elementwise::rmsnorm(false)),
        ("elementwise: residual RMSNorm f32 and bf16, 16384x2048 and odd widths", || elementwise::rmsnorm(true)),
        ("elementwise: RoPE near position 40960, theta 1e6", || elementwise::rope(false)),
        ("elementwise: QK-RMSNorm + RoPE near position 40960, theta 1e6", || elementwise::rope(true)),
        ("elementwise: SwiGLU 16384x6144 and odd widths", || elementwise::swiglu(false)),
        ("elementwise: SwiGLU over the fused gate+up output", || elementwise::swiglu(true)),
        ("elementwise: SwiGLU from f32 gate+up into bf16", elementwise::swiglu_to_bf16),
        ("never-ending kernel, 100 ms timeout: latch", || in_child("hang")),
        ("store to an unmapped address: MMU fault", || in_child("fault")),
        ("never-ending kernel: latch, recover, reopen, vector add in the same process", || in_child("recover")),
        ("store to an unmapped address: MMU fault, named within 10 ms", || in_child("fault")),
    ];
    let cases = cases.into_iter().chain(attention::cases());
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases {
        let t = Instant::now();
        match case() {
            Ok(m) => {
                passed += 1;
                println!("PASS  {name}: {m} ({:.2} s)", t.elapsed().as_secs_f64());
            }
            Err(m) => {
                failed += 1;
                println!("FAIL  {name}: {m}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
