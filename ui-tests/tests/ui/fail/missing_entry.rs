// Issue 5: a PTX entry that does not exist. The error names the entries the file has.
omega::kernel!(VectorAdd = "../../../../kernels/vector_add.ptx", entry = "vector_ad");

fn main() {}
