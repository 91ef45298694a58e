//! The cubin loader against real ptxas and nvcc output (hal/tests/fixtures/, rebuilt by its build.sh).
//!
//! Expected values come from sources independent of the loader: parameter offsets from the PTX
//! signatures (laid out by PTX's alignment rules here), registers / barriers / shared memory / stack from
//! the `ptxas -v` logs recorded beside the cubins (ptxas-v.txt, nvcc-v.txt), relocated addresses from
//! what the sources initialise (`table_ptr = generic(counter)`, `mixed_init = {3, 1, 4, 1}`), and the
//! call-target bits from what nvdisasm decodes.
//!
//! The loader and the architecture table belong to no backend, so these run on every platform and build;
//! only the last test, which hands a parsed kernel to the nvidia backend's QMD encoder, needs that backend.

use std::collections::HashMap;
use std::path::Path;

use omega_hal::arch::{Arch, BLACKWELL_GB10, HOPPER};
use omega_hal::cubin::{
    section_file_range, CompatValue, CubinError, ElfType, ExternalFunction, Module, RelocKind, RelocTarget, Segment,
    CODE_SLACK_BYTES, EICOMPAT_ISA_CLASS, IMAGE_ALIGN,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// What `ptxas -v` said about one function.
#[derive(Debug, Default, Clone, Copy)]
struct PtxasFacts {
    registers: u32,
    barriers: u32,
    smem: u32,
    stack_frame: u32,
}

/// A `-v` log (ptxas-v.txt, nvcc-v.txt): `== <cubin> (...)` headers, then per function "Compiling entry
/// function 'f'" or "Function properties for f", a "N bytes stack frame" line and (for entries) a "Used N
/// registers, used N barriers[, N bytes smem]" line.
fn tool_facts(log: &str) -> HashMap<(String, String), PtxasFacts> {
    let mut out = HashMap::new();
    let (mut cubin, mut function) = (String::new(), String::new());
    for line in fixture_text(log).lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            cubin = rest.split_whitespace().next().unwrap().to_string();
            function.clear();
        } else if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            function = rest.split('\'').next().unwrap().to_string();
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            function = rest.trim().to_string();
        } else if line.contains("bytes stack frame") {
            let n = line.split_whitespace().next().unwrap().parse().unwrap();
            out.entry((cubin.clone(), function.clone())).or_insert_with(PtxasFacts::default).stack_frame = n;
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let f = out.entry((cubin.clone(), function.clone())).or_insert_with(PtxasFacts::default);
            let words: Vec<&str> = rest.split([' ', ',']).filter(|w| !w.is_empty()).collect();
            for pair in words.windows(2) {
                let n = pair[0].parse::<u32>();
                match (n, pair[1]) {
                    (Ok(n), "registers") => f.registers = n,
                    (Ok(n), "barriers") => f.barriers = n,
                    (Ok(n), "bytes") => f.smem = n,
                    _ => {}
                }
            }
        }
    }
    out
}

fn facts(cubin: &str, function: &str) -> PtxasFacts {
    let log = if cubin.contains("sm_90a") { "nvcc-v.txt" } else { "ptxas-v.txt" };
    *tool_facts(log)
        .get(&(cubin.into(), function.into()))
        .unwrap_or_else(|| panic!("no -v facts for {cubin} {function}"))
}

/// (offset, size, declared alignment) of each parameter of `.entry name(...)` in a PTX file, laid out
/// as PTX does: each parameter at the next multiple of its alignment.
fn ptx_param_layout(ptx: &str, entry: &str) -> Vec<(u32, u32, u32)> {
    let start = ptx.find(&format!(".entry {entry}(")).unwrap_or_else(|| panic!("no .entry {entry}"));
    let signature = &ptx[start..start + ptx[start..].find(')').unwrap()];
    let mut offset = 0u32;
    let mut out = Vec::new();
    for decl in signature.lines().filter_map(|l| l.trim().strip_prefix(".param")) {
        let words: Vec<&str> = decl.trim().trim_end_matches(',').split_whitespace().collect();
        let (mut align, mut size) = (0, 0);
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                ".align" => {
                    align = words[i + 1].parse().unwrap();
                    i += 1;
                }
                ".u8" | ".s8" | ".b8" => size = 1,
                ".u16" | ".s16" | ".b16" => size = 2,
                ".u32" | ".s32" | ".b32" | ".f32" => size = 4,
                ".u64" | ".s64" | ".b64" | ".f64" => size = 8,
                name => {
                    if let Some(count) = name.split('[').nth(1) {
                        size *= count.trim_end_matches(']').parse::<u32>().unwrap();
                    }
                }
            }
            i += 1;
        }
        if align == 0 {
            align = size;
        }
        offset = offset.next_multiple_of(align);
        out.push((offset, size, align));
        offset += size;
    }
    out
}

