#[automatically_derived]
unsafe impl<'a, 's> ::omega::LaunchArgs for VectorAddArgs<'a, 's> {
    const LAYOUT: &'static [::omega::session::ParamInfo] = &::omega::args::__private::layout::<
        4usize,
    >([
        <&'a Mem<'s, Data<f32>> as ::omega::KernelArg>::SIZE,
        <&'a Mem<'s, Data<f32>> as ::omega::KernelArg>::SIZE,
        <&'a mut Mem<'s, Data<f32>> as ::omega::KernelArg>::SIZE,
        <u32 as ::omega::KernelArg>::SIZE,
    ]);
    fn block(&self) -> ::omega::ArgBlock {
        let mut block = ::omega::args::__private::block::<Self>();
        ::omega::args::__private::push::<&'a Mem<'s, Data<f32>>>(&mut block, &self.a);
        ::omega::args::__private::push::<&'a Mem<'s, Data<f32>>>(&mut block, &self.b);
        ::omega::args::__private::push::<
            &'a mut Mem<'s, Data<f32>>,
        >(&mut block, &self.c);
        ::omega::args::__private::push::<u32>(&mut block, &self.n);
        block
    }
    #[doc(hidden)]
    fn only_derive_is_allowed_to_implement_this_trait() {}
}
