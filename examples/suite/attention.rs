//! The attention library's GPU suite cases (issue 13), pulled into examples/gpu_suite.rs with `#[path]`.
//!
//! Each runs the library's calls on the installed platform at the shapes the sim tests cannot afford —
//! Qwen3-30B-A3B's 32 query / 4 KV heads of 128, sequences up to 32768 tokens, ragged batches over
//! shuffled pages of 16 and 64 tokens — with the outputs poisoned first and checked against the f64
//! references of examples/suite/attention_ref.rs (which argues the tolerances), and reports the
//! device time of the long ones.

use omega::kernels::attention::{CLUSTER_MAX_SPLITS, DECODE_DEEP_STAGES, DECODE_STAGES, STATUS_BAD_PAGE, STATUS_LONG};
use omega::libs::attention::{AppendShape, Attention, AttentionError, DecodeShape, GqaShape, Merge};

use super::attention_ref::{
    compare, decode, dense_reference, dense_tolerance, paged_tolerance, Out, PagedCase, QkvCase, Query, POISON,
};
use super::{err, with_scope, CaseResult};

/// The suite's attention cases.
pub fn cases() -> Vec<super::Case> {
    vec![
        ("attention: paged decode 32/4/128, page 16, lens 1/7/1000/4096/32768", || lengths(16)),
        ("attention: paged decode 32/4/128, page 64, lens 1/7/1000/4096/32768", || lengths(64)),
        ("attention: paged decode, ragged batch of 16 up to 32768, shuffled pages, bf16 q and out", ragged),
        ("attention: paged decode, small odd shapes and forced splits", odd_shapes),
        ("attention: dense GQA f32 32/4/128 seq 1/7/1000, rows of 4096, odd shapes", dense),
        ("attention: K/V append + decode, three steps in one command list", list_steps),
        ("attention: device page tables clamped and flagged, never faulted", device_tables),
        ("attention: fused QKV append (QK-norm + RoPE, q stored, K/V appended), 32/4/128 and 4/2/64", qkv_append),
    ]
}

fn seed() -> u64 {
    super::common::fresh_seed()
}

/// One decode case checked under every merge (the cluster's where a forced split fits one cluster) at both
/// pipeline depths, each on outputs poisoned afresh; their device times and what they read.
fn checked<Q: Query, O: Out>(case: &PagedCase, splits: u32, what: &str) -> Result<String, String> {
    let d = case.layout.head_dim;
    let (want, vmax) = case.reference(1.0 / (d as f32).sqrt());
    let mut out = Vec::new();
    let merges = [Merge::Launch, Merge::Cluster, Merge::Ticket];
    let runs = merges.into_iter().flat_map(|m| [(m, DECODE_STAGES), (m, DECODE_DEEP_STAGES)]);
    for (merge, stages) in runs {
        if merge == Merge::Cluster && splits > CLUSTER_MAX_SPLITS {
            continue;
        }
        let shape =
            DecodeShape { splits, merge, stages, ..DecodeShape::new(case.batch(), case.q_heads, case.max_pages) };
        let (got, info) = with_scope(|s, gpu| {
            let att = Attention::new(s).map_err(err)?;
            decode::<Q, O>(s, gpu, &att, case, shape).1.map_err(err)
        })?;
        let worst = compare(&format!("{what}, {merge:?}, {stages} stages"), &got, &want, paged_tolerance(vmax))?;
        let gbps = case.kv_bytes() as f64 / info.device_ns.max(1) as f64;
        out.push(format!(
            "{merge:?}/{stages} {:.1} us, {gbps:.0} GB/s, {} splits, {} launches, err {worst:.1e}",
            info.device_ns as f64 / 1e3,
            info.splits,
            info.launches
        ));
    }
    Ok(format!("{what}: {}", out.join(", ")))
}

