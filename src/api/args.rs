//! Typed launches: argument structs whose layout is derived, and kernel handles generated from PTX.
//!
//! Two ways to describe a launch's arguments so that a mistake does not compile:
//!
//! - **`#[derive(LaunchArgs)]`** on a struct of kernel arguments — device scalars and borrowed data
//!   buffers, `&'a Mem<'s, Data<T>>` — in parameter order. The derive lays them out as the contract says
//!   (natural alignment; a 64-bit address is two words, low first), states the layout as a const
//!   ([`LaunchArgs::LAYOUT`]), and refuses any other field type (a host pointer, a slice, a `Vec`) with
//!   an error on that field. [`Launch::args`](crate::Launch::args) takes such a struct by reference, so
//!   the launch cannot outlive the buffers the struct borrows.
//! - **[`kernel!`](crate::kernel!)** reads a PTX file when the caller compiles, finds the `.entry`, and
//!   generates a handle whose `launch` takes exactly the entry's parameters, typed (a `.u64` is a buffer,
//!   a `.u32` a `u32`; `params(..)` names element types and which buffers are written). Loading the
//!   handle checks the kernel's own parameter table — the cubin's on a GPU, the host spec's on the
//!   simulator — against the PTX's: a mismatch is [`Error::Load`], never a launch.
//!
//! ```
//! use omega::{Data, LaunchArgs, Mem};
//!
//! omega::kernel!(VectorAdd = "kernels/vector_add.ptx", entry = "vector_add",
//!                params(a: &f32, b: &f32, c: &mut f32, n: u32));
//!
//! #[derive(LaunchArgs)]
//! struct ScaleCopy<'a, 's> {
//!     src: &'a Mem<'s, Data<f32>>,
//!     dst: &'a Mem<'s, Data<f32>>,
//!     alpha: f32,
//!     n: u32,
//! }
//!
//! let offsets: Vec<u32> = ScaleCopy::LAYOUT.iter().map(|p| p.offset).collect();
//! assert_eq!(offsets, [0, 8, 16, 20]);
//! assert_eq!(VectorAdd::LAYOUT.len(), 4);
//!
//! let lock = omega::lock();
//! lock.set_platform(omega::PlatformKind::Sim)?;
//! let dev = lock.open()?;
//! let out = dev.scope(|s, gpu| -> omega::Result<Vec<f32>> {
//!     let a = s.alloc_from(&[1.0f32, 2.0, 3.0])?;
//!     let b = s.alloc_from(&[10.0f32, 20.0, 30.0])?;
//!     let mut c = s.alloc::<f32>(3)?;
//!     let k = VectorAdd::load(s)?;
//!     gpu.launch(&k.launch(&a, &b, &mut c, 3).block([32, 1, 1]))?;
//!     c.to_vec()
//! });
//! assert_eq!(out.value()?, [11.0, 22.0, 33.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::{Error, HandleMismatch, LoadError, Result};
use crate::kernel::Kernel;
use crate::launch::{ArgBlock, KernelArg};
use crate::mem::Mem;
use crate::session::ParamInfo;
use crate::state::{Data, Device, DeviceScalar};

/// A struct that describes a launch's arguments: what `#[derive(LaunchArgs)]` produces.
///
/// # Safety
/// Implement it only through the derive. A launch trusts what the trait states:
/// - [`LAYOUT`](Self::LAYOUT) is exactly the parameter table that [`block`](Self::block) writes: the same
///   count, order, offsets and sizes, each at its natural alignment.
/// - Every 8-byte parameter that is a device address is the address of a data buffer borrowed for as
///   long as `Self` lives, so that no launch described by `Self` can outlive the buffer.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not describe kernel arguments",
    label = "not a `LaunchArgs` struct",
    note = "add #[derive(omega::LaunchArgs)] to `{Self}`: its fields, in order, are the kernel's parameters"
)]
pub unsafe trait LaunchArgs {
    /// The parameter table `block` writes.
    const LAYOUT: &'static [ParamInfo];

    /// The arguments, laid out.
    fn block(&self) -> ArgBlock;

    /// Only the derive writes this: implementing the trait by hand is not supported (the layout and
    /// the bytes would be two sources that could disagree).
    #[doc(hidden)]
    fn only_derive_is_allowed_to_implement_this_trait()
    where
        Self: Sized;
}

mod sealed {
    pub trait Sealed {}
}

/// Any kernel argument of exactly `BYTES` bytes: what an untyped PTX parameter (`.b16`, `.b32`, `.b64`)
/// accepts when `kernel!` is not told its type.
pub trait Bits<const BYTES: u32>: KernelArg + sealed::Sealed {}

