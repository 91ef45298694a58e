// Placeholder until the PTX pipeline lands: no cubins.
fn main() {
    let out = std::env::var("OUT_DIR").unwrap();
    std::fs::write(
        format!("{out}/cubins.rs"),
        "pub(crate) const PTXAS: Result<&str, &str> = Err(\"ptxas not found\");\n\
         pub(crate) fn cubin(_name: &str) -> Result<&'static [u8], &'static str> { Err(\"ptxas not found\") }\n\
         pub(crate) const KERNEL_NAMES: &[&str] = &[];\n\
         pub(crate) fn ptx(_name: &str) -> Option<&'static str> { None }\n",
    )
    .unwrap();
}
