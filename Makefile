# mrcnn: Mask R-CNN training for GPU clusters.
#   make                 release build (CUDA code too whenever nvcc is present)
#   make test            install missing deps, build, run every suite (SUITE=unit,grad,... for a subset)
#   make test-unit       quick subsets: test-unit, test-grad, test-model, test-data, test-eval, ...
#   make test-matrix     model, train, eval, cuda suites under OPENBLAS_CORETYPE x OMP_NUM_THREADS
#   make DEBUG=1 / SANITIZE=1 / GPU=0    other variants, each in its own build directory
#   make bench, make demo, make install PREFIX=/usr/local, make deps, make clean
#   make fuzz SECONDS=N  libFuzzer targets (tests/fuzz), N seconds each; make fuzz-smoke for CI

SHELL := /bin/bash
.DEFAULT_GOAL := all

# ---- variant -----------------------------------------------------------------
ifeq ($(SANITIZE),1)
  MODE := sanitize
else ifeq ($(DEBUG),1)
  MODE := debug
else
  MODE := release
endif

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
HAVE_CUDNN := $(shell test -f $(CUDA_HOME)/include/cudnn.h && test -f $(CUDA_HOME)/include/nccl.h && echo 1)
ifeq ($(origin GPU),undefined)
  GPU := $(if $(and $(NVCC),$(HAVE_CUDNN)),1,0)
endif
ifeq ($(GPU),1)
  ifeq ($(NVCC),)
    $(error GPU=1 but nvcc was not found; install the CUDA toolkit or build with GPU=0)
  endif
endif

BUILD := build/$(MODE)$(if $(filter 0,$(GPU)),-cpu,)

# ---- toolchain and libraries ---------------------------------------------------
MPICC := $(shell command -v mpicc 2>/dev/null)
PKGS := hdf5-openmpi openblas yaml-0.1 libjpeg libpng cmocka
PKG_OK := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo 1)
CC := $(if $(MPICC),mpicc,cc)
PY_TORCH ?= /usr/bin/python3
PY_COCO ?= $(shell command -v python3)

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -fopenmp -fPIC -Iinclude -Isrc/include \
                 $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS_COMMON := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread
ifeq ($(MODE),release)
  OPT := -O3 -march=x86-64-v3 -g
else ifeq ($(MODE),debug)
  OPT := -O0 -g3
else
  OPT := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif
CFLAGS ?=
CFLAGS += $(CFLAGS_COMMON) $(OPT)
LDFLAGS += -fopenmp $(if $(filter sanitize,$(MODE)),-fsanitize=address$(,)undefined)
, := ,

NVCCFLAGS := -O3 -std=c++17 -Iinclude -Isrc/include -Xcompiler -fPIC -lineinfo \
             -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
             -gencode=arch=compute_90,code=compute_90 $(shell pkg-config --cflags-only-I openmpi 2>/dev/null)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lnccl -lcudart

