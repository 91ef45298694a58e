"""The metric lines of a benchmark log, shared by the scripts that read them (tools/plot_perf.py,
benches/gpu/compare.py): `<prefix>.<metric> <value>` lines, as examples/*_bench print them (`omega.`) and
benches/torch/*_peer.py (`torch.`, `cublas.`)."""


def load(path, prefix):
    """The `<prefix>.<metric> <value>` lines of the log at `path` as {metric: value}; other lines, and
    values that are not numbers, are skipped."""
    out = {}
    for line in open(path, errors="replace"):
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith(prefix + "."):
            try:
                out[parts[0][len(prefix) + 1:]] = float(parts[1])
            except ValueError:
                pass
    return out