fn parse(name: &str, arch: &Arch) -> Module {
    Module::parse(&fixture(name), arch).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn vector_add_sm90() {
    let m = parse("vector_add.sm_90.cubin", &HOPPER);
    assert_eq!(m.sm, 90);
    assert_eq!(m.kernels.len(), 1);
    let k = m.kernel("vector_add").unwrap();
    let f = facts("vector_add.sm_90.cubin", "vector_add");
    assert_eq!(k.registers, f.registers);
    assert_eq!(k.barriers, f.barriers);
    let layout = ptx_param_layout(&fixture_text("vector_add.ptx"), "vector_add");
    assert_eq!(
        k.params.iter().map(|p| (p.offset, p.size)).collect::<Vec<_>>(),
        layout.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>()
    );
    assert_eq!(k.params.iter().map(|p| p.ordinal).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(k.param_bytes, 28);
    assert_eq!(k.param_base, 0x210);
    assert_eq!(k.cbuf0_bytes, 0x210 + 28);
    assert_eq!(k.shared_bytes, 0x400, "no .nv.shared section: the reserved 1 KiB");
    assert_eq!((k.stack_bytes, k.local_bytes_per_thread), (0, 0));
    assert_eq!((k.max_threads, k.max_block, k.required_block), (None, None, None));
    assert!(k.const_banks.is_empty());
    assert!(m.relocations().is_empty(), "only .debug_frame has relocations, and it is not loaded");
    // The image is the code alone: constant bank 0's zeros and the debug sections stay out.
    let text = section_file_range(&fixture("vector_add.sm_90.cubin"), ".text.vector_add").unwrap();
    assert_eq!(k.code_offset % IMAGE_ALIGN, 0);
    assert_eq!(k.code_bytes, text.len() as u64);
    assert_eq!(m.image.len() as u64, k.code_bytes.next_multiple_of(IMAGE_ALIGN));
    let code = &fixture("vector_add.sm_90.cubin")[text];
    assert_eq!(&m.image[k.code_offset as usize..][..code.len()], code);
    assert!(!k.exit_offsets.is_empty());
    assert!(k.exit_offsets.iter().all(|&o| o % 16 == 0 && u64::from(o) < k.code_bytes));
    assert_eq!(m.alloc_bytes(), 4096 + CODE_SLACK_BYTES);
    assert!(m.data.is_empty() && m.undefined.is_empty() && m.symbols.is_empty());
    assert_eq!((k.externs.len(), k.local, k.explicit_cluster, k.reg_reconfig), (0, false, false, false));
    // No relocations: relocating changes nothing.
    let r = m.relocate(0x10_0000_0000, 0, &|_| None).unwrap();
    assert_eq!((r.image, r.unresolved), (m.image.clone(), vec![]));
}

#[test]
fn blackwell_cubin_is_an_entry_not_a_rewrite() {
    let m = parse("vector_add.sm_121.cubin", &BLACKWELL_GB10);
    assert_eq!(m.sm, 121);
    let k = m.kernel("vector_add").unwrap();
    assert_eq!(k.param_base, 0x380, "PARAM_CBANK of an sm_121 cubin");
    assert_eq!(k.cbuf0_bytes, 0x380 + 28);
    let layout = ptx_param_layout(&fixture_text("vector_add.ptx"), "vector_add");
    assert_eq!(k.params.iter().map(|p| p.offset).collect::<Vec<_>>(), layout.iter().map(|l| l.0).collect::<Vec<_>>());
    assert_eq!(k.registers, facts("vector_add.sm_121.cubin", "vector_add").registers);
    assert_eq!(
        Module::parse(&fixture("vector_add.sm_121.cubin"), &HOPPER),
        Err(CubinError::ForeignArch { found: 121, wanted: 90 })
    );
}

#[test]
fn foreign_arch_is_refused_by_name() {
    let e = Module::parse(&fixture("vector_add.sm_80.cubin"), &HOPPER).unwrap_err();
    assert_eq!(e, CubinError::ForeignArch { found: 80, wanted: 90 });
    assert_eq!(e.to_string(), "cubin is for sm_80, the device wants sm_90");
    assert_eq!(omega_hal::cubin::cubin_sm(&fixture("vector_add.sm_80.cubin")), Ok(80));
}

#[test]
fn static_and_dynamic_shared_memory_barriers_and_launch_bounds() {
    let m = parse("shared_bar.sm_90.cubin", &HOPPER);
    assert_eq!(m.kernels.len(), 2);
    let r = m.kernel("shared_reverse").unwrap();
    let f = facts("shared_bar.sm_90.cubin", "shared_reverse");
    assert_eq!(f.smem, 1024);
    assert_eq!(r.shared_bytes, 0x400 + f.smem, ".nv.shared.<fn> includes the reserved 1 KiB");
    assert_eq!((r.barriers, f.barriers), (1, 1));
    assert_eq!(r.registers, f.registers);
    assert_eq!((r.max_block, r.required_block, r.max_threads), (Some([256, 1, 1]), None, Some(256)));
    let b = m.kernel("fixed_block").unwrap();
    let f = facts("shared_bar.sm_90.cubin", "fixed_block");
    assert_eq!(b.shared_bytes, 0x400 + f.smem);
    assert_eq!((b.barriers, f.barriers), (0, 0));
    assert_eq!((b.max_block, b.required_block, b.max_threads), (None, Some([64, 1, 1]), Some(64)));
    assert_ne!(r.code_offset, b.code_offset);
    assert_eq!(r.code_offset % IMAGE_ALIGN, 0);
    assert_eq!(b.code_offset % IMAGE_ALIGN, 0);
}

#[test]
fn local_memory_is_the_stack_plus_headroom() {
    let m = parse("local_array.sm_90.cubin", &HOPPER);
    let k = m.kernel("local_array").unwrap();
    let f = facts("local_array.sm_90.cubin", "local_array");
    assert_eq!(f.stack_frame, 256);
    assert_eq!(k.stack_bytes, f.stack_frame);
    assert_eq!(k.local_bytes_per_thread, (f.stack_frame + 0x240).next_multiple_of(32));
    assert_eq!(k.registers, f.registers);
}

#[test]
fn mixed_parameters_follow_the_ptx_layout() {
    let m = parse("params.sm_90.cubin", &HOPPER);
    let k = m.kernel("mixed_params").unwrap();
    let layout = ptx_param_layout(&fixture_text("params.ptx"), "mixed_params");
    assert_eq!(layout.len(), 6);
    assert_eq!(k.params.len(), layout.len());
    for (p, &(offset, size, declared_align)) in k.params.iter().zip(&layout) {
        assert_eq!((p.offset, p.size), (offset, size), "parameter {}", p.ordinal);
        // The inferred alignment is an upper bound of the declared one that the offset honours.
        assert!(p.align >= declared_align && p.offset % p.align == 0, "{p:?} vs declared {declared_align}");
    }
    let (last_offset, last_size, _) = layout[layout.len() - 1];
    assert_eq!(k.param_bytes, last_offset + last_size);
    assert_eq!(k.params[2].align, 16, "the .align 16 struct");
}

#[test]
fn module_data_constant_banks_and_relocations() {
    let bytes = fixture("global_ref.sm_90.cubin");
    let m = parse("global_ref.sm_90.cubin", &HOPPER);
    let names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"bump") && names.contains(&"peek"));
    for k in &m.kernels {
        assert_eq!(k.registers, facts("global_ref.sm_90.cubin", &k.name).registers);
        assert_eq!(k.const_banks, m.const_banks, "module-wide banks are every kernel's");
    }
    let bank = |i: u32| *m.const_banks.iter().find(|b| b.index == i).unwrap_or_else(|| panic!("no bank {i}"));
    // Bank 3 is the `.const` table {10, 20, 30, 40}, in the code image.
    let b3 = bank(3);
    let lut: Vec<u32> =
        m.image[b3.offset as usize..][..16].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(lut, [10, 20, 30, 40]);
    assert_eq!(b3.offset % 64, 0, "constant banks need 64-byte alignment");
    assert_eq!(m.symbol("lut").map(|s| (s.segment, s.offset, s.bytes)), Some((Segment::Code, b3.offset, 16)));
    // The `__device__` data is the data image (the GPU writes `counter`: it cannot be in the code buffer).
    let counter = m.symbol("counter").unwrap().clone();
    let table_ptr = m.symbol("table_ptr").unwrap().clone();
    assert_eq!(
        (counter.segment, counter.bytes, table_ptr.segment, table_ptr.bytes),
        (Segment::Data, 4, Segment::Data, 8)
    );
    // Bank 4 holds the addresses of `counter` and `table_ptr`, patched by R_CUDA_64.
    let b4 = bank(4);
    assert_eq!(b4.bytes, 16);
    let kinds: Vec<RelocKind> = m.relocations().iter().map(|r| r.kind).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == RelocKind::Abs64).count(), 2);
    assert_eq!(kinds.iter().filter(|&&k| k == RelocKind::Generic64).count(), 1);

    let word = |image: &[u8], at: u64| u64::from_le_bytes(image[at as usize..][..8].try_into().unwrap());
    let (va, data_va) = (0x10_0000_0000, 0x20_0000_0000);
    let r = m.relocate(va, data_va, &|_| None).unwrap();
    let (counter_va, table_ptr_va) = (word(&r.image, b4.offset), word(&r.image, b4.offset + 8));
    // Which slot holds which is ptxas's choice; both point into the data image, at the two symbols.
    let mut slots = [counter_va, table_ptr_va];
    slots.sort();
    let mut symbols = [data_va + counter.offset, data_va + table_ptr.offset];
    symbols.sort();
    assert_eq!(slots, symbols);
    // `table_ptr = generic(counter)`: the initialised global holds counter's address.
    assert_eq!(word(&r.data, table_ptr.offset), data_va + counter.offset);
    // `counter` is uninitialised (.nv.global, NOBITS): zeroed room in the data image.
    assert_eq!(&r.data[counter.offset as usize..][..4], &[0; 4]);
    // Loading elsewhere moves every patched address by the same amount, and nothing else.
    let moved = m.relocate(va + 0x1_0000, data_va + 0x2_0000, &|_| None).unwrap();
    assert_eq!(word(&moved.image, b4.offset), counter_va + 0x2_0000);
    for (segment, before, after) in [(Segment::Code, &r.image, &moved.image), (Segment::Data, &r.data, &moved.data)] {
        let patched: Vec<u64> = m.relocations().iter().filter(|p| p.segment == segment).map(|p| p.offset).collect();
        for (i, (a, b)) in before.iter().zip(after.iter()).enumerate() {
            if a != b {
                assert!(
                    patched.iter().any(|&p| (p..p + 8).contains(&(i as u64))),
                    "byte {i} changed but is not patched"
                );
            }
        }
    }
    // The code is untouched: addresses reach it through bank 4.
    let peek = m.kernel("peek").unwrap();
    let text = section_file_range(&bytes, ".text.peek").unwrap();
    assert_eq!(&r.image[peek.code_offset as usize..][..text.len()], &bytes[text]);

    assert_eq!(m.relocate(va + 64, data_va, &|_| None), Err(CubinError::MisalignedImage { va: va + 64, align: 128 }));
    assert_eq!(
        m.relocate(va, data_va + 8, &|_| None),
        Err(CubinError::MisalignedImage { va: data_va + 8, align: 128 })
    );
    let top = !(IMAGE_ALIGN - 1);
    assert!(matches!(m.relocate(va, top, &|_| None), Err(CubinError::AddressOverflow { .. })));
}

