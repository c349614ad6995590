# Fuzz suite (tests/fuzz/README.md): libFuzzer targets built with clang, ASan and UBSan into
# build/fuzz/, CPU only (src/backend/cuda/backend_nocuda.c stands in for src/backend/cuda/).
#   make fuzz [SECONDS=60] [FUZZ_TARGETS="json rle"]   every target SECONDS seconds with its corpus
#   make fuzz-smoke                                    every corpus replayed, then every target 10 s (CI)
#   make fuzz-build                                    the binaries only
#   make fuzz-seeds                                    regenerate the HDF5 seed files (shards, checkpoints)
# Included by the top-level Makefile; every name here starts with FUZZ_ / fuzz.

FUZZ_DIR := build/fuzz
FUZZ_CC ?= clang
FUZZ_OBJCOPY ?= objcopy
FUZZ_PKGS := hdf5-openmpi openblas yaml-0.1 libjpeg libpng
# UBSan checks are recoverable in the build but halt at run time (UBSAN_OPTIONS halt_on_error=1), so that a
# suppressions file can set a known, not yet fixed report aside (FUZZ_UBSAN_SUPP, see README.md).
FUZZ_SAN := -fsanitize=address,undefined -fsanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fopenmp -fPIC -Wall -Wno-unused-parameter \
               -Iinclude -Isrc/include $(shell pkg-config --cflags $(FUZZ_PKGS) 2>/dev/null) \
               $(shell mpicc --showme:compile 2>/dev/null) $(FUZZ_SAN)
# The library and data_prep get coverage instrumentation (no libFuzzer main); the harnesses
# are compiled with -fsanitize=fuzzer.
FUZZ_LIB_CFLAGS := $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link
FUZZ_LDLIBS := $(shell pkg-config --libs $(FUZZ_PKGS) 2>/dev/null) $(shell mpicc --showme:link 2>/dev/null) \
               -fopenmp -lm -lpthread

FUZZ_LIB_SRC := $(HOST_SRC) $(NOCUDA_SRC)
FUZZ_OPS_SRC := $(wildcard src/ops/*.c)
FUZZ_PREP_SRC := $(filter-out data_prep/main.c,$(wildcard data_prep/*.c))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o) $(FUZZ_OPS_SRC:%.c=$(FUZZ_DIR)/obj/%.o) \
                $(FUZZ_OPS_SRC:%.c=$(FUZZ_DIR)/obj/%_f64.o) $(FUZZ_PREP_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
# libmrcnn_fuzz.a: the library plus data_prep, as compiled. libmrcnn_fuzz_tracked.a: the same
# with the allocation, stdio and HDF5 property-list calls renamed (tests/fuzz/tracked.syms)
# to the harness's trackers, which release what a rejected input left behind (fuzz_common.c).
FUZZ_LIB := $(FUZZ_DIR)/libmrcnn_fuzz.a
FUZZ_LIB_TRACKED := $(FUZZ_DIR)/libmrcnn_fuzz_tracked.a

FUZZ_TARGETS_ALL := json config config_merge rle coco_gt coco_prep results image shard_raw shard_struct ckpt_raw ckpt_struct
FUZZ_TARGETS ?= $(FUZZ_TARGETS_ALL)
FUZZ_BINS := $(FUZZ_TARGETS_ALL:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_COMMON_OBJ := $(FUZZ_DIR)/obj/tests/fuzz/fuzz_common.o $(FUZZ_DIR)/obj/tests/fuzz/fuzz_h5spec.o
FUZZ_ENV := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self OMPI_MCA_rmaps_base_oversubscribe=1 \
            HDF5_USE_FILE_LOCKING=FALSE ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=0:abort_on_error=0 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SECONDS ?= 60

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-seeds
fuzz-build: $(FUZZ_BINS) $(FUZZ_DIR)/config.dict

fuzz: fuzz-build
	@$(FUZZ_ENV) FUZZ_DIR=$(FUZZ_DIR) bash tests/fuzz/run_fuzz.sh $(SECONDS) $(FUZZ_TARGETS)

# CI's share: the corpus (every fixed finding) is what must hold; the 10 s of new inputs per
# target is a smoke test, the long runs are `make fuzz SECONDS=600`.
fuzz-smoke:
	@$(MAKE) $(PAR_JOBS) fuzz-build
	@$(FUZZ_ENV) FUZZ_DIR=$(FUZZ_DIR) bash tests/fuzz/run_fuzz.sh 10 $(FUZZ_TARGETS)

fuzz-seeds: $(FUZZ_DIR)/fuzz_seedgen $(FUZZ_DIR)/mrcnn-prep
	@$(FUZZ_ENV) FUZZ_DIR=$(FUZZ_DIR) bash tests/fuzz/make_seeds.sh

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/%_f64.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -DMRCNN_OPS_F64=1 -MMD -MP -c $< -o $@

# Harness sources: -fsanitize=fuzzer-no-link too (their own code is covered like the library's).
$(FUZZ_DIR)/obj/tests/fuzz/%.o: tests/fuzz/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_LIB_CFLAGS) -Isrc/core -Idata_prep -Itests/fuzz -DMRCNN_FUZZ_SRCDIR='"$(abspath tests/fuzz)"' -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_LIB_TRACKED): $(FUZZ_LIB) tests/fuzz/tracked.syms
	$(FUZZ_OBJCOPY) --redefine-syms=tests/fuzz/tracked.syms $< $@

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_COMMON_OBJ) $(FUZZ_LIB_TRACKED)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $(filter %.o,$^) $(FUZZ_LIB_TRACKED) $(FUZZ_LDLIBS)

# Not fuzz targets: the seed generator and an instrumented mrcnn-prep (shapes + coco make
# the shard seeds), linked against the untracked library.
$(FUZZ_DIR)/fuzz_seedgen: $(FUZZ_DIR)/obj/tests/fuzz/seedgen.o $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -o $@ $(filter %.o,$^) $(FUZZ_LIB) $(FUZZ_LDLIBS)

$(FUZZ_DIR)/mrcnn-prep: $(FUZZ_DIR)/obj/data_prep/main.o $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -o $@ $(filter %.o,$^) $(FUZZ_LIB) $(FUZZ_LDLIBS)

# libFuzzer dictionary of every config key, made from the key table.
$(FUZZ_DIR)/config.dict: src/core/config_keys.c tests/fuzz/yaml.dict
	@mkdir -p $(@D)
	@{ cat tests/fuzz/yaml.dict; grep -o '{"[A-Z0-9_.]*"' $< | sed 's/^{//' | sort -u | awk '{print "k" NR "=" $$0}'; \
	   grep -o '{"[A-Z0-9_.]*"' $< | sed 's/^{"//; s/"$$//' | tr '.' '\n' | sort -u | awk '{print "p" NR "=\"" $$0 ":\""}'; } > $@

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
