# The C layer: generated headers, the runtime API check, the libraries and their installation.
# docs/c-api.md explains each target.
.PHONY: headers check-headers test-runtime-api c-lib install example-c test-install test-c-layer

PREFIX ?= /usr/local
C_PROFILE ?= release
C_TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
C_LIB_DIR := $(C_TARGET_DIR)/$(C_PROFILE)
C_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
C_HEADERS := $(wildcard include/*.h)
CC ?= cc

# Regenerate include/*.h from src/ffi/ (pinned cbindgen, installed into .tools/ on first use).
headers:
	tools/gen_headers.sh

# Fail when the committed headers are not what the code generates (CI).
check-headers:
	tools/gen_headers.sh --check

# The manifest against the headers, a compiled probe and the document; then the thirteen breakages.
test-runtime-api:
	tools/runtime_api_check.sh
	tools/runtime_api_negative.sh

# libomega.so and libomega.a.
c-lib:
	cargo build --$(C_PROFILE) -p omega --lib

# Headers, libomega.so, libomega.a and the pkg-config modules omega and omega-static into $(PREFIX)
# (default /usr/local; docs/c-api.md).
install: c-lib
	install -d $(DESTDIR)$(PREFIX)/include/omega $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(C_HEADERS) $(DESTDIR)$(PREFIX)/include/omega/
	install -m 755 $(C_LIB_DIR)/libomega.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(C_LIB_DIR)/libomega.a $(DESTDIR)$(PREFIX)/lib/
	for pc in omega omega-static; do \
		sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(C_VERSION)|g' $$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc; \
	done
	@echo "installed omega $(C_VERSION) under $(DESTDIR)$(PREFIX) (pkg-config modules omega and omega-static)"

# The worked example, linked statically: build-c/hello (run it with OMEGA_PLATFORM=sim anywhere).
example-c: c-lib
	mkdir -p build-c
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude examples/c/hello.c -o build-c/hello \
		$(C_LIB_DIR)/libomega.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

# docs/c-api.md's build-and-link commands as written, into a temporary prefix (tools/test_install.sh).
test-install:
	tools/test_install.sh

# What `make test` runs for the C layer (the C consumer tests themselves run under cargo test).
test-c-layer: check-headers test-runtime-api test-install
