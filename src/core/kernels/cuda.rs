//! The CUDA C++ modules' kernels (`kernels/cuda/*.cu`): their names, module data and host references.
//!
//! `kernels/cuda/mixed.cu` is one module with each kind of kernel nvcc emits: an `extern "C"` kernel, a
//! kernel calling `printf`, explicitly instantiated template kernels and `static` (LOCAL) template
//! kernels, over module data they share. The references below are what the simulator runs and what every
//! GPU result is checked against; `tests/kernels.rs` checks the names, parameter tables, module data and
//! the printf format against the cubin nvcc built.

use omega_hal::sim::{KernelCtx, KernelError};

use super::HostSpec;
use crate::printf::{sim_emit, PrintfArgs};

/// The module's name (`kernels/cuda/mixed.cu`).
pub const MIXED: &str = "mixed";
/// `extern "C" mixed_plain(float* out, unsigned n)`.
pub const MIXED_PLAIN: &str = "mixed_plain";
/// `extern "C" mixed_counter(unsigned* out)`.
pub const MIXED_COUNTER: &str = "mixed_counter";
/// `extern "C" mixed_printf(int base, double scale, unsigned lines)`.
pub const MIXED_PRINTF: &str = "mixed_printf";
/// `mixed_scale<float>(float*, float, unsigned)`, mangled.
pub const MIXED_SCALE_F32: &str = "_Z11mixed_scaleIfEvPT_S0_j";
/// `mixed_scale<int>(int*, int, unsigned)`, mangled.
pub const MIXED_SCALE_I32: &str = "_Z11mixed_scaleIiEvPT_S0_j";
/// `static mixed_fill<7>(int*, unsigned)`, mangled (a LOCAL entry symbol).
pub const MIXED_FILL_7: &str = "_Z10mixed_fillILi7EEvPij";
/// `static mixed_fill<-3>(int*, unsigned)`, mangled (a LOCAL entry symbol).
pub const MIXED_FILL_MINUS_3: &str = "_Z10mixed_fillILin3EEvPij";

/// `__constant__ float mixed_table[8]`.
pub const MIXED_TABLE: [f32; 8] = [1.0, -2.0, 0.5, 4.0, 0.25, -8.0, 3.0, 10.0];
/// `__device__ int mixed_init[4]`.
pub const MIXED_INIT: [i32; 4] = [3, 1, 4, 1];
/// The format of `mixed_printf`'s one printf, as the source spells it.
pub const MIXED_PRINTF_FORMAT: &str = "t=%u j=%u d=%d i=%+i x=%#x X=%08X o=%o c=%c s=%s|%-6.3s| f=%.3f e=%e g=%g \
                                       ll=%lld llu=%llu p=%p %5d%%\n";

