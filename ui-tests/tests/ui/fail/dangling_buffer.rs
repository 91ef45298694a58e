// Issue 5: a dangling buffer. An arguments struct borrows its buffers, so it cannot outlive them, and a
// launch borrows the struct.
use omega::{Data, LaunchArgs, Mem};

#[derive(LaunchArgs)]
struct Args<'a, 's> {
    out: &'a mut Mem<'s, Data<u32>>,
}

fn main() {
    let dev = omega::lock().open().unwrap();
    let _ = dev.scope(|s, gpu| -> omega::Result<()> {
        let k = s.load("grid_index")?;
        let args;
        {
            let mut out = s.alloc::<u32>(32)?;
            args = Args { out: &mut out };
        }
        gpu.launch(&omega::Launch::new(&k).args(&args))?;
        Ok(())
    });
}
