//! The host TMA encoder against the driver's: every line of `tests/data/tma_driver.txt` (what
//! `cuTensorMapEncodeTiled` wrote or refused on the H200, recorded by `benches/cuda/tma_dump.cu`) must
//! come out of `omega_hal::tma` byte for byte, or be refused by it too.

use omega_hal::tma::{
    decode_tiled, encode_tiled, TiledSpec, TmaElem, TmaFill, TmaInterleave, TmaL2Promotion, TmaSwizzle,
};

struct Case {
    line: usize,
    spec: TiledSpec,
    /// The driver's bytes, or None where it refused.
    driver: Option<[u8; 128]>,
}

fn cases() -> Vec<Case> {
    let text = include_str!("data/tma_driver.txt");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (params, result) = match (line.split_once(" = "), line.split_once(" ! ")) {
            (Some((p, hex)), _) => (p, Some(hex.trim())),
            (None, Some((p, _rc))) => (p, None),
            _ => panic!("line {}: neither bytes nor a refusal: {line}", n + 1),
        };
        let v: Vec<u64> = params
            .split_whitespace()
            .map(|w| if let Some(h) = w.strip_prefix("0x") { u64::from_str_radix(h, 16) } else { w.parse() }.unwrap())
            .collect();
        assert_eq!(v.len(), 26, "line {}", n + 1);
        let spec = TiledSpec {
            elem: TmaElem::ALL[v[0] as usize],
            rank: v[1] as u32,
            interleave: [TmaInterleave::None, TmaInterleave::B16, TmaInterleave::B32][v[2] as usize],
            swizzle: [TmaSwizzle::None, TmaSwizzle::B32, TmaSwizzle::B64, TmaSwizzle::B128][v[3] as usize],
            l2_promotion: [TmaL2Promotion::None, TmaL2Promotion::B64, TmaL2Promotion::B128, TmaL2Promotion::B256]
                [v[4] as usize],
            fill: [TmaFill::Zeros, TmaFill::NanRequestZeroFma][v[5] as usize],
            global_address: v[6],
            global_dim: [v[7], v[8], v[9], v[10], v[11]],
            global_stride: [v[12], v[13], v[14], v[15]],
            box_dim: [v[16], v[17], v[18], v[19], v[20]].map(|x| x as u32),
            element_stride: [v[21], v[22], v[23], v[24], v[25]].map(|x| x as u32),
        };
        let driver = result.map(|hex| {
            let mut b = [0u8; 128];
            for (i, byte) in b.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
            }
            b
        });
        out.push(Case { line: n + 1, spec, driver });
    }
    out
}

#[test]
fn every_recorded_descriptor_and_refusal_is_the_drivers() {
    let cases = cases();
    let (accepted, refused) =
        cases.iter().fold((0, 0), |(a, r), c| if c.driver.is_some() { (a + 1, r) } else { (a, r + 1) });
    assert!(accepted > 1000 && refused > 1000, "the fixture holds {accepted} encodings and {refused} refusals");
    let mut wrong = Vec::new();
    for c in &cases {
        match (encode_tiled(&c.spec), c.driver) {
            (Ok(m), Some(d)) if m.0 == d => {
                let back = decode_tiled(&m).unwrap_or_else(|e| panic!("line {}: {e}", c.line));
                assert_eq!(encode_tiled(&back).unwrap(), m, "line {}", c.line);
            }
            (Err(_), None) => {}
            (Ok(m), Some(d)) => {
                let diff: Vec<String> = (0..128)
                    .filter(|&i| m.0[i] != d[i])
                    .map(|i| format!("{i}: {:02x} (driver {:02x})", m.0[i], d[i]))
                    .collect();
                wrong.push(format!("line {}: bytes differ: {}", c.line, diff.join(", ")));
            }
            (Ok(_), None) => wrong.push(format!("line {}: the driver refused {:?}; we encoded it", c.line, c.spec)),
            (Err(e), Some(_)) => {
                wrong.push(format!("line {}: the driver encoded {:?}; we refused: {e}", c.line, c.spec))
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} lines disagree:\n{}",
        wrong.len(),
        cases.len(),
        wrong[..wrong.len().min(400)].join("\n")
    );
}
