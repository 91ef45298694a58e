//! Argument encoding: what a launch spends laying out its parameters, by the derive and by the builder,
//! for a typical kernel (three buffers and a count: 4 parameters, 7 words) and a wide one (64 words).
//!
//! `cargo bench -p omega-benches --bench args`

use criterion::{criterion_group, criterion_main, Criterion};
use omega::{ArgBlock, Data, LaunchArgs, Mem};
use std::hint::black_box;

omega::kernel!(VectorAdd = "../../kernels/vector_add.ptx", entry = "vector_add",
               params(a: &f32, b: &f32, c: &mut f32, n: u32));

#[derive(LaunchArgs)]
struct VectorAddArgs<'a, 's> {
    a: &'a Mem<'s, Data<f32>>,
    b: &'a Mem<'s, Data<f32>>,
    c: &'a Mem<'s, Data<f32>>,
    n: u32,
}

#[derive(LaunchArgs)]
struct Wide {
    w0: u32,
    w1: u32,
    w2: u32,
    w3: u32,
    w4: u32,
    w5: u32,
    w6: u32,
    w7: u32,
    w8: u32,
    w9: u32,
    w10: u32,
    w11: u32,
    w12: u32,
    w13: u32,
    w14: u32,
    w15: u32,
    w16: u32,
    w17: u32,
    w18: u32,
    w19: u32,
    w20: u32,
    w21: u32,
    w22: u32,
    w23: u32,
    w24: u32,
    w25: u32,
    w26: u32,
    w27: u32,
    w28: u32,
    w29: u32,
    w30: u32,
    w31: u32,
    w32: u32,
    w33: u32,
    w34: u32,
    w35: u32,
    w36: u32,
    w37: u32,
    w38: u32,
    w39: u32,
    w40: u32,
    w41: u32,
    w42: u32,
    w43: u32,
    w44: u32,
    w45: u32,
    w46: u32,
    w47: u32,
    w48: u32,
    w49: u32,
    w50: u32,
    w51: u32,
    w52: u32,
    w53: u32,
    w54: u32,
    w55: u32,
    w56: u32,
    w57: u32,
    w58: u32,
    w59: u32,
    w60: u32,
    w61: u32,
    w62: u32,
    w63: u32,
}

fn encoding(c: &mut Criterion) {
    let lock = omega::lock();
    lock.set_platform(omega::PlatformKind::Sim).expect("the simulator installs");
    let dev = lock.open().expect("the simulator opens");
    let _ = dev.scope(|s, _gpu| {
        let a = s.alloc::<f32>(1024).unwrap();
        let b = s.alloc::<f32>(1024).unwrap();
        let mut out = s.alloc::<f32>(1024).unwrap();
        let k = VectorAdd::load(s).unwrap();

        let mut g = c.benchmark_group("encode_4_args");
        g.bench_function("builder", |bench| {
            bench.iter(|| {
                let mut block = ArgBlock::default();
                block.push(black_box(&a));
                block.push(black_box(&b));
                block.push(black_box(&out));
                block.push(black_box(1024u32));
                block
            })
        });
        g.bench_function("derive", |bench| {
            let args = VectorAddArgs { a: &a, b: &b, c: &out, n: 1024 };
            bench.iter(|| black_box(&args).block())
        });
        g.bench_function("typed_kernel_launch", |bench| {
            bench.iter(|| {
                let l = k.launch(black_box(&a), black_box(&b), &mut out, black_box(1024));
                black_box(l.arguments().words().len())
            })
        });
        g.finish();

        let mut g = c.benchmark_group("encode_64_args");
        g.bench_function("builder", |bench| {
            bench.iter(|| {
                let mut block = ArgBlock::default();
                for i in 0..64u32 {
                    block.push(black_box(i));
                }
                block
            })
        });
        let wide = Wide {
            w0: 0,
            w1: 1,
            w2: 2,
            w3: 3,
            w4: 4,
            w5: 5,
            w6: 6,
            w7: 7,
            w8: 8,
            w9: 9,
            w10: 10,
            w11: 11,
            w12: 12,
            w13: 13,
            w14: 14,
            w15: 15,
            w16: 16,
            w17: 17,
            w18: 18,
            w19: 19,
            w20: 20,
            w21: 21,
            w22: 22,
            w23: 23,
            w24: 24,
            w25: 25,
            w26: 26,
            w27: 27,
            w28: 28,
            w29: 29,
            w30: 30,
            w31: 31,
            w32: 32,
            w33: 33,
            w34: 34,
            w35: 35,
            w36: 36,
            w37: 37,
            w38: 38,
            w39: 39,
            w40: 40,
            w41: 41,
            w42: 42,
            w43: 43,
            w44: 44,
            w45: 45,
            w46: 46,
            w47: 47,
            w48: 48,
            w49: 49,
            w50: 50,
            w51: 51,
            w52: 52,
            w53: 53,
            w54: 54,
            w55: 55,
            w56: 56,
            w57: 57,
            w58: 58,
            w59: 59,
            w60: 60,
            w61: 61,
            w62: 62,
            w63: 63,
        };
        g.bench_function("derive", |bench| bench.iter(|| black_box(&wide).block()));
        g.bench_function("derive_to_words", |bench| bench.iter(|| black_box(&wide).block().words()));
        g.finish();
    });
}

criterion_group!(benches, encoding);
criterion_main!(benches);
