# pipec - the only build entry point.
#
#   make            build bin/pipec and the runtime library
#   make deps       install what is missing (apt-get; the package list is DEB_PACKAGES)
#   make test       build and run every test (unit tests under ASan+UBSan, golden,
#                   bad-input corpus, end-to-end); the last line reads "N passed, N failed"
#   make demo       the main job on a shipped example
#   make bench      benchmarks (not tests)
#   make fuzz       libFuzzer on the front end (clang)
#   make install PREFIX=/usr/local
#   make clean

# Every Debian package the project needs, in one place.
DEB_PACKAGES = make gcc clang flex bison libcmocka-dev libopenblas-dev pkg-config \
               libclang-rt-14-dev openmpi-bin libopenmpi-dev

PREFIX  ?= /usr/local
CC      ?= cc
OPT     ?= -O2 -g
WARN     = -std=c11 -Wall -Wextra
CPPFLAGS = -D_POSIX_C_SOURCE=200809L -Icompiler -Ibuild/gen -Iruntime
CFLAGS  += $(OPT) $(WARN) $(EXTRA_CFLAGS)
LDLIBS   = -lm
SAN      = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

# Sources: every .c under compiler/ (main.c is the CLI), the generated grammar.
COMP_SRC  = $(filter-out compiler/main.c,$(wildcard compiler/*.c compiler/passes/*.c))
GEN_SRC   = build/gen/pipe.tab.c build/gen/lex.yy.c
GEN_HDR   = build/gen/pipe.tab.h build/gen/lex.yy.h
RT_SRC    = $(wildcard runtime/*.c)
UNIT_SRC  = $(wildcard tests/unit/test_*.c)

OBJ       = $(COMP_SRC:%.c=build/obj/%.o) $(GEN_SRC:build/gen/%.c=build/obj/gen/%.o)
AOBJ      = $(COMP_SRC:%.c=build/asan/%.o) $(GEN_SRC:build/gen/%.c=build/asan/gen/%.o)
RT_OBJ    = $(RT_SRC:%.c=build/obj/%.o)
RT_AOBJ   = $(RT_SRC:%.c=build/asan/%.o)
UNIT_BIN  = $(UNIT_SRC:tests/unit/%.c=build/tests/%)

.PHONY: all deps test demo bench fuzz install clean check-deps test-gpu cuda mpi cuda-mpi
.SUFFIXES:
.DELETE_ON_ERROR:

all: bin/pipec build/libpiperun.a

# --- dependencies -----------------------------------------------------------------
# Installs only when something is missing, so it is cheap to run before every target.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

# --- grammar ----------------------------------------------------------------------
build/gen/pipe.tab.c build/gen/pipe.tab.h: grammar/pipe.y
	@mkdir -p build/gen
	bison -Wall -Werror --defines=build/gen/pipe.tab.h -o build/gen/pipe.tab.c $<

build/gen/lex.yy.c build/gen/lex.yy.h: grammar/pipe.l build/gen/pipe.tab.h
	@mkdir -p build/gen
	flex --header-file=build/gen/lex.yy.h -o build/gen/lex.yy.c $<

# --- objects ----------------------------------------------------------------------
build/obj/gen/%.o: build/gen/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(OPT) -std=c11 -Wall -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter $(EXTRA_CFLAGS) -MMD -c $< -o $@

build/asan/gen/%.o: build/gen/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O1 -g -std=c11 -Wall -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter $(SAN) -MMD -c $< -o $@

build/obj/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BLAS_CFLAGS) $(CFLAGS) -pthread -MMD -c $< -o $@

build/asan/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BLAS_CFLAGS) -O1 -g $(WARN) $(SAN) -pthread -MMD -c $< -o $@

build/obj/%.o: %.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -c $< -o $@

build/asan/%.o: %.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O1 -g $(WARN) $(SAN) -MMD -c $< -o $@

-include $(OBJ:.o=.d) $(AOBJ:.o=.d) $(RT_OBJ:.o=.d) $(RT_AOBJ:.o=.d)

# --- libraries and programs ---------------------------------------------------------
build/libpipec.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^

build/asan/libpipec.a: $(AOBJ)
	@rm -f $@
	ar rcs $@ $^

build/libpiperun.a: $(RT_OBJ)
	@rm -f $@
	ar rcs $@ $^ $(if $(RT_OBJ),,build/obj/compiler/util.o)

build/asan/libpiperun.a: $(RT_AOBJ)
	@rm -f $@
	ar rcs $@ $^ $(if $(RT_AOBJ),,build/asan/compiler/util.o)

bin/pipec: build/obj/compiler/main.o build/libpipec.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/asan/pipec: build/asan/compiler/main.o build/asan/libpipec.a
	$(CC) -O1 -g $(SAN) -o $@ $^ $(LDLIBS)

build/tests/%: tests/unit/%.c tests/unit/testutil.h build/asan/libpipec.a build/asan/libpiperun.a
	@mkdir -p build/tests
	$(CC) $(CPPFLAGS) $(BLAS_CFLAGS) -Itests/unit -O1 -g $(WARN) $(SAN) -o $@ $< \
	  build/asan/libpipec.a build/asan/libpiperun.a -lcmocka $(BLAS_LIBS) -pthread $(LDLIBS)

# The CUDA backend's host-side logic is unit-tested without a GPU: the test includes it.
build/tests/test_cuda_host: runtime/cuda/cu_host.c runtime/cuda/cu_host.h

# --- targets ------------------------------------------------------------------------
test: deps
	@$(MAKE) --no-print-directory EXTRA_CFLAGS=-Werror all build/asan/pipec $(UNIT_BIN)
	@PIPEC=$(CURDIR)/bin/pipec PIPEC_ASAN=$(CURDIR)/build/asan/pipec tests/run.sh $(UNIT_BIN)

demo: deps all
	@examples/demo.sh

bench: deps all
	@bench/run.sh

FUZZ_SRC = tests/fuzz/fuzz_frontend.c
fuzz: deps build/gen/pipe.tab.c build/gen/lex.yy.c
	@mkdir -p build/fuzz/corpus
	clang $(CPPFLAGS) -O1 -g -fsanitize=fuzzer,address,undefined $(WARN) -Wno-sign-compare \
	  -o build/fuzz/fuzz_frontend $(FUZZ_SRC) $(COMP_SRC) $(GEN_SRC) $(LDLIBS)
	build/fuzz/fuzz_frontend -max_total_time=$${FUZZ_SECONDS:-60} -max_len=4096 \
	  -dict=tests/fuzz/pipe.dict build/fuzz/corpus tests/fuzz/corpus

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/pipec/stdlib \
	  $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 bin/pipec $(DESTDIR)$(PREFIX)/bin/pipec
	install -m 644 stdlib/*.pipe $(DESTDIR)$(PREFIX)/share/pipec/stdlib/
	install -m 644 build/libpiperun.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 runtime/piperun.h $(DESTDIR)$(PREFIX)/include/

# --- CUDA backend and MPI transport (docs/cuda.md) ---------------------------------
# `make cuda` builds build/libpiperun_cuda.a with nvcc (runtime/cuda/*.cu plus the CPU
# model, data, summary and trace files it reuses); `make mpi` builds
# build/libpiperun_mpi.a with mpicc; `make test-gpu` runs tests/gpu/*.sh when a GPU is
# there and prints "SKIP: no GPU" otherwise.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { [ -x $(CUDA_HOME)/bin/nvcc ] && echo $(CUDA_HOME)/bin/nvcc; })
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVFLAGS    = -std=c++17 -O2 -g $(NVCC_ARCH) -Iruntime -Iruntime/cuda -I$(CUDA_HOME)/include \
             -Xcompiler -Wall,-Wextra --Werror all-warnings
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart
CU_SRC     = $(wildcard runtime/cuda/*.cu)
CU_OBJ     = $(CU_SRC:runtime/cuda/%.cu=build/cuda/%.o) \
             $(patsubst runtime/cuda/%.c,build/cuda/%.o,$(wildcard runtime/cuda/*.c)) \
             $(CU_COMP_SRC:compiler/%.c=build/cuda/compiler/%.o)
# The stream plan the CUDA runtime enqueues from, and the op kind table it reads: the
# compiler's own files, linked as they are.
CU_COMP_SRC = compiler/stream_plan.c compiler/opsem.c compiler/ir.c compiler/diag.c compiler/util.c
CU_CPU_SRC = runtime/run_main.c runtime/mlp.c runtime/mlp_layers.c runtime/data.c runtime/trace.c \
             runtime/workload_mlp.c
CU_CPU_OBJ = $(CU_CPU_SRC:runtime/%.c=build/cuda/cpu/%.o)
MPICC     ?= mpicc

build/cuda/%.o: runtime/cuda/%.cu $(wildcard runtime/cuda/*.h runtime/cuda/*.cuh) runtime/piperun.h runtime/piperun_internal.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

build/cuda/%.o: runtime/cuda/%.c $(wildcard runtime/cuda/*.h) runtime/piperun.h runtime/piperun_internal.h compiler/stream_plan.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Iruntime/cuda -I$(CUDA_HOME)/include $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/cuda/compiler/%.o: compiler/%.c $(wildcard compiler/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

build/cuda/cpu/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(BLAS_CFLAGS) $(CFLAGS) -pthread -MMD -c $< -o $@

build/libpiperun_cuda.a: $(CU_OBJ) $(CU_CPU_OBJ)
	@rm -f $@
	ar rcs $@ $^

cuda:
	@if [ -z "$(NVCC)" ]; then echo "make cuda: nvcc not found (set CUDA_HOME or NVCC)"; exit 1; fi
	@$(MAKE) --no-print-directory build/libpiperun_cuda.a

build/mpi/piperun_mpi.o: runtime/mpi/piperun_mpi.c runtime/piperun.h runtime/piperun_internal.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/libpiperun_mpi.a: build/mpi/piperun_mpi.o
	@rm -f $@
	ar rcs $@ $^

mpi: build/libpiperun.a build/libpiperun_mpi.a

# The CUDA backend with one process per rank (runtime/mpi/piperun_cuda_mpi.c: NCCL
# unique id over MPI_Bcast, ncclCommInitRank); needs no CUDA header, only mpi.h.
build/mpi/piperun_cuda_mpi.o: runtime/mpi/piperun_cuda_mpi.c runtime/cuda/cu_dist.h runtime/piperun.h runtime/piperun_internal.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) -Iruntime/cuda $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/libpiperun_cuda_mpi.a: build/mpi/piperun_cuda_mpi.o
	@rm -f $@
	ar rcs $@ $^

cuda-mpi: cuda build/libpiperun_cuda_mpi.a

test-gpu: all
	@if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi; \
	  $(MAKE) --no-print-directory cuda mpi && tests/gpu/run.sh

clean:
	rm -rf build bin