# ---- sources -----------------------------------------------------------------------
# One wildcard per module folder (tests/common/module_map.py). src/ops/*.c are compiled twice
# (float, and double as mrcnn_<op>_f64); src/ops/detect once. src/backend/cuda: the .cu files
# make libmrcnn_cuda.so, its .c files the host side in libmrcnn.a; src/dist/nccl/nccl_comm.c is
# the NCCL glue. In a GPU=0 build NOCUDA_SRC stands in for all of them.
HOST_SRC := $(wildcard src/core/*.c src/ops/detect/*.c src/backend/*.c src/backend/cpu/*.c src/backend/open/*.c \
                       src/model/*.c src/model/backbone/*.c src/model/heads/*.c src/train/*.c src/dist/*.c src/data/*.c src/eval/*.c)
OPS_SRC := $(wildcard src/ops/*.c)
CU_SRC := $(wildcard src/backend/cuda/*.cu)
NOCUDA_SRC := src/backend/cuda/backend_nocuda.c src/dist/nccl/nccl_none.c
ifeq ($(GPU),1)
  LIB_SRC := $(HOST_SRC) $(filter-out $(NOCUDA_SRC),$(wildcard src/backend/cuda/*.c src/dist/nccl/*.c))
  CUDA_SO := $(BUILD)/libmrcnn_cuda.so
  LINK_CUDA := -L$(BUILD) -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/..' -Wl,-rpath,'$$ORIGIN/../..' -Wl,-rpath,$(abspath $(BUILD)) -lmrcnn_cuda $(CUDA_LIBS)
  CFLAGS += -I$(CUDA_HOME)/include -DMRCNN_HAVE_CUDA_HEADERS=1
else
  LIB_SRC := $(HOST_SRC) $(NOCUDA_SRC)
  CUDA_SO :=
  LINK_CUDA :=
endif
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(OPS_SRC:%.c=$(BUILD)/obj/%.o) $(OPS_SRC:%.c=$(BUILD)/obj/%_f64.o)
CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
LIB := $(BUILD)/libmrcnn.a

CLI_SRC := $(wildcard src/cli/*.c)
PREP_SRC := $(wildcard data_prep/*.c)
TEST_COMMON_SRC := $(wildcard tests/common/*.c)
TEST_SRC := $(wildcard tests/*/test_*.c tests/*/prog_*.c)
TEST_SRC := $(filter-out tests/common/%,$(TEST_SRC))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
PROGS := $(if $(CLI_SRC),$(BUILD)/mrcnn) $(if $(PREP_SRC),$(BUILD)/mrcnn-prep)
LINK := $(LIB) $(LINK_CUDA) $(LDLIBS_COMMON)

# ---- targets ---------------------------------------------------------------------------
# Object files are not intermediates to delete: keep them for incremental builds.
.SECONDARY:

.PHONY: all summary test test-run test-matrix deps deps-check bench demo install clean
all: summary $(LIB) $(CUDA_SO) $(PROGS) $(TEST_BIN) $(BENCH_BIN)

summary:
	@echo "mrcnn build: mode=$(MODE) dir=$(BUILD) cc=$(CC) gpu=$(GPU) nvcc=$(or $(NVCC),none) cudnn+nccl=$(or $(HAVE_CUDNN),no) mpi=$(if $(MPICC),yes,MISSING) libs($(PKGS))=$(if $(PKG_OK),yes,MISSING: run make deps)"

$(BUILD)/obj/tests/%.o: CFLAGS += -Itests/common
$(BUILD)/obj/bench/%.o: CFLAGS += -Itests/common

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_f64.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DMRCNN_OPS_F64=1 -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libmrcnn_cuda.so: $(CU_OBJ)
	$(NVCC) -shared -cudart shared -o $@ $^ $(subst -Wl$(,),-Xlinker ,$(CUDA_LIBS))

$(BUILD)/mrcnn: $(CLI_SRC:%.c=$(BUILD)/obj/%.o) $(LIB) $(CUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LINK)

$(BUILD)/mrcnn-prep: $(PREP_SRC:%.c=$(BUILD)/obj/%.o) $(LIB) $(CUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LINK)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_COMMON_SRC:%.c=$(BUILD)/obj/%.o) $(LIB) $(CUDA_SO)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LINK)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB) $(CUDA_SO)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LINK)

# ---- dependencies ----------------------------------------------------------------------
DEB_PKGS := build-essential pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools \
            libopenblas-dev libopenblas0-pthread libyaml-dev libjpeg62-turbo-dev libpng-dev gnuplot-nox \
            libcmocka-dev time python3-torchvision python3-numpy python3-pip python3-h5py \
            munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins libpmix2 clang libclang-rt-14-dev
PIP_PKGS := pycocotools==2.0.8 tensorboard
PIP_MODULES := pycocotools tensorboard # what deps-check imports, one per PIP_PKGS entry
TORCH_MODULES := torch torchvision h5py PIL # what the reference tests import with PY_TORCH

deps-check:
	@missing=$$(dpkg-query -W -f='$${Status} $${Package}\n' $(DEB_PKGS) 2>/dev/null | grep -v 'install ok installed' | awk '{print $$NF}'); \
	 for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	 for m in $(PIP_MODULES); do $(PY_COCO) -c "import $$m" 2>/dev/null || missing="$$missing pip:$$m"; done; \
	 for m in $(TORCH_MODULES); do $(PY_TORCH) -c "import $$m" 2>/dev/null || missing="$$missing $(PY_TORCH):$$m"; done; \
	 if [ -n "$$(echo $$missing)" ]; then echo "missing:$$missing"; exit 1; fi

deps:
	@if $(MAKE) -s deps-check >/dev/null 2>&1; then echo "deps: all present"; exit 0; fi; \
	 if [ "$$(id -u)" != 0 ]; then \
	   echo "deps: missing packages; run as root:"; \
	   echo "  apt-get update && apt-get install -y $(DEB_PKGS) && $(PY_COCO) -m pip install $(PIP_PKGS)"; exit 1; fi; \
	 set -e; export DEBIAN_FRONTEND=noninteractive; \
	 apt-get update -qq; apt-get install -y -qq --no-install-recommends $(DEB_PKGS) >/dev/null; \
	 $(PY_COCO) -m pip install -q $(PIP_PKGS); echo "deps: installed"

# The builds these targets start run on every core unless make was given -j: CI and a
# new user type a plain `make test`, and a serial build was a fifth of CI's time.
PAR_JOBS = $(if $(filter -j% --jobserver%,$(MAKEFLAGS)),,-j$(shell nproc))

# `make test` on a fresh machine: deps first, then a fresh make (so detection sees them).
test:
	@$(MAKE) -s deps-check >/dev/null 2>&1 || $(MAKE) deps
	@$(MAKE) $(PAR_JOBS) all
	@$(MAKE) -s test-run

test-run:
	@BUILD=$(BUILD) GPU=$(GPU) MODE=$(MODE) PY_TORCH=$(PY_TORCH) PY_COCO=$(PY_COCO) bash tests/run_tests.sh $(SUITE)

# The BLAS-dependent suites under each OpenBLAS core type x OpenMP thread count
# (tests/run_matrix.sh; MATRIX_SUITES, MATRIX_CORETYPES, MATRIX_THREADS, MATRIX_PAIRS).
MATRIX_SUITES ?= model,train,eval,cuda
# The tests among those whose numbers depend on BLAS rounding (CI runs the matrix on these).
MATRIX_BLAS_TESTS := model,eval,cuda,train/test_equivalence.sh,train/test_mrcnn_train.sh,train/test_bench_train.sh,train/test_precision.sh,train/test_eval_hook.sh
test-matrix:
	@$(MAKE) -s deps-check >/dev/null 2>&1 || $(MAKE) deps
	@$(MAKE) $(PAR_JOBS) all
	@BUILD=$(BUILD) GPU=$(GPU) MODE=$(MODE) PY_TORCH=$(PY_TORCH) PY_COCO=$(PY_COCO) bash tests/run_matrix.sh $(MATRIX_SUITES)

test-%:
	@$(MAKE) -s deps-check >/dev/null 2>&1 || $(MAKE) deps
	@$(MAKE) $(PAR_JOBS) all
	@$(MAKE) -s test-run SUITE=$*

bench: all
	@BUILD=$(BUILD) bash bench/run_bench.sh

demo:
	@$(MAKE) -s deps-check >/dev/null 2>&1 || $(MAKE) deps
	@$(MAKE) $(PAR_JOBS) all
	@BUILD=$(BUILD) bash jobs/demo.sh

PREFIX ?= /usr/local
install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/include/mrcnn $(PREFIX)/share/mrcnn/configs
	$(if $(PROGS),install -m 755 $(PROGS) $(PREFIX)/bin/)
	install -m 644 $(LIB) $(PREFIX)/lib/
	$(if $(CUDA_SO),install -m 755 $(CUDA_SO) $(PREFIX)/lib/)
	install -m 644 include/mrcnn/*.h include/mrcnn/*.inc include/mrcnn/*.def $(PREFIX)/include/mrcnn/
	install -m 644 configs/*.yaml $(PREFIX)/share/mrcnn/configs/

clean:
	rm -rf build

include tests/fuzz/fuzz.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