fn lengths(page: u32) -> CaseResult {
    let seed = seed();
    let mut out = Vec::new();
    for len in [1, 7, 1000, 4096, 32768] {
        let case = PagedCase::new(seed ^ u64::from(len), page, 4, 128, 32, &[len], 5);
        out.push(checked::<f32, f32>(&case, 0, &format!("len {len}"))?);
    }
    Ok(format!("seed {seed}; {}", out.join("; ")))
}

fn ragged() -> CaseResult {
    let seed = seed();
    let mut mix = super::attention_ref::Mix(seed);
    let lens: Vec<u32> = (0..16).map(|i| if i == 3 { 32768 } else { 1 + mix.below(32768) as u32 }).collect();
    let a = checked::<u16, u16>(&PagedCase::new(seed, 64, 4, 128, 32, &lens, 9), 0, "page 64 bf16")?;
    let b = checked::<f32, f32>(&PagedCase::new(seed ^ 1, 16, 4, 128, 32, &lens, 9), 0, "page 16 f32")?;
    Ok(format!("seed {seed}, lens {lens:?}; {a}; {b}"))
}

fn odd_shapes() -> CaseResult {
    let seed = seed();
    let cases = [
        (16, (6, 3, 32), vec![7, 70, 1], 0),
        (16, (5, 5, 64), vec![33, 2, 4096], 0),
        (64, (16, 1, 64), vec![129, 1000], 0),
        (16, (32, 4, 128), vec![4096, 5], 1),
        (64, (32, 4, 128), vec![32768], 256),
    ];
    let mut out = Vec::new();
    for (i, (page, (qh, kvh, d), lens, splits)) in cases.into_iter().enumerate() {
        let case = PagedCase::new(seed ^ i as u64, page, kvh, d, qh, &lens, 2);
        out.push(checked::<f32, f32>(&case, splits, &format!("{qh}/{kvh}/{d} page {page} splits {splits}"))?);
    }
    Ok(format!("seed {seed}; {}", out.join("; ")))
}

fn dense_one(seed: u64, shape: GqaShape) -> Result<f64, String> {
    let d = shape.head_dim as usize;
    let q = omega_refmath::random_f32(seed, shape.q_rows as usize * shape.q_heads as usize * d);
    let n = shape.kv_len as usize * shape.kv_heads as usize * d;
    let (k, v) = (omega_refmath::random_f32(seed ^ 1, n), omega_refmath::random_f32(seed ^ 2, n));
    let (want, vmax) = dense_reference(&q, &k, &v, shape);
    let got = with_scope(|s, gpu| {
        let att = Attention::new(s).map_err(err)?;
        let (dq, dk, dv) = (
            s.alloc_device_from(&q).map_err(err)?,
            s.alloc_device_from(&k).map_err(err)?,
            s.alloc_device_from(&v).map_err(err)?,
        );
        let mut o = s.alloc_device_from(&vec![POISON; q.len()]).map_err(err)?;
        att.gqa_f32(gpu, &dq, &dk, &dv, &mut o, shape).map_err(err)?;
        o.to_vec().map_err(err)
    })?;
    compare(&format!("{shape:?}"), &got, &want, dense_tolerance(vmax))
}

fn dense() -> CaseResult {
    let seed = seed();
    let mut worst = 0f64;
    for causal in [false, true] {
        for seq in [1, 7, 1000] {
            worst = worst.max(dense_one(seed ^ u64::from(seq), GqaShape::new(32, 4, 128, seq, causal))?);
        }
        worst = worst.max(dense_one(seed ^ 9, GqaShape::new(6, 3, 40, 7, causal))?);
        worst = worst.max(dense_one(seed ^ 10, GqaShape::new(2, 2, 256, 33, causal))?);
    }
    worst = worst.max(dense_one(seed ^ 11, GqaShape { q_rows: 16, ..GqaShape::new(32, 4, 128, 4096, true) })?);
    Ok(format!("seed {seed}; max error {worst:.1e}"))
}