/// The mixed module's kernels with their host references, by symbol name.
pub const MIXED_HOST_SPECS: &[HostSpec] = &[
    HostSpec {
        name: MIXED_PLAIN,
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_plain,
    },
    HostSpec {
        name: MIXED_COUNTER,
        param_sizes: &[8],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_counter,
    },
    HostSpec {
        name: MIXED_PRINTF,
        param_sizes: &[4, 8, 4],
        static_shared_bytes: 0,
        // Its 0x68-byte frame (the printf argument block), vprintf's 0x30 and the headroom, as nvcc 13.0
        // builds them.
        local_bytes_per_thread: 0x2e0,
        run: mixed_printf,
    },
    HostSpec {
        name: MIXED_SCALE_F32,
        param_sizes: &[8, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_scale_f32,
    },
    HostSpec {
        name: MIXED_SCALE_I32,
        param_sizes: &[8, 4, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_scale_i32,
    },
    HostSpec {
        name: MIXED_FILL_7,
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_fill::<7>,
    },
    HostSpec {
        name: MIXED_FILL_MINUS_3,
        param_sizes: &[8, 4],
        static_shared_bytes: 0,
        local_bytes_per_thread: 0,
        run: mixed_fill::<-3>,
    },
];

/// Reference of `mixed_plain`: `out[i] = table[i % 8] * init[i % 4]` for the first `n` elements (the
/// threads of the grid along x, at most).
pub fn mixed_plain_ref(n: usize) -> Vec<f32> {
    (0..n).map(|i| MIXED_TABLE[i % 8] * MIXED_INIT[i % 4] as f32).collect()
}

/// Reference of `mixed_scale<float>`: `x * factor + init[i % 4]`, fused (one rounding).
pub fn mixed_scale_f32_ref(data: &[f32], factor: f32) -> Vec<f32> {
    data.iter().enumerate().map(|(i, x)| x.mul_add(factor, MIXED_INIT[i % 4] as f32)).collect()
}

/// Reference of `mixed_scale<int>` (32-bit wrapping arithmetic, as the GPU's).
pub fn mixed_scale_i32_ref(data: &[i32], factor: i32) -> Vec<i32> {
    data.iter().enumerate().map(|(i, x)| x.wrapping_mul(factor).wrapping_add(MIXED_INIT[i % 4])).collect()
}

/// Reference of `mixed_fill<N>`: `N * i`.
pub fn mixed_fill_ref(factor: i32, n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| factor.wrapping_mul(i)).collect()
}

/// The arguments of `mixed_printf`'s printf for thread `t`, line `j` (the pointers of the two string
/// literals are the caller's).
fn mixed_printf_args(base: i32, scale: f64, t: u32, j: u32, omega_va: u64, kernel_va: u64) -> PrintfArgs {
    let mut a = PrintfArgs::new();
    a.int(t as i32)
        .int(j as i32)
        .int(base.wrapping_add(t as i32))
        .int((j as i32).wrapping_neg())
        .int(t.wrapping_mul(16) as i32)
        .int((t ^ 0xbeef) as i32)
        .int(j as i32)
        .int(('A' as u32 + t % 26) as i32)
        .string(omega_va, Some(b"omega"), None)
        .string(kernel_va, Some(b"kernel"), Some(3))
        .double(scale * f64::from(j))
        .double(scale * f64::from(t + 1))
        .double(scale / f64::from(j + 1))
        .long(i64::from(t).wrapping_mul(-1_000_000_007))
        .long((u64::from(j) << 40) as i64)
        .pointer(u64::from(t) * 256)
        .int(t.wrapping_add(j) as i32);
    a
}

/// What `mixed_printf` prints, line by line, for threads `0..threads`: each line formatted by the C
/// library's own `snprintf` from the source's format, so the device's record and the host's formatter
/// are checked against an independent printf. Within a thread the lines are in `j` order; across threads
/// the GPU may interleave them.
pub fn mixed_printf_expected(base: i32, scale: f64, threads: u32, lines: u32) -> Vec<Vec<String>> {
    let fmt = std::ffi::CString::new(MIXED_PRINTF_FORMAT).expect("no NUL in the format");
    let omega = c"omega";
    let kernel = c"kernel";
    (0..threads)
        .map(|t| {
            (0..lines)
                .map(|j| {
                    let mut buf = vec![0u8; 512];
                    // SAFETY: `buf` has 512 writable bytes and snprintf writes at most that many, NUL
                    // included; the format is NUL-terminated and every conversion gets an argument of
                    // the C type it names (u/d/i/x/X/o/c: 32-bit int; s: NUL-terminated strings; f/e/g:
                    // double; lld/llu: 64-bit; p: a pointer value, only printed).
                    let n = unsafe {
                        libc::snprintf(
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                            fmt.as_ptr(),
                            t as libc::c_uint,
                            j as libc::c_uint,
                            base.wrapping_add(t as i32) as libc::c_int,
                            (j as i32).wrapping_neg() as libc::c_int,
                            t.wrapping_mul(16) as libc::c_uint,
                            (t ^ 0xbeef) as libc::c_uint,
                            j as libc::c_uint,
                            ('A' as u32 + t % 26) as libc::c_int,
                            omega.as_ptr(),
                            kernel.as_ptr(),
                            scale * f64::from(j),
                            scale * f64::from(t + 1),
                            scale / f64::from(j + 1),
                            i64::from(t).wrapping_mul(-1_000_000_007) as libc::c_longlong,
                            (u64::from(j) << 40) as libc::c_ulonglong,
                            (u64::from(t) * 256) as usize as *const libc::c_void,
                            t.wrapping_add(j) as libc::c_int,
                        )
                    };
                    buf.truncate(usize::try_from(n).expect("snprintf succeeds").min(511));
                    String::from_utf8(buf).expect("ASCII")
                })
                .collect()
        })
        .collect()
}

// ----- the simulator's kernels -----------------------------------------------------------------------
//
// Each does what its CUDA C++ does, in the simulator's slices (as the PTX kernels' references in
// `super` do): it takes its part of the work and loads and stores only that part, and it reads the
// module's `__device__` data from the module's data buffer, through the addresses its code image
// carries, as the GPU reads it.

/// A `u32` of a simulated kernel's module data.
fn data_u32(ctx: &KernelCtx<'_>, symbol: &str, index: u64) -> Result<(u64, u32), KernelError> {
    let va = ctx.symbol(symbol).ok_or_else(|| missing(symbol))? + 4 * index;
    Ok((va, ctx.read_u32s(va, 1)?[0]))
}

fn missing(symbol: &str) -> KernelError {
    KernelError::Fault { xid: 13, detail: format!("no address for `{symbol}` in the code image (module not linked)") }
}

/// `mixed_init`, as the module's data buffer holds it now.
fn mixed_init(ctx: &KernelCtx<'_>) -> Result<[i32; 4], KernelError> {
    let mut init = [0i32; 4];
    for (i, v) in init.iter_mut().enumerate() {
        *v = data_u32(ctx, "mixed_init", i as u64)?.1 as i32;
    }
    Ok(init)
}

/// This call's part of the elements `i < n` a 1-D launch's threads along x cover (one thread each).
fn take_elements(ctx: &mut KernelCtx<'_>, n: u32) -> std::ops::Range<u64> {
    let threads = ctx.threads_x();
    ctx.take(u64::from(n).min(threads))
}

fn mixed_plain(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, n) = (ctx.u64_at(0), ctx.word(2));
    let part = take_elements(ctx, n);
    let init = mixed_init(ctx)?;
    let values: Vec<f32> =
        part.clone().map(|i| MIXED_TABLE[(i & 7) as usize] * init[(i & 3) as usize] as f32).collect();
    ctx.write_f32s(out.wrapping_add(part.start * 4), &values)?;
    // Each thread that stored adds 1 to the counter (atomicAdd): this slice's stores at once.
    let (count_va, count) = data_u32(ctx, "mixed_count", 0)?;
    ctx.write_u32s(count_va, &[count.wrapping_add(values.len() as u32)])
}