/// The entries of `.rela.nv.constant4` in the file: (file offset of r_info, r_offset).
fn constant4_relocations(bytes: &[u8]) -> Vec<(usize, u64)> {
    let rela = section_file_range(bytes, ".rela.nv.constant4").unwrap();
    (rela.start..rela.end)
        .step_by(24)
        .map(|at| (at + 8, u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())))
        .collect()
}

#[test]
fn instruction_half_relocations_patch_bytes_4_to_8() {
    let mut bytes = fixture("global_ref.sm_90.cubin");
    let entries = constant4_relocations(&bytes);
    assert_eq!(entries.len(), 2);
    let original = Module::parse(&bytes, &HOPPER).unwrap();
    let full = original.relocate(0x7f_1234_5600, 0x7f_0000_0000, &|_| None).unwrap().image;
    for (&(info_at, _), kind) in entries.iter().zip([0x38u8, 0x39]) {
        bytes[info_at] = kind;
    }
    let m = Module::parse(&bytes, &HOPPER).unwrap();
    let halves = m.relocate(0x7f_1234_5600, 0x7f_0000_0000, &|_| None).unwrap().image;
    let b4 = m.const_banks.iter().find(|b| b.index == 4).unwrap().offset as usize;
    for &(_, r_offset) in &entries {
        let at = b4 + r_offset as usize;
        let address = u64::from_le_bytes(full[at..at + 8].try_into().unwrap());
        let kind = m.relocations().iter().find(|r| r.offset == (b4 + r_offset as usize) as u64).unwrap().kind;
        let expected = match kind {
            RelocKind::Lo32InInstruction => address as u32,
            RelocKind::Hi32InInstruction => (address >> 32) as u32,
            other => panic!("{other:?}"),
        };
        assert_eq!(&halves[at..at + 4], &[0; 4], "bytes 0..4 untouched");
        assert_eq!(u32::from_le_bytes(halves[at + 4..at + 8].try_into().unwrap()), expected);
    }
}

