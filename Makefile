# Omega's entry points. Each area keeps its targets in mk/<area>.mk.
.PHONY: all
all:
	cargo build --release --workspace

-include mk/*.mk
