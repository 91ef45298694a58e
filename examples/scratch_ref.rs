use omega::libs::serving::qwen3::{Qwen3Config, Reference};
fn main() {
    let batch: u32 = std::env::args().nth(1).map_or(1, |s| s.parse().unwrap());
    let cfg = Qwen3Config::FULL.with_layers(2);
    let mut r = Reference::generated(cfg, batch);
    let mut tokens: Vec<u32> = (0..batch).map(|b| (17 + 389 * b) % cfg.vocab).collect();
    for i in 0..16 {
        let l = r.step(&tokens);
        let v = cfg.vocab as usize;
        let rows: Vec<String> =
            l.chunks(v).map(|row| row[..64].iter().map(|x| format!("{x:e}")).collect::<Vec<_>>().join(",")).collect();
        println!("{i} {:?} {}", r.tokens(), rows.join(";"));
        tokens = r.tokens();
    }
}