#[test]
fn an_unknown_relocation_type_is_refused_by_name() {
    let mut bytes = fixture("global_ref.sm_90.cubin");
    let (info_at, _) = constant4_relocations(&bytes)[0];
    bytes[info_at] = 0x2a;
    assert_eq!(
        Module::parse(&bytes, &HOPPER),
        Err(CubinError::UnknownRelocation { kind: 0x2a, section: ".rela.nv.constant4".into() })
    );
}

#[test]
fn truncated_files_name_what_is_missing() {
    let bytes = fixture("vector_add.sm_90.cubin");
    assert_eq!(Module::parse(&bytes[..40], &HOPPER), Err(CubinError::Truncated { what: "the ELF header".into() }));
    // Cut inside the section header table (it sits after the sections, before the program headers).
    let shoff = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    assert!(shoff + 3 * 64 < bytes.len());
    let e = Module::parse(&bytes[..shoff + 3 * 64], &HOPPER).unwrap_err();
    assert_eq!(e, CubinError::Truncated { what: "the section header table".into() });
    // Keep the headers but move the code past the end of the file.
    let mut moved = bytes.clone();
    let text_header = section_header(&moved, ".text.vector_add");
    moved[text_header + 24..text_header + 32].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    assert_eq!(Module::parse(&moved, &HOPPER), Err(CubinError::Truncated { what: "section .text.vector_add".into() }));
}

