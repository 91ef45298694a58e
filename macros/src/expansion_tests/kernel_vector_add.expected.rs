/// Adds.
pub struct VectorAdd<'s> {
    kernel: ::omega::Kernel<'s>,
}
impl<'s> VectorAdd<'s> {
    /// The entry's name in the PTX.
    pub const ENTRY: &'static str = "vector_add";
    /// The PTX the handle was generated from (read at compile time; a change rebuilds the caller).
    pub const PTX: &'static str = ::core::include_str!(
        "$WORKSPACE/kernels/vector_add.ptx"
    );
    /// The parameter layout of the entry, as the contract lays it out.
    pub const LAYOUT: &'static [::omega::session::ParamInfo] = &[
        ::omega::session::ParamInfo {
            ordinal: 0u32,
            offset: 0u32,
            size: 8u32,
        },
        ::omega::session::ParamInfo {
            ordinal: 1u32,
            offset: 8u32,
            size: 8u32,
        },
        ::omega::session::ParamInfo {
            ordinal: 2u32,
            offset: 16u32,
            size: 8u32,
        },
        ::omega::session::ParamInfo {
            ordinal: 3u32,
            offset: 24u32,
            size: 4u32,
        },
    ];
    /// Loads the kernel by its entry name (the repository's kernels: the cubin on a GPU, the host
    /// reference on the simulator) and checks its parameter table against the PTX's.
    pub fn load(scope: &'s ::omega::Scope<'s>) -> ::omega::Result<Self> {
        Self::from_kernel(scope.load(Self::ENTRY)?)
    }
    /// Loads the entry from a cubin and checks its parameter table against the PTX's.
    pub fn load_cubin(
        scope: &'s ::omega::Scope<'s>,
        cubin: &[u8],
    ) -> ::omega::Result<Self> {
        Self::from_kernel(scope.load_cubin(cubin, Self::ENTRY)?)
    }
    /// On the simulator: the host implementation registered under the entry's name, declared with
    /// the PTX's parameter table. Refused on a GPU.
    pub fn load_host(scope: &'s ::omega::Scope<'s>) -> ::omega::Result<Self> {
        Self::from_kernel(::omega::Kernel::load_host(scope, Self::ENTRY, Self::LAYOUT)?)
    }
    /// Wraps a loaded kernel after checking its name and parameter table against the PTX's;
    /// a mismatch is `Error::Load`, naming both tables.
    pub fn from_kernel(kernel: ::omega::Kernel<'s>) -> ::omega::Result<Self> {
        ::omega::args::check_kernel(&kernel, "VectorAdd", Self::ENTRY, Self::LAYOUT)?;
        ::core::result::Result::Ok(Self { kernel })
    }
    /// The loaded kernel.
    pub fn kernel(&self) -> &::omega::Kernel<'s> {
        &self.kernel
    }
    /**A launch of `vector_add` with these arguments, in the PTX's order (28 bytes):

- `vector_add_param_a`: `.u64` at offset 0
- `vector_add_param_b`: `.u64` at offset 8
- `vector_add_param_c`: `.u64` at offset 16
- `vector_add_param_n`: `.u32` at offset 24

Set grid, block and the rest on the returned builder; `Gpu::launch` runs it.*/
    #[allow(clippy::too_many_arguments)]
    pub fn launch<'k>(
        &'k self,
        a: &'k ::omega::Mem<'s, ::omega::Data<f32>>,
        b: &'k ::omega::Mem<'s, ::omega::Data<f32>>,
        c: &'k mut ::omega::Mem<'s, ::omega::Data<f32>>,
        n: u32,
    ) -> ::omega::Launch<'k, 's> {
        ::omega::Launch::new(&self.kernel).arg(a).arg(b).arg(c).arg(n)
    }
}
