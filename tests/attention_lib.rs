//! The attention library (`omega::libs::attention`) on the simulator: dense GQA in f32, paged decode
//! (single and ragged batches, shuffled page tables, pages of 16 and 64, f32 and bf16 queries and outputs,
//! planner's and forced splits), the K/V append on the GPU, command lists, kept handles, and the refusals
//! with their stages. Every output is poisoned first and checked against an f64 reference on random inputs;
//! the tolerances are argued in examples/suite/attention_ref.rs. Each test prints its seed
//! (`OMEGA_ATTN_SEED` replays it). Tests take turns on the process's one lock.

use omega::kernels::attention::{
    CLUSTER_MAX_SPLITS, DECODE_DEEP_STAGES, DECODE_STAGES, STATUS_BAD_PAGE, STATUS_LONG, STATUS_NEGATIVE,
};
use omega::libs::attention::{
    decode_plan, AppendShape, Attention, AttentionError, DecodeForm, DecodeShape, GqaShape, KvLayout, LayoutError,
    Merge, ShapeError, Submission,
};
use omega::{Gpu, Scope, Scoped, Stage};

#[path = "../examples/suite/attention_ref.rs"]
mod attention_ref;
use attention_ref::{
    compare, decode, dense_reference, dense_tolerance, paged_tolerance, Out, PagedCase, QkvCase, Query, POISON,
};

fn seed(test: &str) -> u64 {
    let seed = std::env::var("OMEGA_ATTN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("{test}: seed {seed} (rerun with OMEGA_ATTN_SEED={seed})");
    seed
}

fn on_sim<R>(f: impl for<'s> FnOnce(&'s Scope<'s>, Gpu<'s>) -> R) -> R {
    let dev = omega::lock().open().expect("open");
    assert_eq!(dev.platform(), "sim", "these tests run where there is no GPU");
    match dev.scope(f) {
        Scoped::Open(_, r) => r,
        Scoped::Latched(..) => panic!("a library call latched the process"),
    }
}

fn launches() -> u64 {
    omega::testing::simulator().expect("the simulator is the platform").stats().launches
}

fn check_case<Q: Query, O: Out>(what: &str, seed: u64, page: u32, heads: (u32, u32, u32), lens: &[u32], splits: u32) {
    let (q_heads, kv_heads, head_dim) = heads;
    let case = PagedCase::new(seed, page, kv_heads, head_dim, q_heads, lens, 3);
    let (want, vmax) = case.reference(1.0 / (head_dim as f32).sqrt());
    // Every merge (the cluster's where the split fits one) at both pipeline depths, and the planner's choice.
    let merges = [Merge::Launch, Merge::Cluster, Merge::Ticket];
    let forced = merges.into_iter().flat_map(|m| [(m, DECODE_STAGES), (m, DECODE_DEEP_STAGES)]);
    for (merge, stages) in forced.chain([(Merge::Auto, 0)]) {
        if merge == Merge::Cluster && splits > CLUSTER_MAX_SPLITS {
            continue;
        }
        let shape = DecodeShape { splits, merge, stages, ..DecodeShape::new(case.batch(), q_heads, case.max_pages) };
        let (got, info, sms) = on_sim(|s, gpu| {
            let att = Attention::new(s).unwrap();
            let (got, info) = decode::<Q, O>(s, gpu, &att, &case, shape).1.unwrap_or_else(|e| panic!("{what}: {e}"));
            (got, info, s.device().sm_count)
        });
        let tol = paged_tolerance(vmax);
        let worst = compare(what, &got, &want, tol).unwrap();
        let tokens = u64::from(case.max_pages) * u64::from(page);
        let pairs = u64::from(case.batch()) * u64::from(kv_heads);
        let form = decode_plan(pairs, tokens, sms, (splits, 0), (merge, Submission::Alone)).unwrap().form;
        let expected = match merge {
            Merge::Auto => form,
            Merge::Launch => DecodeForm::Split,
            Merge::Cluster => DecodeForm::Cluster,
            Merge::Ticket => DecodeForm::Ticket,
        };
        assert_eq!(form, expected, "{what}, {merge:?}");
        assert_eq!(info.launches, if form == DecodeForm::Split { 2 } else { 1 }, "{what}, {merge:?}: {info:?}");
        assert!(info.splits >= 1 && (splits == 0 || info.splits <= splits), "{what}: {info:?}");
        assert!(form != DecodeForm::Cluster || info.splits <= CLUSTER_MAX_SPLITS, "{what}: {info:?}");
        assert!(stages == 0 || info.stages == stages, "{what}: {info:?}");
        println!(
            "{what}, {merge:?}: max error {worst:.2e} (tolerance {tol:.2e}), {} splits of {} tiles, {} stages",
            info.splits, info.tiles_per_split, info.stages
        );
    }
}