/// File offset of the section header of `name`.
fn section_header(bytes: &[u8], name: &str) -> usize {
    let data = section_file_range(bytes, name).unwrap();
    let shoff = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(bytes[60..62].try_into().unwrap()) as usize;
    (0..shnum)
        .map(|i| shoff + 64 * i)
        .find(|&h| {
            u64::from_le_bytes(bytes[h + 24..h + 32].try_into().unwrap()) == data.start as u64
                && u64::from_le_bytes(bytes[h + 32..h + 40].try_into().unwrap()) == data.len() as u64
        })
        .unwrap()
}

#[test]
fn not_a_cuda_elf() {
    let bytes = fixture("vector_add.sm_90.cubin");
    assert_eq!(Module::parse(b"#!/bin/sh\n", &HOPPER), Err(CubinError::NotElf));
    let mut x86 = bytes.clone();
    x86[18..20].copy_from_slice(&62u16.to_le_bytes());
    assert_eq!(Module::parse(&x86, &HOPPER), Err(CubinError::WrongMachine { found: 62 }));
    let mut elf32 = bytes.clone();
    elf32[4] = 1;
    assert!(matches!(Module::parse(&elf32, &HOPPER), Err(CubinError::UnsupportedElf { .. })));
    let mut shared_object = bytes.clone();
    shared_object[16] = 3;
    assert!(matches!(Module::parse(&shared_object, &HOPPER), Err(CubinError::UnsupportedElf { .. })));
}

#[test]
fn corrupt_kernel_info_is_reported_with_its_section() {
    let mut bytes = fixture("vector_add.sm_90.cubin");
    let info = section_file_range(&bytes, ".nv.info.vector_add").unwrap();
    bytes[info.start] = 9;
    assert_eq!(
        Module::parse(&bytes, &HOPPER),
        Err(CubinError::BadNvInfo { section: ".nv.info.vector_add".into(), offset: 0, why: "unknown record format" })
    );
}

#[test]
fn unknown_kernel_names_are_an_error() {
    let m = parse("vector_add.sm_90.cubin", &HOPPER);
    let e = m.kernel("vector_sub").unwrap_err();
    assert_eq!(e, CubinError::NoSuchKernel { name: "vector_sub".into(), known: vec!["vector_add".into()] });
    assert_eq!(e.to_string(), "no kernel named vector_sub in the module (its kernels: vector_add)");
}

#[cfg(all(target_os = "linux", feature = "nvidia"))]
#[test]
fn a_qmd_from_a_parsed_kernel() {
    use omega_hal::nvidia::qmd::{self, QmdParams};

    let m = parse("shared_bar.sm_90.cubin", &HOPPER);
    let k = m.kernel("shared_reverse").unwrap();
    let image_va = 0x10_0000_0000;
    let p = QmdParams {
        program_va: image_va + k.code_offset,
        program_bytes: k.code_bytes,
        registers: k.registers.next_multiple_of(8),
        block: [256, 1, 1],
        grid: [4, 1, 1],
        shared_bytes: k.shared_bytes + 256 * 4,
        local_bytes_per_thread: k.local_bytes_per_thread,
        barrier_count: k.barriers,
        features: omega_hal::LaunchFeatures::NONE,
        cbuf0_va: 0x10_0001_0000,
        cbuf0_bytes: k.param_base + k.param_bytes,
        release0: Some((0x10_0002_0000, 1)),
        release1: None,
        dependent: None,
    };
    let d = qmd::decode(&HOPPER, &qmd::encode(&HOPPER, &p).unwrap());
    assert_eq!(d.program_va % 128, 0);
    assert_eq!(d.program_va, image_va + k.code_offset);
    assert_eq!(d.shared_bytes, 0x800 + 0x400);
    assert_eq!(d.barriers, 1);
    assert_eq!(d.registers, 16);
    assert_eq!(d.cbuf0.1, 0x220);
}

