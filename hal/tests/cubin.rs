//! The cubin loader against real ptxas output (hal/tests/fixtures/, rebuilt by its build.sh).
//!
//! Expected values come from sources independent of the loader: parameter offsets from the PTX
//! signatures (laid out by PTX's alignment rules here), registers / barriers / shared memory / stack from
//! the `ptxas -v` log recorded beside the cubins, and relocated addresses from what the PTX initialises
//! (`table_ptr = generic(counter)`).
//!
//! The loader and the architecture table belong to no backend, so these run on every platform and build;
//! only the last test, which hands a parsed kernel to the nvidia backend's QMD encoder, needs that backend.

use std::collections::HashMap;
use std::path::Path;

use omega_hal::arch::{Arch, BLACKWELL_GB10, HOPPER};
use omega_hal::cubin::{section_file_range, CubinError, Module, RelocKind, CODE_SLACK_BYTES, IMAGE_ALIGN};

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

/// ptxas-v.txt: `== <cubin> (...)` headers, then per function "Compiling entry function 'f'", a
/// "N bytes stack frame" line and a "Used N registers, used N barriers[, N bytes smem]" line.
fn ptxas_facts() -> HashMap<(String, String), PtxasFacts> {
    let mut out = HashMap::new();
    let (mut cubin, mut function) = (String::new(), String::new());
    for line in fixture_text("ptxas-v.txt").lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            cubin = rest.split_whitespace().next().unwrap().to_string();
        } else if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            function = rest.split('\'').next().unwrap().to_string();
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
    *ptxas_facts().get(&(cubin.into(), function.into())).unwrap_or_else(|| panic!("no ptxas -v for {cubin} {function}"))
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
    // No relocations: relocating changes nothing.
    assert_eq!(m.relocate(0x10_0000_0000).unwrap(), m.image);
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
    // Bank 3 is the `.const` table {10, 20, 30, 40}.
    let b3 = bank(3);
    let lut: Vec<u32> =
        m.image[b3.offset as usize..][..16].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(lut, [10, 20, 30, 40]);
    assert_eq!(b3.offset % 64, 0, "constant banks need 64-byte alignment");
    // Bank 4 holds the addresses of `counter` and `table_ptr`, patched by R_CUDA_64.
    let b4 = bank(4);
    assert_eq!(b4.bytes, 16);
    let kinds: Vec<RelocKind> = m.relocations().iter().map(|r| r.kind).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == RelocKind::Abs64).count(), 2);
    assert_eq!(kinds.iter().filter(|&&k| k == RelocKind::Generic64).count(), 1);

    let word = |image: &[u8], at: u64| u64::from_le_bytes(image[at as usize..][..8].try_into().unwrap());
    let va = 0x10_0000_0000;
    let image = m.relocate(va).unwrap();
    let counter = word(&image, b4.offset);
    let table_ptr = word(&image, b4.offset + 8);
    for a in [counter, table_ptr] {
        assert!((va..va + m.image.len() as u64).contains(&a), "{a:#x} is outside the image");
    }
    // `table_ptr = generic(counter)`: the initialised global holds counter's address.
    assert_eq!(word(&image, table_ptr - va), counter);
    // `counter` is uninitialised (.nv.global, NOBITS): zeroed room in the image.
    assert_eq!(&image[(counter - va) as usize..][..4], &[0; 4]);
    // Loading elsewhere moves every patched address by the same amount, and nothing else.
    let moved = m.relocate(va + 0x1_0000).unwrap();
    assert_eq!(word(&moved, b4.offset), counter + 0x1_0000);
    let patched: Vec<u64> = m.relocations().iter().map(|r| r.offset).collect();
    for (i, (a, b)) in image.iter().zip(&moved).enumerate() {
        if a != b {
            assert!(patched.iter().any(|&p| (p..p + 8).contains(&(i as u64))), "byte {i} changed but is not patched");
        }
    }
    // The code is untouched: addresses reach it through bank 4.
    let peek = m.kernel("peek").unwrap();
    let text = section_file_range(&bytes, ".text.peek").unwrap();
    assert_eq!(&image[peek.code_offset as usize..][..text.len()], &bytes[text]);

    assert_eq!(m.relocate(va + 64), Err(CubinError::MisalignedImage { va: va + 64, align: 128 }));
    let top = !(IMAGE_ALIGN - 1);
    assert_eq!(m.relocate(top), Err(CubinError::AddressOverflow { va: top }));
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
    let full = original.relocate(0x7f_1234_5600).unwrap();
    for (&(info_at, _), kind) in entries.iter().zip([0x38u8, 0x39]) {
        bytes[info_at] = kind;
    }
    let m = Module::parse(&bytes, &HOPPER).unwrap();
    let halves = m.relocate(0x7f_1234_5600).unwrap();
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
    let mut relocatable = bytes.clone();
    relocatable[16] = 1;
    assert!(matches!(Module::parse(&relocatable, &HOPPER), Err(CubinError::UnsupportedElf { .. })));
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
    assert_eq!(m.kernel("vector_sub"), Err(CubinError::NoSuchKernel { name: "vector_sub".into() }));
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