#[test]
fn paged_decode_qwen_heads_at_every_length() {
    let seed = seed("paged_decode_qwen_heads_at_every_length");
    for page in [16, 64] {
        for len in [1, 7, 1000, 4096] {
            check_case::<f32, f32>(
                &format!("page {page}, len {len}"),
                seed ^ u64::from(len),
                page,
                (32, 4, 128),
                &[len],
                0,
            );
        }
    }
}

#[test]
fn paged_decode_ragged_batches_with_shuffled_tables() {
    let seed = seed("paged_decode_ragged_batches_with_shuffled_tables");
    let lens = [1000, 1, 17, 4096, 64, 0, 333, 16];
    check_case::<f32, f32>("page 16, ragged", seed, 16, (32, 4, 128), &lens, 0);
    check_case::<f32, f32>("page 64, ragged", seed ^ 1, 64, (32, 4, 128), &lens, 0);
    check_case::<u16, u16>("page 64, ragged, bf16 q and out", seed ^ 2, 64, (32, 4, 128), &lens, 0);
    check_case::<u16, f32>("page 16, bf16 q", seed ^ 3, 16, (32, 4, 128), &lens[..3], 0);
}

#[test]
fn paged_decode_small_odd_shapes_and_forced_splits() {
    let seed = seed("paged_decode_small_odd_shapes_and_forced_splits");
    check_case::<f32, f32>("6/3/32", seed, 16, (6, 3, 32), &[7, 70, 1], 0);
    check_case::<f32, f32>("5/5/64", seed ^ 1, 16, (5, 5, 64), &[33, 2], 0);
    check_case::<f32, f32>("16/1/64", seed ^ 2, 64, (16, 1, 64), &[129], 0);
    for splits in [1, 3, 256] {
        check_case::<f32, f32>(&format!("{splits} splits"), seed ^ 3, 16, (32, 4, 128), &[1000, 5], splits);
    }
}

fn dense_case(what: &str, seed: u64, shape: GqaShape) {
    let d = shape.head_dim as usize;
    let q = omega_refmath::random_f32(seed, shape.q_rows as usize * shape.q_heads as usize * d);
    let kv_elems = shape.kv_len as usize * shape.kv_heads as usize * d;
    let k = omega_refmath::random_f32(seed ^ 1, kv_elems);
    let v = omega_refmath::random_f32(seed ^ 2, kv_elems);
    let (want, vmax) = dense_reference(&q, &k, &v, shape);
    let got = on_sim(|s, gpu| {
        let att = Attention::new(s).unwrap();
        let (dq, dk, dv) =
            (s.alloc_device_from(&q).unwrap(), s.alloc_device_from(&k).unwrap(), s.alloc_device_from(&v).unwrap());
        let mut out = s.alloc_device_from(&vec![POISON; q.len()]).unwrap();
        att.gqa_f32(gpu, &dq, &dk, &dv, &mut out, shape).unwrap_or_else(|e| panic!("{what}: {e}"));
        out.to_vec().unwrap()
    });
    let worst = compare(what, &got, &want, dense_tolerance(vmax)).unwrap();
    println!("{what}: max error {worst:.2e}");
}