// ----- nvcc output: CUDA C++ modules (kernels/cuda/mixed.cu, fixtures/*.cu) ------------------------------

/// Omega's vprintf as the loader's resolver describes it (registers and stack of the printf library).
fn vprintf_needs() -> ExternalFunction {
    let lib = parse("printf_lib.sm_90a.cubin", &HOPPER);
    let f = lib.function("omega_vprintf").unwrap();
    ExternalFunction { registers: f.registers, stack_bytes: f.stack_bytes }
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn an_nvcc_module_with_plain_printf_and_template_kernels_and_module_data() {
    const CUBIN: &str = "mixed.sm_90a.cubin";
    let m = parse(CUBIN, &HOPPER);
    assert_eq!(m.sm, 90, "sm_90a is sm 90 in e_flags");
    assert_eq!(m.elf_type, ElfType::Executable);
    let mut names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "_Z10mixed_fillILi7EEvPij",
            "_Z10mixed_fillILin3EEvPij",
            "_Z11mixed_scaleIfEvPT_S0_j",
            "_Z11mixed_scaleIiEvPT_S0_j",
            "mixed_counter",
            "mixed_plain",
            "mixed_printf"
        ]
    );
    for k in &m.kernels {
        let f = facts(CUBIN, &k.name);
        assert_eq!((k.registers, k.barriers), (f.registers, f.barriers), "{}", k.name);
        assert_eq!(k.frame_bytes, f.stack_frame, "{}", k.name);
        assert_eq!(k.code_offset % IMAGE_ALIGN, 0);
        // `static` templates have internal linkage: LOCAL entry symbols, loaded by their mangled names.
        assert_eq!(k.local, k.name.starts_with("_Z10mixed_fill"), "{}", k.name);
    }
    let scale = m.kernel("_Z11mixed_scaleIfEvPT_S0_j").unwrap();
    assert_eq!(scale.params.iter().map(|p| (p.offset, p.size)).collect::<Vec<_>>(), [(0, 8), (8, 4), (12, 4)]);

    // Only the printf kernel needs the undefined vprintf.
    assert_eq!(m.undefined, ["vprintf"]);
    for k in &m.kernels {
        let expected: &[&str] = if k.name == "mixed_printf" { &["vprintf"] } else { &[] };
        assert_eq!(k.externs, expected, "{}", k.name);
    }

    // Module data: the __constant__ table in bank 3 of the code image; the initialised and the zeroed
    // __device__ data, and the string literals, in the data image.
    let table = m.symbol("mixed_table").unwrap();
    assert_eq!((table.segment, table.bytes), (Segment::Code, 32));
    let floats: Vec<f32> = u32s(&m.image[table.offset as usize..][..32]).into_iter().map(f32::from_bits).collect();
    assert_eq!(floats, [1.0, -2.0, 0.5, 4.0, 0.25, -8.0, 3.0, 10.0]);
    let init = m.symbol("mixed_init").unwrap();
    assert_eq!(init.segment, Segment::Data);
    assert_eq!(u32s(&m.data[init.offset as usize..][..16]), [3, 1, 4, 1]);
    let count = m.symbol("mixed_count").unwrap();
    assert_eq!((count.segment, &m.data[count.offset as usize..][..4]), (Segment::Data, &[0u8; 4][..]));
    let strings: Vec<String> = m
        .symbols
        .iter()
        .filter(|s| s.name.starts_with("$str"))
        .map(|s| {
            assert_eq!(s.segment, Segment::Data);
            let b = &m.data[s.offset as usize..][..s.bytes as usize];
            String::from_utf8(b[..b.len() - 1].to_vec()).unwrap()
        })
        .collect();
    assert!(strings.iter().any(|s| s.starts_with("t=%u j=%u d=%d") && s.ends_with("%5d%%\n")), "{strings:?}");
    assert!(strings.contains(&"omega".to_string()) && strings.contains(&"kernel".to_string()));

    // Relocation: the vprintf slot gets what the resolver says; without it the slot stays zero and the
    // symbol is reported, while every other patch is applied.
    let vprintf_slot = m
        .relocations()
        .iter()
        .find(|r| matches!(&r.target, RelocTarget::External { symbol, .. } if symbol == "vprintf"))
        .expect("a relocation for vprintf")
        .clone();
    assert_eq!((vprintf_slot.segment, vprintf_slot.kind), (Segment::Code, RelocKind::Abs64));
    let (va, data_va, vprintf_va) = (0x10_0000_0000u64, 0x10_0010_0000u64, 0x10_0200_0080u64);
    let slot = |image: &[u8]| u64::from_le_bytes(image[vprintf_slot.offset as usize..][..8].try_into().unwrap());
    let linked = m.relocate(va, data_va, &|s| (s == "vprintf").then_some(vprintf_va)).unwrap();
    assert_eq!((slot(&linked.image), linked.unresolved.len()), (vprintf_va, 0));
    let unlinked = m.relocate(va, data_va, &|_| None).unwrap();
    assert_eq!((slot(&unlinked.image), unlinked.unresolved), (0, vec!["vprintf".to_string()]));
    let differing = linked.image.iter().zip(&unlinked.image).filter(|(a, b)| a != b).count();
    assert!(differing <= 8, "only the vprintf slot differs ({differing} bytes)");

    // Linking: the printf kernel runs with vprintf's registers and its stack plus vprintf's; without
    // vprintf it is refused, naming the symbol, and its neighbours link alike either way.
    let printf_kernel = m.kernel("mixed_printf").unwrap();
    let v = vprintf_needs();
    let l = m.link(printf_kernel, &HOPPER, &|s| (s == "vprintf").then_some(v)).unwrap();
    assert_eq!(l.registers, printf_kernel.registers.max(v.registers));
    assert_eq!(l.stack_bytes, facts(CUBIN, "mixed_printf").stack_frame + v.stack_bytes);
    assert_eq!(l.local_bytes_per_thread, HOPPER.local_bytes_for_stack(l.stack_bytes));
    assert_eq!(
        m.link(printf_kernel, &HOPPER, &|_| None),
        Err(CubinError::UnresolvedSymbol { kernel: "mixed_printf".into(), symbol: "vprintf".into() })
    );
    for k in m.kernels.iter().filter(|k| k.name != "mixed_printf") {
        let l = m.link(k, &HOPPER, &|_| None).unwrap();
        assert_eq!((l.registers, l.stack_bytes), (k.registers, 0), "{}", k.name);
    }
}

