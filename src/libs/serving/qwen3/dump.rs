//! The Qwen3 dump: a decode run as JSON lines, what `benches/torch/qwen3_peer.py --check` compares with its
//! own model (docs/serving.md, "Qwen3 dump format").
//!
//! The first line is the header ([`header_line`]): the configuration, the batch, the prompt and the
//! platform. Then one line per step ([`step_line`]): the step, the tokens fed, the greedy tokens out, the
//! sha256 of all the logits (`[batch, vocab]` as little-endian f32, row-major: two runs that agree bit for
//! bit have the same), the first [`LOGITS_SHOWN`] logits of each row, and each row's five best tokens.

use serde_json::{json, Value};

use super::config::Qwen3Config;

/// Logits of each row a step line carries.
pub const LOGITS_SHOWN: usize = 64;

/// The header: `{"dump": "omega-qwen3", "config": {...}, "batch": B, "prompt": [...], "platform": ".."}`.
pub fn header_line(cfg: &Qwen3Config, prompt: &[u32], platform: &str) -> String {
    let c = cfg;
    let config = json!({
        "hidden": c.hidden, "layers": c.layers, "q_heads": c.q_heads, "kv_heads": c.kv_heads,
        "head_dim": c.head_dim, "experts": c.experts, "top_k": c.top_k, "expert_inter": c.expert_inter,
        "vocab": c.vocab, "eps": c.eps, "rope_theta": c.rope_theta,
    });
    json!({ "dump": "omega-qwen3", "config": config, "batch": prompt.len(), "prompt": prompt, "platform": platform })
        .to_string()
}

/// Step `step`'s line: `input` the tokens fed (one per sequence), `logits` `[input.len(), vocab]`.
pub fn step_line(step: u32, input: &[u32], logits: &[f32]) -> String {
    let vocab = logits.len() / input.len().max(1);
    let rows: Vec<&[f32]> = logits.chunks(vocab.max(1)).collect();
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sha: String = sha256(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    let shown: Vec<Value> =
        rows.iter().map(|r| r[..LOGITS_SHOWN.min(r.len())].iter().map(|&v| finite(v)).collect()).collect();
    let top5: Vec<Vec<u32>> = rows.iter().map(|r| best(r, 5)).collect();
    let tokens: Vec<u32> = top5.iter().map(|t| t[0]).collect();
    json!({ "step": step, "input": input, "tokens": tokens, "logits_sha": sha, "logits": shown, "top5": top5 })
        .to_string()
}

/// `v` as JSON: a number (JSON has no NaN or infinity: those are written as null, which the check refuses).
fn finite(v: f32) -> Value {
    serde_json::Number::from_f64(f64::from(v)).map_or(Value::Null, Value::Number)
}

/// The `n` largest of `row`, best first, the lower index first among equals (so the first is the greedy
/// token: the lowest index of the largest value).
fn best(row: &[f32], n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..row.len() as u32).collect();
    order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    order.truncate(n);
    order
}

/// SHA-256 (FIPS 180-4) of `data`: the dump's logits digest, which Python's hashlib makes the same.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    // The message, a 1 bit, zeros to 56 bytes mod 64, then its length in bits, big-endian.
    let mut msg = data.to_vec();
    msg.push(0x80);
    msg.resize(msg.len().next_multiple_of(64).max(64), 0);
    if msg.len() - (data.len() + 1) < 8 {
        msg.resize(msg.len() + 64, 0);
    }
    let end = msg.len();
    msg[end - 8..].copy_from_slice(&(data.len() as u64 * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes(word.try_into().expect("4 bytes"));
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let [a, b, c, d, e, f, g, hh] = v;
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            v = [t1.wrapping_add(s0).wrapping_add(maj), a, b, c, d.wrapping_add(t1), e, f, g];
        }
        h.iter_mut().zip(v).for_each(|(h, v)| *h = h.wrapping_add(v));
    }
    let mut out = [0u8; 32];
    out.chunks_exact_mut(4).zip(h).for_each(|(o, h)| o.copy_from_slice(&h.to_be_bytes()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libs::serving::qwen3::Reference;

    fn hex(d: [u8; 32]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha256_is_fips_180_4() {
        assert_eq!(hex(sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        // 56 bytes: the padding needs a second block.
        let two = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(sha256(two)), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        assert_eq!(hex(sha256(&[b'a'; 1000])), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }

    #[test]
    fn a_reference_run_dumps_lines_the_peer_reads() {
        let c = Qwen3Config::TINY;
        let mut m = Reference::generated(c, 2);
        let head: Value = serde_json::from_str(&header_line(&c, &[3, 4], "sim")).unwrap();
        assert_eq!(head["config"]["vocab"], 1000);
        assert_eq!(head["config"]["eps"].as_f64().unwrap() as f32, 1e-6);
        assert_eq!((head["batch"].as_u64(), head["prompt"][1].as_u64()), (Some(2), Some(4)));
        assert!(head.get("step").is_none(), "the peer tells the header by its missing step");
        let logits = m.step(&[3, 4]);
        let line: Value = serde_json::from_str(&step_line(0, &[3, 4], &logits)).unwrap();
        let tokens: Vec<u32> = serde_json::from_value(line["tokens"].clone()).unwrap();
        assert_eq!(tokens, m.tokens());
        let shown: Vec<Vec<f32>> = serde_json::from_value(line["logits"].clone()).unwrap();
        assert_eq!(shown[1], logits[1000..1064], "f32 values round-trip through JSON");
        let top5: Vec<Vec<u32>> = serde_json::from_value(line["top5"].clone()).unwrap();
        for (b, t) in top5.iter().enumerate() {
            let row = &logits[b * 1000..][..1000];
            assert!(t.windows(2).all(|w| row[w[0] as usize] >= row[w[1] as usize]));
            assert!(row.iter().filter(|&&v| v > row[t[4] as usize]).count() == 4);
        }
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(line["logits_sha"], hex(sha256(&bytes)));
        assert_eq!(best(&[1.0, 3.0, 3.0, 2.0], 3), [1, 2, 3]);
    }
}
