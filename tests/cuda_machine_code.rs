//! The CUDA C++ module loaded as a GPU loads it — machine code, constant banks, the data image and the
//! printf library — on a platform that says it runs machine code (the simulator's services behind it, so
//! nothing is launched): what the session's load checks accept is what the H200 gets. This binary holds
//! one test, since it installs that platform as the process's own.

mod common;

use common::Forwarding;
use omega::kernels::{self, MIXED, MIXED_PLAIN, MIXED_PRINTF};
use omega::Error;
use omega_hal::sim::Sim;

#[test]
fn a_module_loads_as_machine_code_with_its_banks_in_the_code_buffer_and_its_data_apart() {
    let cubin = kernels::cuda_module(MIXED).expect("CI installs the pinned nvcc set");
    let sim = Sim::new();
    let lock = omega::lock();
    // The simulator's services under a platform whose code format is the default one, machine code.
    omega::session::runtime().install(Forwarding::new(sim.clone()).installed()).unwrap();
    let dev = lock.open().expect("open");
    let r = dev.scope(|s, _gpu| -> Result<(), Error> {
        let module = s.load_module(cubin)?;
        let plain = module.kernel(MIXED_PLAIN)?;
        let code = plain.code();
        let (code_start, code_end) = (code.va(), code.va() + code.len() as u64);
        // Registered, so the session found every bank inside the code buffer of the entry; so they are.
        assert!(!plain.meta().const_banks.is_empty(), "mixed_plain reads __constant__ data");
        for b in &plain.meta().const_banks {
            assert!(b.va >= code_start && b.va + u64::from(b.bytes) <= code_end, "bank {} at {:#x}", b.index, b.va);
        }
        assert!(plain.meta().code_bytes > 0 && plain.meta().code_bytes < code.len() as u64);
        // The __device__ data is in a buffer of its own, which the host reads and writes.
        let init = module.symbol_va("mixed_init").expect("a data object");
        assert!(init < code_start || init >= code_end, "not in the code buffer");
        let mut bytes = [0u8; 16];
        module.read_global("mixed_init", &mut bytes)?;
        let words: Vec<i32> = bytes.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(words, kernels::MIXED_INIT);
        // The printf kernel links against the printf library, loaded into a code buffer of its own: the
        // launch gets the registers and stack of both.
        let printf = module.kernel(MIXED_PRINTF)?;
        assert!(printf.meta().printf);
        let lib = omega_hal::cubin::Module::parse(kernels::device_library("printf").unwrap(), &omega_hal::arch::HOPPER)
            .unwrap();
        let vprintf = lib.function("omega_vprintf").unwrap();
        assert!(printf.meta().registers >= vprintf.registers);
        assert!(printf.meta().local_bytes_per_thread > 0);
        Ok(())
    });
    let (_dev, r) = r.into_open().expect("no latch");
    r.unwrap();
}
