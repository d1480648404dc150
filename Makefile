# s3cached — build, run, test, bench.
#   make            build/s3cached (-Wall -Wextra -Werror)
#   make run        install missing packages, build, serve ./var/store on 127.0.0.1:9000
#   make test       install, build, run every unit and end-to-end test (e2e files in parallel,
#                   big-data and long-race files at the sizes that prove their point)
#   make test-full  the same with those files at full size (E2E_FULL=1)
#   make test-asan  the whole suite under ASan + UBSan (build-asan/)
#   make bench      benchmarks against nginx, as ratios
#   make lint       the layering of the folders, module confinement, banned functions, format
#   make format     clang-format the C files you changed (FILES=... for others)
#   make docs       regenerate config/s3cached.conf and the option tables of docs/ (CONF_TABLE)
#   make test-faults the real server under injected faults (disk full, EIO, ENOMEM, LMDB full)
#   make soak       a bounded mixed-load run (SOAK_SECONDS, default 600); not part of make test

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2 -g
SAN      ?=
CFLAGS   += -std=gnu11 $(OPT) $(SAN) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -fno-strict-aliasing -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. -MMD -MP \
            -pthread
LDFLAGS  += $(SAN) -pthread
# libmicrohttpd 1.0.1, static, built once from Debian's source into build/ (build-aux/mhd.sh):
# bookworm's 0.9.75 reads a bare LF as the end of a chunk line (docs/security.md).
MHD_DIR  ?= build/mhd-1.0.1
MHD_LIB  := $(MHD_DIR)/lib/libmicrohttpd.a
CFLAGS   += -I$(MHD_DIR)/include
PKGS     := libcurl openssl lmdb zlib expat jansson gnutls
LIBS     := $(MHD_LIB) $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lcurl -lssl -lcrypto -llmdb -lz -lexpat -ljansson -lgnutls)
TESTLIBS := $(LIBS) -lcmocka