#[test]
fn dense_gqa_f32_matches_f64() {
    let seed = seed("dense_gqa_f32_matches_f64");
    for causal in [false, true] {
        for seq in [1, 7, 100] {
            dense_case(
                &format!("32/4/128 seq {seq} causal {causal}"),
                seed ^ u64::from(seq),
                GqaShape::new(32, 4, 128, seq, causal),
            );
        }
        dense_case("6/3/40 seq 7", seed ^ 5, GqaShape::new(6, 3, 40, 7, causal));
        dense_case("5/1/33 seq 13", seed ^ 6, GqaShape::new(5, 1, 33, 13, causal));
        dense_case("2/2/256 seq 9", seed ^ 7, GqaShape::new(2, 2, 256, 9, causal));
    }
    // The rows form: the last rows of a long KV (a prefill chunk, a decode step).
    for (kv_len, q_rows) in [(1000, 50), (4096, 3), (4096, 1)] {
        let shape = GqaShape { q_rows, ..GqaShape::new(32, 4, 128, kv_len, true) };
        dense_case(&format!("rows {q_rows} of {kv_len}"), seed ^ u64::from(kv_len), shape);
    }
}

#[test]
fn append_then_decode_sees_the_new_tokens() {
    let seed = seed("append_then_decode_sees_the_new_tokens");
    let lens = [5u32, 16, 63, 0];
    for (page, bf16_in) in [(16u32, false), (64, true)] {
        // Tables with room for one more token each.
        let mut case = PagedCase::new(seed ^ u64::from(page), page, 4, 128, 32, &lens.map(|l| l + 1), 2);
        let rows = lens.len() * 4 * 128;
        let k_new = omega_refmath::random_f32(seed ^ 11, rows);
        let v_new = omega_refmath::random_f32(seed ^ 12, rows);
        let (pool_after, lens_after, got) = on_sim(|s, gpu| {
            let att = Attention::new(s).unwrap();
            let mut pool = s.alloc_device_from(&case.pool).unwrap();
            let tables = s.alloc_device_from(&case.tables).unwrap();
            let mut dlens = s.alloc_device_from(&lens.map(|l| l as i32)).unwrap();
            let shape = AppendShape { batch: lens.len() as u32, max_pages: case.max_pages, advance: true };
            let gpu = if bf16_in {
                let kb = s.alloc_device_from(&<u16 as Query>::from_f32(&k_new)).unwrap();
                let vb = s.alloc_device_from(&<u16 as Query>::from_f32(&v_new)).unwrap();
                att.kv_append(gpu, &mut pool, &case.layout, &kb, &vb, &tables, &mut dlens, shape).unwrap().gpu
            } else {
                let kf = s.alloc_device_from(&k_new).unwrap();
                let vf = s.alloc_device_from(&v_new).unwrap();
                att.kv_append(gpu, &mut pool, &case.layout, &kf, &vf, &tables, &mut dlens, shape).unwrap().gpu
            };
            let q = s.alloc_device_from(&case.q).unwrap();
            let mut out = s.alloc_device_from(&vec![POISON; case.q.len()]).unwrap();
            let shape = DecodeShape::new(lens.len() as u32, 32, case.max_pages);
            att.paged_decode(gpu, &q, &pool, &case.layout, &tables, &dlens, &mut out, shape).unwrap();
            (pool.to_vec().unwrap(), dlens.to_vec().unwrap(), out.to_vec().unwrap())
        });
        assert_eq!(lens_after, lens.map(|l| l as i32 + 1), "advanced on the GPU");
        // The pool with the rows written where the table says, bf16 of the inputs.
        case.append(&lens, &<u16 as Query>::from_f32(&k_new), &<u16 as Query>::from_f32(&v_new));
        assert!(pool_after == case.pool, "page {page}: the append wrote exactly the new rows");
        let (want, vmax) = case.reference(1.0 / 128f32.sqrt());
        compare(&format!("decode after append, page {page}"), &got, &want, paged_tolerance(vmax)).unwrap();
    }
}

#[test]
fn a_command_list_appends_and_decodes_steps_on_the_gpu() {
    let seed = seed("a_command_list_appends_and_decodes_steps_on_the_gpu");
    // The ticket form's counters must be back at zero for each submission of the list.
    for merge in [Merge::Auto, Merge::Launch, Merge::Ticket] {
        list_steps(seed, merge);
    }
}

