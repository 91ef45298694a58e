//! Sealed state markers: the device states of the lock token and the kinds of buffer.

use core::marker::PhantomData;

pub(crate) mod sealed {
    /// Closes every marker trait of this crate: the set of states and kinds is fixed.
    pub trait Sealed {}
}

/// A state of the session lock token.
pub trait DeviceState: sealed::Sealed {}

/// The lock is held; the device is not known to be open.
#[derive(Debug)]
pub enum Closed {}
/// The lock is held and the device is open (and the process is not latched).
#[derive(Debug)]
pub enum Open {}

impl sealed::Sealed for Closed {}
impl sealed::Sealed for Open {}
impl DeviceState for Closed {}
impl DeviceState for Open {}

/// A scalar the device reads and writes: the element types of buffers and the value types of kernel
/// arguments. Sealed: each has a fixed size and alignment and any bit pattern is valid.
pub trait DeviceScalar: sealed::Sealed + Copy + Default + 'static {
    /// The PTX type name, for messages.
    const PTX: &'static str;
}

macro_rules! scalars {
    ($($t:ty => $ptx:literal),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl DeviceScalar for $t { const PTX: &'static str = $ptx; }
    )*};
}
scalars!(u8 => "u8", i8 => "s8", u16 => "u16", i16 => "s16", u32 => "u32", i32 => "s32", u64 => "u64",
         i64 => "s64", f32 => "f32", f64 => "f64", half::bf16 => "bf16", half::f16 => "f16");

/// The kind of a buffer, in its type: where a `Mem<Data<f32>>` is expected a `Mem<Code>` does not compile.
pub trait MemKind: sealed::Sealed {
    /// The element type.
    type Elem: DeviceScalar;
    /// How the session allocates it.
    #[doc(hidden)]
    const ALLOC: crate::session::AllocKind;
}

/// An ordinary data buffer of `T`: GPU read/write, CPU view synced explicitly.
#[derive(Debug)]
pub struct Data<T: DeviceScalar = u8>(PhantomData<T>);
/// Kernel machine code: the CPU writes it once, the GPU executes it and never writes it.
#[derive(Debug)]
pub enum Code {}
/// GPU-cached, GPU-read-only `T` (write-once weights).
#[derive(Debug)]
pub struct Cached<T: DeviceScalar = u8>(PhantomData<T>);
/// Device-only `T`: GPU read/write, no CPU view. Written and read through the platform's staging
/// (`write`, `read`), so its size is bounded by device memory alone (weights, activations).
#[derive(Debug)]
pub struct Device<T: DeviceScalar = u8>(PhantomData<T>);

impl<T: DeviceScalar> sealed::Sealed for Data<T> {}
impl sealed::Sealed for Code {}
impl<T: DeviceScalar> sealed::Sealed for Cached<T> {}
impl<T: DeviceScalar> sealed::Sealed for Device<T> {}

impl<T: DeviceScalar> MemKind for Data<T> {
    type Elem = T;
    const ALLOC: crate::session::AllocKind = crate::session::AllocKind::Data;
}
impl MemKind for Code {
    type Elem = u8;
    const ALLOC: crate::session::AllocKind = crate::session::AllocKind::Code;
}
impl<T: DeviceScalar> MemKind for Cached<T> {
    type Elem = T;
    const ALLOC: crate::session::AllocKind = crate::session::AllocKind::Cached;
}
impl<T: DeviceScalar> MemKind for Device<T> {
    type Elem = T;
    const ALLOC: crate::session::AllocKind = crate::session::AllocKind::Device;
}
