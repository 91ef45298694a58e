//! Qwen3's generated weights against their Python twin (`benches/torch/qwen_weights.py --qwen3`): the
//! tensor ids, shapes, scales and centres of `src/libs/serving/qwen3/config.rs` as the script computes them,
//! for a norm (centred on 1) and linear layers (scaled by sqrt(3 / K)), bit for bit.

use omega::libs::serving::qwen3::{Qwen3Config, Tensor};

/// `python3 benches/torch/qwen_weights.py --qwen3 CONFIG --name NAME --start START --count 8` (the
/// pure-Python path; with numpy present the script uses numpy, which the weights test checks against it).
const PYTHON: [(&str, &str, u64, [u16; 8]); 3] = [
    (
        "tiny",
        "model.layers.1.self_attn.q_norm.weight",
        0,
        [0x3f4a, 0x3f90, 0x3f8d, 0x3f85, 0x3f67, 0x3f8b, 0x3f83, 0x3f9c],
    ),
    (
        "full",
        "model.layers.47.post_attention_layernorm.weight",
        2040,
        [0x3fa0, 0x3f4c, 0x3f7d, 0x3f41, 0x3f9a, 0x3f65, 0x3f90, 0x3f4c],
    ),
    (
        "full",
        "model.layers.3.mlp.experts.down",
        1_000_000,
        [0xbcbb, 0x3b86, 0xbd0c, 0xbd16, 0xbc10, 0x3d49, 0xbd12, 0x3bfe],
    ),
];

fn config(name: &str) -> Qwen3Config {
    match name {
        "tiny" => Qwen3Config::TINY,
        "full" => Qwen3Config::FULL,
        other => panic!("no config {other}"),
    }
}

fn tensor(c: &Qwen3Config, name: &str) -> Tensor {
    c.tensors().into_iter().find(|t| t.name() == name).unwrap_or_else(|| panic!("no tensor {name}"))
}

fn rust_words(config_name: &str, name: &str, start: u64, count: usize) -> Vec<u16> {
    let c = config(config_name);
    let mut got = vec![0u16; count];
    tensor(&c, name).fill(&c, start, &mut got);
    got
}

#[test]
fn qwen3_tensors_match_the_python_twin_bit_for_bit() {
    for (c, name, start, want) in PYTHON {
        assert_eq!(rust_words(c, name, start, 8), want, "{c} {name} from {start}");
    }
    // A norm's words lie in 1 ± 0.25 (0x3f40..=0x3fa0), the expert's in ±sqrt(3 / 768) = ±0.0625.
    let f = |b: u16| f32::from_bits(u32::from(b) << 16);
    assert!(PYTHON[..2].iter().flat_map(|v| v.3).all(|b| (0.75..=1.25).contains(&f(b))));
    assert!(PYTHON[2].3.iter().all(|&b| f(b).abs() <= 0.0625));
    // The script itself, when a Python is here: a global norm and the router.
    for (config_name, name, start) in
        [("tiny", "model.norm.weight", 100), ("full", "model.layers.0.mlp.gate.weight", 262_000)]
    {
        let Some(py) = python_words(&["--qwen3", config_name, "--name", name, "--start", &start.to_string()]) else {
            println!("no python3: the checked-in vectors above are the comparison");
            return;
        };
        assert_eq!(py, rust_words(config_name, name, start, py.len()), "{config_name} {name}");
        assert_eq!(py.len(), 16, "the script's default count");
    }
}

/// The words `benches/torch/qwen_weights.py ARGS` prints, or None without a python3.
fn python_words(args: &[&str]) -> Option<Vec<u16>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/torch/qwen_weights.py");
    let out = std::process::Command::new("python3").arg(script).args(args).output().ok()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("the script prints ASCII");
    Some(text.lines().map(|l| u16::from_str_radix(l.trim_start_matches("0x"), 16).expect("a hex word")).collect())
}