fn list_steps() -> CaseResult {
    let seed = seed();
    let lens = [3u32, 4000, 16];
    let steps = 3;
    let mut case = PagedCase::new(seed, 16, 4, 128, 32, &lens.map(|l| l + steps), 2);
    let (k_new, v_new) =
        (omega_refmath::random_bf16(seed ^ 1, 3 * 4 * 128), omega_refmath::random_bf16(seed ^ 2, 3 * 4 * 128));
    let (got, status) = with_scope(|s, gpu| {
        let att = Attention::new(s).map_err(err)?;
        let pool = s.alloc_device_from(&case.pool).map_err(err)?;
        let tables = s.alloc_device_from(&case.tables).map_err(err)?;
        let dlens = s.alloc_device_from(&lens.map(|l| l as i32)).map_err(err)?;
        let (kb, vb) = (s.alloc_device_from(&k_new).map_err(err)?, s.alloc_device_from(&v_new).map_err(err)?);
        let q = s.alloc_device_from(&case.q).map_err(err)?;
        let mut out = s.alloc_device_from(&vec![POISON; case.q.len()]).map_err(err)?;
        let mut list = s.cmdlist().map_err(err)?;
        let append = AppendShape { batch: 3, max_pages: case.max_pages, advance: true };
        att.add_kv_append(&mut list, &pool, &case.layout, &kb, &vb, &tables, &dlens, append).map_err(err)?;
        let shape = DecodeShape::new(3, 32, case.max_pages);
        att.add_paged_decode(&mut list, &q, &pool, &case.layout, &tables, &dlens, &out, shape).map_err(err)?;
        let mut gpu = gpu;
        for _ in 0..steps {
            gpu = gpu.submit(&mut list).map_err(|e| e.error.to_string())?.gpu;
        }
        Ok((out.to_vec().map_err(err)?, att.list_status().map_err(err)?))
    })?;
    if status != 0 {
        return Err(format!("the list flagged status {status:#x}"));
    }
    for step in 0..steps {
        case.append(&lens.map(|l| l + step), &k_new, &v_new);
    }
    let (want, vmax) = case.reference(1.0 / 128f32.sqrt());
    let worst = compare("the last step's decode", &got, &want, paged_tolerance(vmax))?;
    Ok(format!("seed {seed}; max error {worst:.1e}"))
}

fn device_tables() -> CaseResult {
    let base = PagedCase::new(seed(), 64, 4, 128, 32, &[300, 20], 0);
    let mut bad_page = base.clone();
    bad_page.tables[2] = 1 << 30;
    let mut long = base.clone();
    long.lens[1] = i32::MAX;
    let mut seen = Vec::new();
    for (case, bit) in [(&bad_page, STATUS_BAD_PAGE), (&long, STATUS_LONG)] {
        let r = with_scope(|s, gpu| {
            let att = Attention::new(s).map_err(err)?;
            let (gpu, r) = decode::<f32, f32>(s, gpu, &att, case, DecodeShape::new(2, 32, case.max_pages));
            // The handle and the device go on working.
            let gpu = gpu.ok_or("the flagged call latched")?;
            let (_gpu, ok) = decode::<f32, f32>(s, gpu, &att, &base, DecodeShape::new(2, 32, base.max_pages));
            ok.map_err(err)?;
            Ok(r)
        })?;
        match r {
            Err(AttentionError::Table { status, .. }) if status & bit != 0 => seen.push(format!("status {status:#x}")),
            other => return Err(format!("want a flagged table (bit {bit}), got {other:?}")),
        }
    }
    Ok(seen.join(", "))
}

fn qkv_append() -> CaseResult {
    let seed = seed();
    let mut out = Vec::new();
    for (heads, page) in [((32, 4, 128), 16), ((4, 2, 64), 64)] {
        let mut case = QkvCase::new(seed, heads, page, &[0, 17, 4095, 5, 1000]);
        let got = with_scope(|s, gpu| case.run(s, gpu, &Attention::new(s).map_err(err)?))?;
        out.push(case.check(got)?);
    }
    Ok(format!("seed {seed}; {}", out.join("; ")))
}