macro_rules! bits {
    ($n:literal: $($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Bits<$n> for $t {}
    )*};
}
bits!(1: u8, i8);
bits!(2: u16, i16, half::bf16, half::f16);
bits!(4: u32, i32, f32);
bits!(8: u64, i64, f64);
impl<T: DeviceScalar> sealed::Sealed for &Mem<'_, Data<T>> {}
impl<T: DeviceScalar> Bits<8> for &Mem<'_, Data<T>> {}
impl<T: DeviceScalar> sealed::Sealed for &mut Mem<'_, Data<T>> {}
impl<T: DeviceScalar> Bits<8> for &mut Mem<'_, Data<T>> {}
impl<T: DeviceScalar> sealed::Sealed for &Mem<'_, Device<T>> {}
impl<T: DeviceScalar> Bits<8> for &Mem<'_, Device<T>> {}
impl<T: DeviceScalar> sealed::Sealed for &mut Mem<'_, Device<T>> {}
impl<T: DeviceScalar> Bits<8> for &mut Mem<'_, Device<T>> {}

/// Checks a loaded kernel against a typed handle's expectations: the entry name and the parameter
/// table (ordinal, offset, size of each). `handle` names the handle in the error. A mismatch is
/// [`Error::Load`].
pub fn check_kernel(kernel: &Kernel<'_>, handle: &str, entry: &str, layout: &[ParamInfo]) -> Result<()> {
    let fail = |mismatch: HandleMismatch| {
        Err(Error::Load(LoadError::HandleMismatch {
            kernel: kernel.name().to_string(),
            handle: handle.to_string(),
            mismatch,
        }))
    };
    if kernel.name() != entry {
        return fail(HandleMismatch::Entry(entry.to_string()));
    }
    let mut declared = kernel.params().to_vec();
    declared.sort_by_key(|p| p.ordinal);
    if declared.len() != layout.len()
        || declared.iter().zip(layout).any(|(d, l)| (d.ordinal, d.offset, d.size) != (l.ordinal, l.offset, l.size))
    {
        return fail(HandleMismatch::Params { declared, expected: layout.to_vec() });
    }
    Ok(())
}

/// What the derive's expansion calls. Not a stable interface.
#[doc(hidden)]
pub mod __private {
    use super::*;

    /// The natural-alignment table of parameters of `sizes` bytes (the math of `ArgBlock::push`).
    pub const fn layout<const N: usize>(sizes: [u32; N]) -> [ParamInfo; N] {
        let mut out = [ParamInfo { ordinal: 0, offset: 0, size: 0 }; N];
        let mut end = 0u32;
        let mut i = 0;
        while i < N {
            let size = sizes[i];
            let offset = crate::session::param_offset(end as u64, size) as u32;
            out[i] = ParamInfo { ordinal: i as u32, offset, size };
            end = offset + size;
            i += 1;
        }
        out
    }

    /// An empty block with room for `A`'s parameters.
    pub fn block<A: LaunchArgs>() -> ArgBlock {
        let bytes = A::LAYOUT.last().map_or(0, |p| p.offset + p.size);
        ArgBlock::with_capacity(A::LAYOUT.len(), bytes as usize)
    }

    /// Appends `a` (a field of the struct being laid out).
    pub fn push<A: KernelArg>(block: &mut ArgBlock, a: &A) {
        block.push_raw(A::SIZE, |out| a.write(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(crate::LaunchArgs)]
    struct Mixed {
        a: u8,
        b: u64,
        c: half::bf16,
        d: f32,
        e: i16,
    }

    #[derive(crate::LaunchArgs)]
    struct Nothing {}

    #[test]
    fn derived_layout_is_the_builders_layout() {
        let m = Mixed { a: 0xaa, b: 0x1122_3344_5566_7788, c: half::bf16::from_f32(1.5), d: -2.0, e: -3 };
        let mut built = ArgBlock::default();
        built.push(m.a);
        built.push(m.b);
        built.push(m.c);
        built.push(m.d);
        built.push(m.e);
        let derived = m.block();
        assert_eq!(derived, built);
        assert_eq!(Mixed::LAYOUT, built.params());
        let offsets: Vec<u32> = Mixed::LAYOUT.iter().map(|p| p.offset).collect();
        assert_eq!(offsets, [0, 8, 16, 20, 24]);
        // The 64-bit value is two words, low first.
        assert_eq!(&derived.words()[2..4], [0x5566_7788, 0x1122_3344]);
        assert!(Nothing::LAYOUT.is_empty());
        assert_eq!(Nothing {}.block().words(), [0]);
    }

    #[test]
    fn const_layout_matches_the_host_specs_math() {
        for spec in crate::kernels::HOST_SPECS {
            let mut b = ArgBlock::default();
            for &size in spec.param_sizes {
                b.push_raw(size, |out| out.fill(0));
            }
            assert_eq!(b.params(), spec.params(), "{}", spec.name);
        }
        assert_eq!(__private::layout([8, 8, 8, 4]).map(|p| p.offset), [0, 8, 16, 24]);
        assert_eq!(__private::layout([2, 8, 1, 4]).map(|p| p.offset), [0, 8, 16, 20]);
    }
}