fn list_steps(seed: u64, merge: Merge) {
    let lens = [3u32, 40];
    let steps = 3;
    let mut case = PagedCase::new(seed, 16, 4, 128, 32, &lens.map(|l| l + steps), 1);
    let k_new = omega_refmath::random_bf16(seed ^ 1, lens.len() * 4 * 128);
    let v_new = omega_refmath::random_bf16(seed ^ 2, lens.len() * 4 * 128);
    let (got, status) = on_sim(|s, gpu| {
        let att = Attention::new(s).unwrap();
        let pool = s.alloc_device_from(&case.pool).unwrap();
        let tables = s.alloc_device_from(&case.tables).unwrap();
        let dlens = s.alloc_device_from(&lens.map(|l| l as i32)).unwrap();
        let (kb, vb) = (s.alloc_device_from(&k_new).unwrap(), s.alloc_device_from(&v_new).unwrap());
        let q = s.alloc_device_from(&case.q).unwrap();
        let out = s.alloc_device_from(&vec![POISON; case.q.len()]).unwrap();
        let live = || {
            let a = s.alloc_stats();
            a.allocs - a.frees
        };
        let before = live();
        let mut list = s.cmdlist().unwrap();
        let append = AppendShape { batch: 2, max_pages: case.max_pages, advance: true };
        att.add_kv_append(&mut list, &pool, &case.layout, &kb, &vb, &tables, &dlens, append).unwrap();
        att.add_paged_decode(
            &mut list,
            &q,
            &pool,
            &case.layout,
            &tables,
            &dlens,
            &out,
            DecodeShape { merge, ..DecodeShape::new(2, 32, case.max_pages) },
        )
        .unwrap();
        let mut gpu = gpu;
        for _ in 0..steps {
            gpu = gpu.submit(&mut list).unwrap().gpu;
        }
        let _ = gpu;
        let status = att.list_status().unwrap();
        assert!(live() > before, "the adds' workspaces are allocated");
        drop(list);
        let mut out = out;
        assert_eq!(live(), before, "the dropped list took its adds' workspaces with it");
        assert_eq!(att.list_status().unwrap(), 0, "a dropped list's status words went with it");
        (out.to_vec().unwrap(), status)
    });
    assert_eq!(status, 0);
    // Every step appended the same rows at the next position.
    for step in 0..steps {
        case.append(&lens.map(|l| l + step), &k_new, &v_new);
    }
    let (want, vmax) = case.reference(1.0 / 128f32.sqrt());
    compare(&format!("the list's last decode, {merge:?}"), &got, &want, paged_tolerance(vmax)).unwrap();
}

#[test]
fn ticket_counters_are_back_at_zero_for_the_next_call() {
    let seed = seed("ticket_counters_are_back_at_zero_for_the_next_call");
    // One handle (one workspace): batches of 3, 1 and 5 sequences on fresh inputs, each split 5 ways, so a
    // counter left past zero would make the wrong CTA merge (and leave poison in the output).
    let cases: Vec<PagedCase> = [vec![70, 1, 300], vec![200], vec![5, 80, 0, 160, 33]]
        .iter()
        .enumerate()
        .map(|(i, lens)| PagedCase::new(seed ^ i as u64, 16, 4, 64, 16, lens, 2))
        .collect();
    let results = on_sim(|s, mut gpu| {
        let att = Attention::new(s).unwrap();
        let mut got = Vec::new();
        for case in cases.iter().chain(&cases) {
            let shape =
                DecodeShape { splits: 5, merge: Merge::Ticket, ..DecodeShape::new(case.batch(), 16, case.max_pages) };
            let (g, out) = decode::<f32, f32>(s, gpu, &att, case, shape);
            gpu = g.unwrap();
            got.push(out.unwrap());
        }
        got
    });
    for (i, (got, info)) in results.iter().enumerate() {
        let (want, vmax) = cases[i % cases.len()].reference(1.0 / 8.0);
        assert_eq!((info.launches, info.splits), (1, 5), "call {i}: {info:?}");
        compare(&format!("call {i}"), got, &want, paged_tolerance(vmax)).unwrap();
    }
}

