# Omega's entry points. Each area keeps its targets in mk/<area>.mk, each under the comment that says
# what it does; `make help` lists them.

.PHONY: all help
# Build every crate of the workspace, release profile.
all:
	cargo build --release --workspace

# This list: every target, with the comment above it.
help:
	@awk -f tools/make_help.awk Makefile mk/*.mk

-include mk/*.mk