fn mixed_counter(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    // One thread's work, whatever the launch's shape: taken whole.
    let out = ctx.u64_at(0);
    let (count_va, count) = data_u32(ctx, "mixed_count", 0)?;
    ctx.write_u32s(out, &[count])?;
    ctx.write_u32s(count_va, &[0])
}

/// The address of the string literal `text` among the module's `$str` data objects.
fn literal(ctx: &KernelCtx<'_>, text: &[u8]) -> Result<u64, KernelError> {
    for (_, va) in ctx.symbols.iter().filter(|(n, _)| n.starts_with("$str")) {
        let mut bytes = Vec::new();
        let mut b = [0u8; 1];
        loop {
            ctx.read(va + bytes.len() as u64, &mut b)?;
            if b[0] == 0 || bytes.len() > text.len() {
                break;
            }
            bytes.push(b[0]);
        }
        if bytes == text {
            return Ok(*va);
        }
    }
    Err(KernelError::Fault {
        xid: 13,
        detail: format!("no string literal {:?} in the module", String::from_utf8_lossy(text)),
    })
}

/// Every thread prints `lines` lines: one work unit per line, thread after thread (linear thread order,
/// [`omega_hal::sim::Shape::thread_id`]), so a slice is whole lines and each thread's lines keep their
/// order. `t` is the kernel's `blockIdx.x * blockDim.x + threadIdx.x`, in 32 bits.
fn mixed_printf(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (base, scale, lines) = (ctx.word(0) as i32, f64::from_bits(ctx.u64_at(2)), ctx.word(4));
    let shape = ctx.shape();
    let part = ctx.take(shape.threads().saturating_mul(u64::from(lines)));
    if part.is_empty() {
        return Ok(());
    }
    let format = literal(ctx, MIXED_PRINTF_FORMAT.as_bytes())?;
    let (omega, kernel) = (literal(ctx, b"omega")?, literal(ctx, b"kernel")?);
    for unit in part {
        let (ctaid, tid) = shape.thread_id(unit / u64::from(lines));
        let t = ctaid[0].wrapping_mul(shape.block[0]).wrapping_add(tid[0]);
        let j = (unit % u64::from(lines)) as u32;
        sim_emit(ctx, format, &mixed_printf_args(base, scale, t, j, omega, kernel))?;
    }
    Ok(())
}

fn mixed_scale_f32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (data, factor, n) = (ctx.u64_at(0), f32::from_bits(ctx.word(2)), ctx.word(3));
    let part = take_elements(ctx, n);
    let init = mixed_init(ctx)?;
    let at = data.wrapping_add(part.start * 4);
    let x = ctx.read_f32s(at, (part.end - part.start) as usize)?;
    let y: Vec<f32> = part.zip(x).map(|(i, x)| x.mul_add(factor, init[(i & 3) as usize] as f32)).collect();
    ctx.write_f32s(at, &y)
}

fn mixed_scale_i32(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (data, factor, n) = (ctx.u64_at(0), ctx.word(2) as i32, ctx.word(3));
    let part = take_elements(ctx, n);
    let init = mixed_init(ctx)?;
    let at = data.wrapping_add(part.start * 4);
    let x = ctx.read_u32s(at, (part.end - part.start) as usize)?;
    let y: Vec<u32> =
        part.zip(x).map(|(i, x)| (x as i32).wrapping_mul(factor).wrapping_add(init[(i & 3) as usize]) as u32).collect();
    ctx.write_u32s(at, &y)
}

fn mixed_fill<const N: i32>(ctx: &mut KernelCtx<'_>) -> Result<(), KernelError> {
    let (out, n) = (ctx.u64_at(0), ctx.word(2));
    let part = take_elements(ctx, n);
    let v: Vec<u32> = part.clone().map(|i| N.wrapping_mul(i as i32) as u32).collect();
    ctx.write_u32s(out.wrapping_add(part.start * 4), &v)
}