#[test]
fn device_tables_are_clamped_and_flagged_never_faulted() {
    let seed = seed("device_tables_are_clamped_and_flagged_never_faulted");
    let base = PagedCase::new(seed, 16, 4, 128, 32, &[40, 20], 0);
    type Spoil = fn(&mut PagedCase);
    let cases: [(&str, Spoil, u32); 4] = [
        ("a page past the pool", |c| c.tables[1] = c.layout.pages as i32, STATUS_BAD_PAGE),
        ("a negative page", |c| c.tables[0] = -3, STATUS_BAD_PAGE),
        ("a length past the table", |c| c.lens[1] = 10_000, STATUS_LONG),
        ("a negative length", |c| c.lens[0] = -1, STATUS_NEGATIVE),
    ];
    for (what, spoil, bit) in cases {
        let mut case = base.clone();
        spoil(&mut case);
        let err = on_sim(|s, gpu| {
            let att = Attention::new(s).unwrap();
            let (gpu, r) = decode::<f32, f32>(s, gpu, &att, &case, DecodeShape::new(2, 32, case.max_pages));
            // The handle goes on working after the refusal.
            let gpu = gpu.expect("a certain failure");
            let (_gpu, ok) = decode::<f32, f32>(s, gpu, &att, &base, DecodeShape::new(2, 32, base.max_pages));
            ok.expect("a sound call after a flagged one");
            r.expect_err(what)
        });
        assert_eq!(err.stage(), Stage::AttentionTable, "{what}: {err}");
        assert!(matches!(err, AttentionError::Table { status, .. } if status & bit != 0), "{what}: {err}");
        assert!(err.to_string().starts_with("attention table: "), "{err}");
    }
}

#[test]
fn bad_layouts_and_shapes_are_refused_before_launch() {
    let case = PagedCase::new(7, 16, 4, 128, 32, &[20], 0);
    let refusals: Vec<(&str, KvLayout, DecodeShape, Stage)> = vec![
        ("page of 8", KvLayout { page_tokens: 8, ..case.layout }, DecodeShape::new(1, 32, 2), Stage::AttentionLayout),
        ("head_dim 96", KvLayout { head_dim: 96, ..case.layout }, DecodeShape::new(1, 32, 2), Stage::AttentionLayout),
        ("overlapping V", KvLayout { v_offset: 8, ..case.layout }, DecodeShape::new(1, 32, 2), Stage::AttentionLayout),
        (
            "odd stride",
            KvLayout { page_stride: case.layout.page_stride + 1, ..case.layout },
            DecodeShape::new(1, 32, 2),
            Stage::AttentionLayout,
        ),
        ("no pages", KvLayout { pages: 0, ..case.layout }, DecodeShape::new(1, 32, 2), Stage::AttentionLayout),
        ("30 heads over 4", case.layout, DecodeShape::new(1, 30, 2), Stage::AttentionShape),
        (
            "a group of 32",
            KvLayout::new(16, 1, 128, case.layout.pages),
            DecodeShape::new(1, 32, 2),
            Stage::AttentionShape,
        ),
        ("a table past its buffer", case.layout, DecodeShape::new(1, 32, 3), Stage::AttentionShape),
        ("a batch past q", case.layout, DecodeShape::new(2, 32, 1), Stage::AttentionShape),
        ("300 splits", case.layout, DecodeShape { splits: 300, ..DecodeShape::new(1, 32, 2) }, Stage::AttentionShape),
        (
            "pool short",
            KvLayout { pages: case.layout.pages + 1, ..case.layout },
            DecodeShape::new(1, 32, 2),
            Stage::AttentionShape,
        ),
    ];
    for (what, layout, shape, stage) in refusals {
        let c = PagedCase { layout, ..case.clone() };
        let (err, launches) = on_sim(|s, gpu| {
            let att = Attention::new(s).unwrap();
            let before = launches();
            let (_gpu, r) = decode::<f32, f32>(s, gpu, &att, &c, shape);
            (r.expect_err(what), launches() - before)
        });
        assert_eq!(err.stage(), stage, "{what}: {err}");
        assert_eq!(launches, 0, "{what}: nothing launched");
        assert!(err.to_string().starts_with(&format!("{stage}: ")), "{err}");
    }
    // Dense shapes.
    for (what, shape) in [
        ("no rows", GqaShape { q_rows: 0, ..GqaShape::new(4, 2, 8, 4, false) }),
        ("more rows than keys", GqaShape { q_rows: 5, ..GqaShape::new(4, 2, 8, 4, false) }),
        ("3 heads over 2", GqaShape::new(3, 2, 8, 4, false)),
        ("head_dim 300", GqaShape::new(2, 2, 300, 4, false)),
    ] {
        let err = on_sim(|s, gpu| {
            let att = Attention::new(s).unwrap();
            let b = s.alloc_device::<f32>(1 << 16).unwrap();
            let mut o = s.alloc_device::<f32>(1 << 16).unwrap();
            att.gqa_f32(gpu, &b, &b, &b, &mut o, shape).map(|_| ()).expect_err(what).error
        });
        assert_eq!(err.stage(), Stage::AttentionShape, "{what}: {err}");
        assert!(matches!(
            err,
            AttentionError::Shape(
                ShapeError::Zero { .. }
                    | ShapeError::Rows { .. }
                    | ShapeError::Heads { .. }
                    | ShapeError::HeadDim { .. }
            )
        ));
    }
    assert!(KvLayout::new(16, 4, 128, 1).check().is_ok());
    assert!(matches!(KvLayout::new(0, 4, 128, 1).check(), Err(LayoutError::PageTokens { .. })));
}

