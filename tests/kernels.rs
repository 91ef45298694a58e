//! The repository's kernels: each cubin parses for sm_90, and the simulator's hand-written parameter
//! tables agree with the cubins' own (KPARAM_INFO), so a kernel checked on `sim` is checked like on a GPU.

use omega_hal::nvidia::{arch, cubin::Module};

#[test]
fn every_kernel_has_a_cubin_and_a_host_reference_with_the_same_parameters() {
    let ptxas = omega::kernels::ptxas();
    assert!(ptxas.is_ok(), "CI installs ptxas; the build said: {:?}", ptxas);
    assert!(!omega::kernels::names().is_empty());
    for name in omega::kernels::names() {
        let spec = omega::kernels::host_spec(name).unwrap_or_else(|| panic!("`{name}` has no host reference"));
        let cubin = omega::kernels::sm90_cubin(name).unwrap();
        let module = Module::parse(cubin, &arch::HOPPER).unwrap_or_else(|e| panic!("{name}: {e}"));
        let k = module.kernel(name).unwrap();
        let from_cubin: Vec<(u32, u32, u32)> = k.params.iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
        let by_hand: Vec<(u32, u32, u32)> = spec.params().iter().map(|p| (p.ordinal, p.offset, p.size)).collect();
        assert_eq!(from_cubin, by_hand, "{name}: parameter tables differ");
        assert_eq!(k.local_bytes_per_thread > 0, spec.local_bytes_per_thread > 0, "{name}: stack use differs");
        assert!(omega::kernels::ptx_source(name).unwrap().contains(&format!(".entry {name}(")));
    }
}

#[test]
fn a_cubin_for_another_architecture_is_refused_by_name() {
    let cubin = omega::kernels::sm90_cubin("vector_add").unwrap();
    let e = Module::parse(cubin, &arch::BLACKWELL_GB10).unwrap_err();
    assert!(e.to_string().contains("90"), "{e}");
}