# The folders are layers, bottom to top (tests/lint.sh keeps the includes going down only).
DIRS     := lib sig backends cache writeback ring objects acct peer http s3 admin cmd
SRCS     := $(foreach d,$(DIRS),$(wildcard $(d)/*.c))
MAIN     := cmd/main.c
LIBSRCS  := $(filter-out $(MAIN),$(SRCS))
OBJS     := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIBSRCS))
UNITSRCS := $(wildcard tests/unit/test_*.c)
UNITBINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNITSRCS))
UNITHELP := $(filter-out $(UNITSRCS),$(wildcard tests/unit/*.c))
UNITHOBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(UNITHELP))

# Debian packages: build libraries, then the clients the end-to-end tests drive.
DEB_BUILD := build-essential pkg-config libgnutls28-dev liblmdb-dev libcmocka-dev \
             libcurl4-openssl-dev libssl-dev zlib1g-dev libexpat1-dev libjansson-dev curl patch
DEB_TEST  := awscli s3cmd rclone python3-boto3 curl nginx wrk lmdb-utils xxd procps psmisc clang-format fio \
             netcat-openbsd openssl prometheus yamllint python3-yaml systemd python3-smart-open \
             libfuse3-dev fuse3
# examples/'s PyTorch loader (e2e 59): without its recommends (libtorch-dev, a compiler
# toolchain): 164 packages, 632 MB on disk.
DEB_TEST_NOREC := python3-torch
NPM_DIR   := tests/e2e/node_modules

.PHONY: all run test test-full test-unit test-e2e test-asan bench lint test-lint clean deps deps-test fuzz fuzz-replay format test-deploy test-image \
        test-faults soak docs
all: $(BUILD)/s3cached $(BUILD)/ring-owner $(BUILD)/throttle $(BUILD)/delayline

$(BUILD)/s3cached: $(BUILD)/obj/$(MAIN:.c=.o) $(BUILD)/libs3c.a | $(MHD_LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# e2e 86's tool: the owner of each key on nginx's consistent-hash ring (ring/ring.c)
$(BUILD)/ring-owner: tests/tools/ring_owner.c $(BUILD)/libs3c.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

# bench/startup.sh's tool: an index with N entries (make bench)
$(BUILD)/index-fill: bench/index_fill.c $(BUILD)/libs3c.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

# bench/tar.sh's tool: lib/tar's walk, index and lookup costs on a shard (not part of make bench)
$(BUILD)/tar-bench: bench/tar_bench.c $(BUILD)/libs3c.a
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

# the slow link of make bench and e2e 73/74: a loopback relay with a bandwidth cap (bench/throttle.c)
$(BUILD)/throttle: bench/throttle.c
	$(CC) $(CFLAGS) -o $@ $< -lpthread

# a network round trip on loopback (RTT_US of bench/shards.sh): a relay that delays every byte
# by a fixed time, both ways, at full speed (bench/delayline.c)
$(BUILD)/delayline: bench/delayline.c
	$(CC) $(CFLAGS) -o $@ $< -lpthread

$(BUILD)/libs3c.a: $(OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# what includes <microhttpd.h> waits for it (tests/lint.sh keeps it to http/ and test_be_s3),
# and is compiled again when the library is (a tree built against bookworm's 0.9.75 header)
$(MHD_LIB): build-aux/mhd.sh $(wildcard build-aux/mhd-patches/*.patch)
	build-aux/mhd.sh $(MHD_DIR)
$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard http/*.c)) $(BUILD)/obj/tests/unit/test_be_s3.o: $(MHD_LIB)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNITHOBJ) $(BUILD)/libs3c.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(TESTLIBS)

# test_sigv2 makes OpenSSL's HMAC() (SigV2) and EVP_MAC_init() (SigV4, lib/digest.c) fail on
# demand (the signature checks must fail closed)
$(BUILD)/tests/test_sigv2: LDFLAGS += -Wl,--wrap=HMAC,--wrap=EVP_MAC_init
# test_upload sees every write upload.c makes (O_DIRECT ones must be whole pages) and refuses one
$(BUILD)/tests/test_upload: LDFLAGS += -Wl,--wrap=fileio_pwrite_all

# These modules link without the HTTP daemon (docs/STYLE.md 3.1): their tests are linked without
# libmicrohttpd, so a dependency on http/req.c or http/server.c coming back fails the build.
NOMHD_TESTS := router auth upload object multipart wb_mpu warm ratelimit park
$(NOMHD_TESTS:%=$(BUILD)/tests/test_%): TESTLIBS := $(filter-out $(MHD_LIB),$(LIBS)) -lcmocka

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# --- packages -------------------------------------------------------------------------
# Installs only what is missing; apt-get update runs once, only when something is.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(2) $$missing; \
	fi
endef

deps:
	$(call apt_install,$(DEB_BUILD))

deps-test: deps
	$(call apt_install,$(DEB_TEST))
	$(call apt_install,$(DEB_TEST_NOREC),--no-install-recommends)
	@# node/npm: a NodeSource nodejs (bundling npm) conflicts with Debian's npm package, so
	@# install Debian's only when the commands are missing.
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi
	@if [ ! -d $(NPM_DIR)/@aws-sdk/client-s3 ]; then \
	  echo "installing @aws-sdk/client-s3 into $(NPM_DIR)"; \
	  (cd tests/e2e && npm install --no-audit --no-fund --silent @aws-sdk/client-s3 @aws-sdk/lib-storage); \
	fi
	@# minio: the MinIO JS client (e2e 26, listIncompleteUploads). Saved in package.json like
	@# the SDK, so the --no-save install of s3rver below does not prune it.
	@if [ ! -d $(NPM_DIR)/minio ]; then \
	  echo "installing minio into $(NPM_DIR)"; \
	  (cd tests/e2e && npm install --no-audit --no-fund --silent minio); \
	fi
	@# s3rver: a third-party S3 server, the upstream of e2e 45 (be_s3.c interop). --no-save keeps
	@# package.json as it is; a later npm install may prune it, and then this puts it back.
	@if [ ! -x $(NPM_DIR)/.bin/s3rver ]; then \
	  echo "installing s3rver into $(NPM_DIR)"; \
	  (cd tests/e2e && npm install --no-save --no-audit --no-fund --silent s3rver); \
	fi
	@# offline Kubernetes schema (tests/deploy/k8s_schema.sh, e2e 85): kubernetes-models + typescript
	@if [ ! -d tests/deploy/k8s-schema/node_modules/kubernetes-models ]; then \
	  echo "installing kubernetes-models, typescript into tests/deploy/k8s-schema"; \
	  (cd tests/deploy/k8s-schema && npm install --no-audit --no-fund --silent); \
	fi

# --- run ------------------------------------------------------------------------------
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p var/store/demo var/cache
	@[ -e var/store/demo/hello.txt ] || echo "hello from s3cached" > var/store/demo/hello.txt
	@[ -e var/store/demo/data/numbers.txt ] || { mkdir -p var/store/demo/data && seq 1 1000 > var/store/demo/data/numbers.txt; }
	exec $(BUILD)/s3cached serve --backend file://$(CURDIR)/var/store --cache-dir $(CURDIR)/var/cache

# --- tests ----------------------------------------------------------------------------
# The builds before the suites use every core (2 here: 14 s instead of 29 from clean); the
# unit tests, the lint self-test, the fuzz replay and the image build run side by side (each
# one's output printed whole when it ends: -O), then the e2e files run E2E_JOBS at a time (each in its own temp dir on its own ports; most of them
# wait on their servers), the longest first (tests/e2e/run.sh, tests/e2e/costs).
NPROC := $(shell nproc 2>/dev/null || echo 2)
E2E_JOBS ?= $(shell echo $$(($(NPROC) + 2)))
# unit binaries at a time (tests/run-unit.sh -j): 1, since test_policy_keep_concurrent's epoch
# bound failed in 2 of about 20 runs beside other unit binaries; UNIT_JOBS=3 runs them side by side
UNIT_JOBS ?= 1
test: deps-test
	@$(MAKE) --no-print-directory -j$(NPROC) all unit-bins $(LAZYFS)
	@$(MAKE) --no-print-directory -j4 -O test-unit test-lint fuzz-replay test-image
	@$(MAKE) --no-print-directory test-e2e

# make test with the big-data and long-race e2e files at full size (48: 4 GiB + 64 MiB; 66:
# every round). CI may call it; about twice make test's time.
test-full: export E2E_FULL = 1
test-full: test
	@POWERCUT_CUTS=16 S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached python3 tests/e2e/79-power-cut.py --expect-fail

unit-bins: $(UNITBINS)

# The power-cut file system of e2e 79 (libfuse3-dev; without it e2e 79 is skipped)
LAZYFS := $(if $(shell pkg-config --exists fuse3 2>/dev/null && echo y),$(BUILD)/lazyfs)
$(BUILD)/lazyfs: tests/powercut/lazyfs.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -o $@ $< \
	  $$(pkg-config --cflags --libs fuse3)

test-unit: $(UNITBINS)
	@tests/run-unit.sh -j $(UNIT_JOBS) $(UNITBINS)

test-e2e: $(BUILD)/s3cached
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached tests/e2e/run.sh -j$(E2E_JOBS)

ASAN_MAKE := $(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
test-asan: deps-test
	@$(ASAN_MAKE) -j$(NPROC) all unit-bins
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  E2E_ASAN=1 $(ASAN_MAKE) test-unit test-e2e

bench: deps-test
	@$(MAKE) --no-print-directory all $(BUILD)/index-fill $(BUILD)/throttle $(BUILD)/delayline
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/run.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/hits.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached INDEX_FILL_BIN=$(CURDIR)/$(BUILD)/index-fill bench/startup.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/checkpoint.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/ckpt_ranks.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/shards.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached RTT_US=200 bench/shards.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/stall.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/keep.sh
	@$(MAKE) --no-print-directory $(FAULT_SO)
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached bench/miss.sh
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached THROTTLE=$(CURDIR)/$(BUILD)/throttle bench/epochs.sh

# Deployment files: the static checks of make test (tests/deploy/validate.sh, with the
# Kubernetes API schema check whose npm packages deps-test installs), then a real
# podman image build + run of deploy/Dockerfile (tests/deploy/build-image.sh; root, podman,
# runc, debootstrap when no base image is at hand; skipped otherwise).
test-deploy: deps-test
	@$(MAKE) --no-print-directory all
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached tests/deploy/validate.sh
	@$(MAKE) --no-print-directory test-image

# The container image built from deploy/Dockerfile with podman (no Docker engine here) on a
# debootstrap base, run, and compose's services started from it (~2 min on a new machine).
# Exit 77 from the script (not root, no podman) is a skip, said so in its output.
test-image: deps-test
	$(call apt_install,podman runc debootstrap)
	@tests/deploy/build-image.sh; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]

# --- fuzzing (libFuzzer, clang) ------------------------------------------------------------
# Every network/config parser has a target in tests/fuzz/fuzz_<name>.c and seeds in
# tests/fuzz/corpus/<name>/. `make fuzz` runs each for FUZZ_SECONDS with ASan+UBSan; new
# interesting inputs land in the corpus (commit them); a crash fails the run.
# `make fuzz-replay` (part of `make test`) replays each corpus with a plain ASan+UBSan build.
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SRCS    := sig/sigv4.c sig/sigv2.c sig/awschunk.c lib/checksum.c \
                lib/range.c lib/xml.c lib/json.c lib/conf.c lib/buf.c \
                lib/s3c.c lib/s3err.c lib/log.c ring/ring.c ring/peers.c \
                lib/tar.c lib/tar_index.c lib/arr.c lib/hex.c lib/digest.c
FUZZ_LIBS    := -lcrypto -lcurl -lz -lexpat -ljansson -lpthread
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := -g -O1 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. -fno-omit-frame-pointer

fuzz: deps
	@command -v clang >/dev/null || { echo "make fuzz needs clang (apt-get install clang)"; exit 1; }
	@mkdir -p build-fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	  clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    tests/fuzz/fuzz_$$t.c $(FUZZ_SRCS) $(FUZZ_LIBS) -o build-fuzz/fuzz_$$t; \
	  mkdir -p tests/fuzz/corpus/$$t build-fuzz/crash-$$t; \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS)s"; \
	  build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 \
	    -artifact_prefix=build-fuzz/crash-$$t/ -print_final_stats=1 tests/fuzz/corpus/$$t \
	    2>build-fuzz/fuzz_$$t.log || { tail -40 build-fuzz/fuzz_$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::new_units_added" build-fuzz/fuzz_$$t.log; \
	done

fuzz-replay:
	@mkdir -p $(BUILD)/fuzz
	@pass=0; fail=0; for t in $(FUZZ_TARGETS); do \
	  if $(CC) $(FUZZ_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	       tests/fuzz/fuzz_$$t.c tests/fuzz/replay_main.c $(FUZZ_SRCS) $(FUZZ_LIBS) \
	       -o $(BUILD)/fuzz/replay_$$t && \
	     ASAN_OPTIONS=detect_leaks=1 timeout 120 $(BUILD)/fuzz/replay_$$t tests/fuzz/corpus/$$t; \
	  then pass=$$((pass + 1)); else fail=$$((fail + 1)); echo "FAILED: fuzz corpus $$t"; fi; \
	done; echo "fuzz-replay: $$pass passed, $$fail failed"; [ $$fail -eq 0 ]

# --- fault injection and soak (not part of make test) ---------------------------------------
# tests/faults/faultinj.c: an LD_PRELOAD shim that fails chosen libc calls or allocations of the
# real, unmodified server on their N-th call (path filters, rules changed at run time);
# tests/faults/faults.py drives it: disk full, cache read errors, failing fsyncs, allocation
# failures swept over a request mix (FAULT_SWEEP=lo:hi:step), a full LMDB map.
FAULT_SO := $(BUILD)/faults/faultinj.so
$(FAULT_SO): tests/faults/faultinj.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wshadow -fPIC -shared -o $@ $< -ldl

test-faults: deps-test
	@$(MAKE) --no-print-directory all $(FAULT_SO)
	@S3CACHED_BIN=$(CURDIR)/$(BUILD)/s3cached S3C_FAULTINJ=$(CURDIR)/$(FAULT_SO) \
	  timeout -k 15 900 /usr/bin/python3 -u tests/faults/faults.py

# tests/soak/soak.py: SOAK_CLIENTS boto3 threads of mixed GET/PUT/list/delete with random
# disconnects for SOAK_SECONDS; then every acknowledged object is checked by SHA-256 and the
# server's descriptors and RSS compared first/last. SOAK_ASAN=1 runs the ASan+UBSan build.
SOAK_SECONDS ?= 600
SOAK_CLIENTS ?= 6
soak: deps-test
	@if [ "$(SOAK_ASAN)" = 1 ]; then $(ASAN_MAKE) all; else $(MAKE) --no-print-directory all; fi
	@S3CACHED_BIN=$(CURDIR)/$(if $(filter 1,$(SOAK_ASAN)),build-asan,$(BUILD))/s3cached \
	  SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CLIENTS=$(SOAK_CLIENTS) \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  timeout -k 15 $$(($(SOAK_SECONDS) + 600)) /usr/bin/python3 -u tests/soak/soak.py

# --- hygiene --------------------------------------------------------------------------
# The layering of the folders and what each may include (tests/lint.sh); test-lint checks that
# the lint fails on what it forbids (an upward include, a circle, <microhttpd.h> in s3/ ...).
lint:
	@tests/lint.sh

test-lint:
	@tests/lint/test_lint.sh

# clang-format (.clang-format) on the C files changed against HEAD, untracked ones included,
# except the ones tests/lint/clang-format-allow lists (not reformatted yet, HACKING.md);
# `make format FILES="a.c b.h"` formats those files, listed or not.
format:
	@files="$(FILES)"; \
	if [ -z "$$files" ]; then \
	  files=$$({ git diff --name-only HEAD; git ls-files --others --exclude-standard; } | \
	           grep -E '\.[ch]$$' | grep -vxF -f tests/lint/clang-format-allow | sort -u | \
	           while read -r f; do [ -e "$$f" ] && echo "$$f"; done); \
	fi; \
	if [ -z "$$files" ]; then echo "format: no changed C file to format"; exit 0; fi; \
	echo "clang-format -i" $$files; clang-format -i $$files

# docs/configuration.md and docs/s3cached.1 carry the option table between GENERATED markers,
# config/s3cached.conf is all of it; test_conf fails when a committed copy differs.
docs: $(BUILD)/s3cached
	@tests/tools/gendocs.sh $(BUILD)/s3cached

clean:
	rm -rf build build-asan build-fuzz