#[test]
fn a_kept_handle_resumes_in_the_next_scope() {
    let case = PagedCase::new(seed("a_kept_handle_resumes_in_the_next_scope"), 64, 4, 128, 32, &[100, 3], 0);
    let (want, vmax) = case.reference(1.0 / 128f32.sqrt());
    let dev = omega::lock().open().expect("open");
    let (dev, kept) = match dev.scope(|s, gpu| {
        let att = Attention::new(s).unwrap();
        let (_gpu, r) = decode::<f32, f32>(s, gpu, &att, &case, DecodeShape::new(2, 32, case.max_pages));
        compare("first scope", &r.unwrap().0, &want, paged_tolerance(vmax)).unwrap();
        att.keep()
    }) {
        Scoped::Open(d, k) => (d, k),
        Scoped::Latched(..) => panic!("latched"),
    };
    assert!(kept.is_current());
    let got = dev.scope(|s, gpu| {
        let att = Attention::resume(s, Some(kept)).unwrap();
        decode::<f32, f32>(s, gpu, &att, &case, DecodeShape::new(2, 32, case.max_pages)).1.unwrap().0
    });
    let Scoped::Open(_, got) = got else { panic!("latched") };
    compare("resumed", &got, &want, paged_tolerance(vmax)).unwrap();
}

#[test]
fn dense_gqa_runs_inside_a_command_list() {
    let seed = seed("dense_gqa_runs_inside_a_command_list");
    let shape = GqaShape { q_rows: 5, ..GqaShape::new(8, 2, 64, 40, true) };
    let q = omega_refmath::random_f32(seed, 5 * 8 * 64);
    let (k, v) = (omega_refmath::random_f32(seed ^ 1, 40 * 2 * 64), omega_refmath::random_f32(seed ^ 2, 40 * 2 * 64));
    let (want, vmax) = dense_reference(&q, &k, &v, shape);
    let got = on_sim(|s, gpu| {
        let att = Attention::new(s).unwrap();
        let (dq, dk, dv) =
            (s.alloc_device_from(&q).unwrap(), s.alloc_device_from(&k).unwrap(), s.alloc_device_from(&v).unwrap());
        let out = s.alloc_device_from(&vec![POISON; q.len()]).unwrap();
        let mut list = s.cmdlist().unwrap();
        let info = att.add_gqa_f32(&mut list, &dq, &dk, &dv, &out, shape).unwrap();
        assert_eq!((info.launches, info.device_ns), (1, 0), "recorded, not run");
        let _gpu = gpu.submit(&mut list).unwrap().gpu;
        let mut out = out;
        out.to_vec().unwrap()
    });
    compare("listed dense GQA", &got, &want, dense_tolerance(vmax)).unwrap();
}

#[test]
fn the_fused_qkv_append_norms_rotates_stores_q_and_appends_k_and_v() {
    let seed = seed("the_fused_qkv_append_norms_rotates_stores_q_and_appends_k_and_v");
    // Qwen3-30B-A3B's heads (32 / 4 of 128) and the tiny model's (4 / 2 of 64), ragged positions.
    for (heads, page) in [((32, 4, 128), 16), ((4, 2, 64), 64)] {
        let mut case = QkvCase::new(seed, heads, page, &[0, 17, 63, 5]);
        let got = on_sim(|s, gpu| case.run(s, gpu, &Attention::new(s).unwrap()).unwrap());
        println!("{}", case.check(got).unwrap());
    }
}
