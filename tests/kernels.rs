//! The repository's kernels: each cubin parses for sm_90, and the simulator's hand-written parameter
//! tables agree with the cubins' own (KPARAM_INFO), so a kernel checked on `sim` is checked like on a GPU.

use omega_hal::{arch, cubin::Module};

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
    assert!(matches!(e, omega_hal::cubin::CubinError::ForeignArch { found: 90, .. }), "{e}");
}

#[test]
fn module_data_binds_its_constant_table_and_the_relocated_address_of_its_counter() {
    let cubin = omega::kernels::sm90_cubin("module_data").unwrap();
    let module = Module::parse(cubin, &arch::HOPPER).unwrap();
    let k = module.kernel("module_data").unwrap();
    let bank = |i: u32| *k.const_banks.iter().find(|b| b.index == i).unwrap_or_else(|| panic!("no bank {i}"));
    let (table, addresses) = (bank(3), bank(4));
    assert_eq!(k.const_banks.len(), 2, "{:?}", k.const_banks);
    // Any 128-byte aligned load addresses; the banks must come out where the launch will point the QMD.
    let (va, data_va) = (0x7f_1234_5680u64, 0x7f_2000_0000u64);
    let r = module.relocate(va, data_va, &|_| None).unwrap();
    let at = |off: u64, len: usize| &r.image[off as usize..off as usize + len];
    assert_eq!(table.bytes, 64);
    let words: Vec<u32> = at(table.offset, 64).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words, omega::kernels::MODULE_DATA_TABLE, "bank 3 holds the __constant__ table");
    assert_eq!(addresses.bytes, 8);
    let counter_va = u64::from_le_bytes(at(addresses.offset, 8).try_into().unwrap());
    assert!(
        counter_va >= data_va && counter_va + 4 <= data_va + r.data.len() as u64,
        "bank 4 points into the data image: {counter_va:#x}"
    );
    let counter = u32::from_le_bytes(r.data[(counter_va - data_va) as usize..][..4].try_into().unwrap());
    assert_eq!(counter, omega::kernels::MODULE_DATA_COUNTER, "bank 4 holds the counter's address");
    // Both banks must be addressable by a QMD (64-byte aligned once the image is).
    assert!(table.offset.is_multiple_of(64) && addresses.offset.is_multiple_of(64));
    // Every other repository kernel binds nothing beyond bank 0.
    for name in omega::kernels::names().iter().filter(|n| **n != "module_data") {
        let m = Module::parse(omega::kernels::sm90_cubin(name).unwrap(), &arch::HOPPER).unwrap();
        assert!(m.kernel(name).unwrap().const_banks.is_empty(), "{name}");
    }
}