#[test]
fn the_printf_library_is_a_relocatable_function_with_its_buffer_left_to_the_loader() {
    const CUBIN: &str = "printf_lib.sm_90a.cubin";
    let m = parse(CUBIN, &HOPPER);
    assert_eq!(m.elf_type, ElfType::Relocatable);
    assert!(m.kernels.is_empty() && m.data.is_empty() && m.const_banks.is_empty());
    let f = m.function("omega_vprintf").unwrap();
    assert_eq!(f.code_offset % IMAGE_ALIGN, 0);
    // Its frame holds the callee-saved registers it saves: the stack a printf kernel adds.
    let frame = facts(CUBIN, "omega_vprintf").stack_frame;
    assert!(frame > 0);
    assert_eq!((f.frame_bytes, f.stack_bytes), (frame, frame));
    // Kernels keep their values in R32 and up across a vprintf call ("syscall" convention): the library
    // must not use a register from R32 on (REGCOUNT is the highest register used, plus one or two).
    assert!(f.registers > 0 && f.registers <= 32, "{}", f.registers);
    assert_eq!(f.externs, ["omega_printf_buffer"]);
    assert_eq!(m.undefined, ["omega_printf_buffer"]);
    // The buffer's address goes into two MOV immediates (bytes 4..8 of each instruction).
    let halves: Vec<&omega_hal::cubin::Relocation> = m.relocations().iter().collect();
    assert_eq!(halves.len(), 2);
    let buffer = 0x7f_8765_4300u64;
    let r = m.relocate(0x10_0000_0000, 0, &|s| (s == "omega_printf_buffer").then_some(buffer)).unwrap();
    for h in halves {
        assert!(matches!(&h.target, RelocTarget::External { symbol, addend: 0 } if symbol == "omega_printf_buffer"));
        let imm = u32::from_le_bytes(r.image[h.offset as usize + 4..][..4].try_into().unwrap());
        match h.kind {
            RelocKind::Lo32InInstruction => assert_eq!(imm, buffer as u32),
            RelocKind::Hi32InInstruction => assert_eq!(imm, (buffer >> 32) as u32),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(Module::parse(&fixture(CUBIN), &BLACKWELL_GB10), Err(CubinError::ForeignArch { found: 90, .. })));
}

#[test]
fn a_kernel_needing_a_missing_symbol_is_refused_by_name_and_its_neighbours_load() {
    const CUBIN: &str = "nvcc_features.sm_90a.cubin";
    let m = parse(CUBIN, &HOPPER);
    assert_eq!(m.undefined, ["free", "malloc", "vprintf"]);
    let kernel = |n: &str| m.kernel(n).unwrap();
    let none = |_: &str| None;
    // The neighbour needs nothing missing.
    let n = kernel("neighbour");
    assert!(n.externs.is_empty());
    assert_eq!(m.link(n, &HOPPER, &none).unwrap().registers, facts(CUBIN, "neighbour").registers);
    // malloc / free: nothing provides them, so the kernel is refused naming the first.
    let a = kernel("allocates");
    assert_eq!(a.externs, ["free", "malloc"]);
    let e = m.link(a, &HOPPER, &none).unwrap_err();
    assert_eq!(e, CubinError::UnresolvedSymbol { kernel: "allocates".into(), symbol: "free".into() });
    assert_eq!(
        e.to_string(),
        "kernel allocates needs symbol free, which the module does not define and nothing provides"
    );
    // printf reached through a non-inlined device function is still the kernel's.
    let say = kernel("say");
    assert_eq!(say.externs, ["vprintf"]);
    let v = vprintf_needs();
    let l = m.link(say, &HOPPER, &|s| (s == "vprintf").then_some(v)).unwrap();
    assert_eq!(l.stack_bytes, facts(CUBIN, "say").stack_frame + v.stack_bytes);
    // Launch attributes a loader must see before it launches.
    let c = kernel("clustered");
    assert_eq!((c.explicit_cluster, c.cluster_dims), (true, Some([2, 1, 1])));
    let r = kernel("reconfig");
    assert!(r.reg_reconfig);
    assert_eq!((r.max_block, r.max_threads), (Some([384, 1, 1]), Some(384)));
    assert_eq!(r.registers, facts(CUBIN, "reconfig").registers);
    let b = kernel("barrier");
    assert_eq!((b.mbarriers, b.barriers), (1, facts(CUBIN, "barrier").barriers));
    assert_eq!(b.shared_bytes, HOPPER.reserved_shared_bytes + facts(CUBIN, "barrier").smem);
    for k in &m.kernels {
        assert_eq!(k.max_registers, Some(if k.name == "reconfig" { 168 } else { 255 }), "{}", k.name);
    }
    // setmaxnreg is an sm_90a feature: the module says so.
    assert_eq!(m.compat(EICOMPAT_ISA_CLASS), Some(&CompatValue::Value(2)));
    assert_eq!(parse("mixed.sm_90a.cubin", &HOPPER).compat(EICOMPAT_ISA_CLASS), Some(&CompatValue::Value(1)));
}

#[test]
fn relocatable_and_nvlinked_cubins_load_with_calls_between_functions() {
    // The relocatable caller alone: its kernel needs the other unit's function, by name.
    let caller = parse("rdc_caller.sm_90a.cubin", &HOPPER);
    assert_eq!(caller.elf_type, ElfType::Relocatable);
    let k = caller.kernel("rdc_kernel").unwrap();
    assert_eq!(k.externs, ["_Z11triple_plusi"]);
    assert_eq!(
        caller.link(k, &HOPPER, &|_| None),
        Err(CubinError::UnresolvedSymbol { kernel: "rdc_kernel".into(), symbol: "_Z11triple_plusi".into() })
    );
    // __device__ data of a relocatable cubin is reached through 32-bit halves into the data image.
    let counter = caller.symbol("rdc_counter").unwrap();
    assert_eq!(counter.segment, Segment::Data);
    assert!(caller.relocations().iter().any(|r| r.kind == RelocKind::Lo32InInstruction
        && r.target == RelocTarget::Image { segment: Segment::Data, offset: counter.offset }));

    // Linked by nvlink: one executable cubin whose call is left for the loader (R_CUDA_ABS55_16_34).
    let m = parse("rdc_linked.sm_90a.cubin", &HOPPER);
    assert_eq!((m.elf_type, m.undefined.len()), (ElfType::Executable, 0));
    let k = m.kernel("rdc_kernel").unwrap();
    let callee = m.function("_Z11triple_plusi").unwrap();
    let callee_frame = facts("rdc_callee.sm_90a.cubin", "_Z11triple_plusi").stack_frame;
    assert_eq!(callee.frame_bytes, callee_frame);
    assert!(k.externs.is_empty());
    assert_eq!(k.stack_bytes, callee_frame, "the kernel's stack holds its callee's frame");
    assert!(k.registers >= callee.registers);
    let call = m.relocations().iter().find(|r| r.kind == RelocKind::CallTarget55).expect("a call relocation").clone();
    let va = 0x12_3456_7800u64;
    let image = m.relocate(va, 0x12_4000_0000, &|_| None).unwrap().image;
    let word = u128::from_le_bytes(image[call.offset as usize..][..16].try_into().unwrap());
    let units = ((word >> 16) & 0xff) | (((word >> 34) & ((1 << 47) - 1)) << 8);
    assert_eq!(units << 2, u128::from(va + callee.code_offset), "the call lands on the callee");
    let before = u128::from_le_bytes(m.image[call.offset as usize..][..16].try_into().unwrap());
    let field = (0xffu128 << 16) | (((1u128 << 47) - 1) << 34);
    assert_eq!(word & !field, before & !field, "the rest of the CALL instruction is untouched");
}
