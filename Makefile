# pipec - the only build entry point.
#
#   make            build bin/pipec and the runtime libraries: the CPU one always, the MPI
#                   one when mpicc is installed, the CUDA ones when nvcc (and NCCL) are;
#                   it says which it skipped and why
#   make deps       install what is missing (apt-get; the package list is DEB_PACKAGES)
#   make test       build and run every test (unit tests under ASan+UBSan, golden,
#                   bad-input corpus, end-to-end); the last line reads "N passed, N failed";
#                   the long sweeps run a fixed sample
#   make test-full  the same with the long sweeps whole (docs/performance.md)
#   make demo       the main job on a shipped example
#   make bench      benchmarks (not tests)
#   make fuzz       libFuzzer on the front end (clang)
#   make fault      the full allocation and I/O fault sweep (tests/fault/; make test runs a sample)
#   make test-gpu-quick  the short GPU check (tests/gpu/quick.sh); "SKIP: no GPU" without one
#   make coverage   line and branch coverage of compiler/ and runtime/ (gcov, lcov)
#   make test-tsan  every example's generated program under ThreadSanitizer (make test: a sample)
#   make check-layers  the include layers of docs/architecture.md "Layers" (tools/check_layers.sh)
#   make check-calls   the same layers from the built objects' calls (tools/check_calls.sh)
#   make kinds         regenerate runtime/piperun.h's op-kind enum (tools/mkkinds.sh)
#   make install PREFIX=/usr/local   pipec, stdlib, runtime libraries built, header, man
#                   page, docs, bash/zsh completion, Vim syntax, VS Code grammar
#   make clean

# Every Debian package the project needs, in one place.
DEB_PACKAGES = make gcc clang flex bison libcmocka-dev libopenblas-dev pkg-config \
               libclang-rt-14-dev openmpi-bin libopenmpi-dev lcov chromium coinor-libcbc-dev

PREFIX  ?= /usr/local
CC      ?= cc
OPT     ?= -O2 -g
WARN     = -std=c11 -Wall -Wextra
CPPFLAGS = -D_POSIX_C_SOURCE=200809L
# The compiler's layers (docs/architecture.md "Layers"), lowest first: one folder each
# under compiler/. A layer's files are compiled with the include paths of their own
# layer and the layers below it only, so an include of a higher layer's header does not
# compile. The front end's generated parser and scanner (build/gen) are the front end's.
# The compiler sees the runtime's public headers (runtime/: what generated code includes
# and the compiler emits against) and the models' layouts (runtime/models/).
# `make print-layer-flags LAYER=ir` prints one.
LAYERS       = base ir plans analyses frontend passes generation commands
INC_base       = -Icompiler/base -Iplan -Iruntime -Iruntime/models
INC_ir         = -Icompiler/ir $(INC_base)
INC_plans      = -Icompiler/plans $(INC_ir)
INC_analyses   = -Icompiler/analyses $(INC_plans)
INC_frontend   = -Icompiler/frontend -Ibuild/gen $(INC_analyses)
INC_passes     = -Icompiler/passes $(INC_frontend)
INC_generation = -Icompiler/generation $(INC_passes)
INC_commands   = -Icompiler/commands $(INC_generation)
# The runtime's groups (docs/architecture.md "The runtime"), lowest first, one folder each
# under runtime/: a group's files are compiled with the include paths of their own
# group and the groups below it only, as the compiler's layers are. runtime/ itself
# holds the public headers every group sees (piperun.h and what it needs) and the top
# (run.c, run_main.c, program_table.c), which sees every group but the backends'.
# The backends (cpu, cuda, mpi) sit side by side above the workloads; mpi/ is the
# transports of the other two. `make print-layer-flags LAYER=rt_core` prints one.
RT_GROUPS      = models core workloads cpu cuda mpi
INC_runtime    = -Iruntime -Iplan
INC_rt_models  = -Iruntime/models $(INC_runtime)
INC_rt_core    = -Iruntime/core $(INC_rt_models)
INC_rt_workloads = -Iruntime/workloads $(INC_rt_core)
INC_rt_cpu     = -Iruntime/cpu $(INC_rt_workloads)
INC_rt_cuda    = -Iruntime/cuda $(INC_rt_workloads)
INC_rt_mpi     = -Iruntime/mpi -Iruntime/cpu -Iruntime/cuda $(INC_rt_workloads)
INC_rt_top     = $(INC_rt_workloads)
# Every group's, for the tests and benchmarks that reach into the runtime.
INC_rt_all     = -Iruntime/mpi -Iruntime/cpu -Iruntime/cuda $(INC_rt_workloads)
# Tests, benchmarks and tools built from the whole compiler see every layer.
INC_ALL        = $(INC_commands) $(INC_rt_all)
# The include paths of the compiler source $< (compiler/LAYER/...).
LAYER_INC      = $(INC_$(word 2,$(subst /, ,$<)))
# The include paths of the runtime source $< (runtime/GROUP/x.c, or runtime/x.c: the top).
RT_GROUP       = $(if $(word 3,$(subst /, ,$<)),$(word 2,$(subst /, ,$<)),top)
RT_INC         = $(INC_rt_$(RT_GROUP))
CFLAGS  += $(OPT) $(WARN) $(EXTRA_CFLAGS)
LDLIBS   = -lm
SAN      = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# The sanitizer builds (the ASan pipec, its library and the unit tests) at -Og with line
# tables only (-g1: file:line in every sanitizer report, no variable info): half the
# compile time of -O1 -g (about 35 against 64 CPU s for the ASan compiler, runtime and
# three unit tests) for the same run time of the unit tests and the ASan pipec
# (docs/performance.md "The build of make test").
SAN_OPT ?= -Og -g1
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
# `pipec tune --exact` needs COIN-OR CBC (coinor-libcbc-dev); without it pipec builds and
# --exact says what to install. NO_CBC=1 builds without it where it is installed.
ifeq ($(NO_CBC),)
CBC_LIBS    := $(shell pkg-config --exists cbc 2>/dev/null && [ -f /usr/include/coin/Cbc_C_Interface.h ] && pkg-config --libs cbc)
endif
# CBC is loaded when `tune --exact` first needs it (dlopen, compiler/commands/exact.c), not
# linked: linked, its libraries cost every pipec process about 20 ms of start-up.
ifneq ($(CBC_LIBS),)
CBC_SONAME := $(shell objdump -p $$(pkg-config --variable=libdir cbc)/libCbcSolver.so 2>/dev/null | awk '/SONAME/ {print $$2}')
CPPFLAGS   += -DPIPEC_HAVE_CBC $(if $(CBC_SONAME),-DPIPEC_CBC_SONAME='"$(CBC_SONAME)"')
LDLIBS     += -ldl
endif

# Sources: every .c of the compiler's layer folders (commands/main.c is the CLI), the
# generated grammar.
COMP_SRC  = $(filter-out compiler/commands/main.c,$(wildcard $(LAYERS:%=compiler/%/*.c)))
GEN_SRC   = build/gen/pipe.tab.c build/gen/lex.yy.c
GEN_HDR   = build/gen/pipe.tab.h build/gen/lex.yy.h
RT_SRC    = $(wildcard runtime/*.c $(patsubst %,runtime/%/*.c,models core workloads cpu))
UNIT_SRC  = $(wildcard tests/unit/test_*.c)

OBJ       = $(COMP_SRC:%.c=build/obj/%.o) $(GEN_SRC:build/gen/%.c=build/obj/gen/%.o)
AOBJ      = $(COMP_SRC:%.c=build/asan/%.o) $(GEN_SRC:build/gen/%.c=build/asan/gen/%.o)
RT_OBJ    = $(RT_SRC:%.c=build/obj/%.o)
RT_AOBJ   = $(RT_SRC:%.c=build/asan/%.o)
UNIT_BIN  = $(UNIT_SRC:tests/unit/%.c=build/tests/%)
# Unit tests that compile every example, built without the sanitizers too: in `make test`
# the plain build checks the examples that take seconds under the sanitizers
# (tests/unit/testutil.h example_checked); `make test-full` runs none of them.
PLAIN_UNIT_BIN = build/tests/plain/test_cuda_host build/tests/plain/test_stream_plan

.PHONY: check-layers check-calls kinds print-layer-flags
.PHONY: all runtimes deps test test-full demo bench fuzz fault coverage test-tsan install clean check-deps test-gpu test-gpu-quick cuda mpi cuda-mpi editors
.SUFFIXES:
.DELETE_ON_ERROR:

all: bin/pipec build/libpiperun.a runtimes build/pipec.1 editors

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
	$(CC) $(CPPFLAGS) $(INC_frontend) $(OPT) -std=c11 -Wall -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter $(EXTRA_CFLAGS) -MMD -MP -c $< -o $@

build/asan/gen/%.o: build/gen/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(INC_frontend) $(SAN_OPT) -std=c11 -Wall -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter $(SAN) -MMD -MP -c $< -o $@

build/obj/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(RT_INC) $(BLAS_CFLAGS) $(CFLAGS) -pthread -MMD -MP -c $< -o $@

build/asan/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(RT_INC) $(BLAS_CFLAGS) $(SAN_OPT) $(WARN) $(SAN) -pthread -MMD -MP -c $< -o $@

build/obj/compiler/%.o: compiler/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(LAYER_INC) $(CFLAGS) -MMD -MP -c $< -o $@

build/asan/compiler/%.o: compiler/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(LAYER_INC) $(SAN_OPT) $(WARN) $(SAN) -MMD -MP -c $< -o $@

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
	ar rcs $@ $^ $(if $(RT_OBJ),,build/obj/compiler/base/util.o)

build/asan/libpiperun.a: $(RT_AOBJ)
	@rm -f $@
	ar rcs $@ $^ $(if $(RT_AOBJ),,build/asan/compiler/base/util.o)

bin/pipec: build/obj/compiler/commands/main.o build/libpipec.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

build/asan/pipec: build/asan/compiler/commands/main.o build/asan/libpipec.a
	$(CC) $(SAN_OPT) $(SAN) -o $@ $^ $(LDLIBS)

build/tests/%: tests/unit/%.c tests/unit/testutil.h build/asan/libpipec.a build/asan/libpiperun.a
	@mkdir -p build/tests
	$(CC) $(CPPFLAGS) $(INC_ALL) $(BLAS_CFLAGS) -Itests/unit $(SAN_OPT) $(WARN) $(SAN) -o $@ $< \
	  build/asan/libpipec.a build/asan/libpiperun.a -lcmocka $(BLAS_LIBS) -pthread $(LDLIBS)

build/tests/plain/%: tests/unit/%.c tests/unit/testutil.h build/libpipec.a build/libpiperun.a
	@mkdir -p build/tests/plain
	$(CC) $(CPPFLAGS) $(INC_ALL) $(BLAS_CFLAGS) -Itests/unit -O1 -g $(WARN) -o $@ $< \
	  build/libpipec.a build/libpiperun.a -lcmocka $(BLAS_LIBS) -pthread $(LDLIBS)

# --- documentation and editor support ------------------------------------------------
# The man page is generated from the usage texts the binary prints; the Vim syntax and
# the VS Code grammar from editors/pipe-syntax.txt, the lexer's keywords and the op kinds.
build/pipec.1: bin/pipec tools/mkman.sh
	@mkdir -p build
	sh tools/mkman.sh bin/pipec >$@.tmp && mv $@.tmp $@

editors: build/editors/vim/syntax/pipe.vim
build/editors/vim/syntax/pipe.vim: tools/mksyntax.sh editors/pipe-syntax.txt grammar/pipe.l compiler/ir/ir.h
	sh tools/mksyntax.sh . build/editors

# The CUDA backend's host-side logic is unit-tested without a GPU: the test includes it.
build/tests/test_cuda_host build/tests/plain/test_cuda_host: runtime/cuda/cu_host.c runtime/cuda/cu_host.h
build/tests/test_tf_cuda_host: runtime/models/tf_kernels.h runtime/cuda/tf_slice.h runtime/models/tf_layout.h

# --- targets ------------------------------------------------------------------------
# `make test` runs a fixed sample of the long sweeps (the fault campaign, the schedule
# grid's orders, the CUDA builds...); `make test-full` runs everything it runs with the
# sweeps whole (TEST_FULL=1, which the suites read as PIPEC_TEST_FULL; docs/performance.md
# names what each sweep samples).
TEST_FULL ?= 0
TEST_PLAIN_BIN = $(if $(filter 1,$(TEST_FULL)),,$(PLAIN_UNIT_BIN))
# The include layers of docs/architecture.md "Layers" (also tests/t_compiler_layers.sh).
check-layers:
	@sh tools/check_layers.sh .

# The same layers at the level of calls, from the built objects' symbols
# (tools/check_calls.sh, also tests/t_compiler_layers.sh).
check-calls: bin/pipec build/libpiperun.a
	@sh tools/check_calls.sh build/obj .

# The runtime's op-kind enum in runtime/piperun.h, regenerated from plan/opkinds.h
# (tools/mkkinds.sh; tests/t_layers.sh checks that it is up to date).
kinds:
	@sh tools/mkkinds.sh -w .

# The compile flags of one layer's files (LAYER=base|ir|...|commands|runtime), for tests
# that compile a file as the build would (tests/t_compiler_layers.sh).
print-layer-flags:
	@echo $(CPPFLAGS) $(INC_$(LAYER)) $(WARN)

# The tree is built in parallel on every CPU unless the caller gave a -j of its own.
NPROC ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))

test: deps
	@$(MAKE) --no-print-directory $(BUILD_JOBS) EXTRA_CFLAGS=-Werror all build/asan/pipec $(UNIT_BIN) \
	  $(TEST_PLAIN_BIN) build/fault/faultinject.so build/tests/deadlock_agree build/tsan/libpiperun.a
	@PIPEC_TEST_FULL=$(TEST_FULL) PIPEC=$(CURDIR)/bin/pipec PIPEC_ASAN=$(CURDIR)/build/asan/pipec \
	  tests/run.sh $(UNIT_BIN) $(TEST_PLAIN_BIN)

test-full:
	@$(MAKE) --no-print-directory TEST_FULL=1 test

demo: deps all
	@examples/demo.sh

bench: deps all
	@bench/run.sh

# The deadlock agreement test's generator and check-free emitter (tests/t_deadlock_agree.sh).
build/tests/deadlock_agree: tests/deadlock/agree.c build/libpipec.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(INC_ALL) $(CFLAGS) -o $@ $< build/libpipec.a $(LDLIBS)

# The fault campaign's LD_PRELOAD shim (tests/fault/faultinject.c) and the full sweep.
build/fault/faultinject.so: tests/fault/faultinject.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra $(EXTRA_CFLAGS) -O1 -g -fPIC -shared -o $@ $< -ldl

fault: deps all build/fault/faultinject.so
	@PIPEC=$(CURDIR)/bin/pipec tests/fault/run.sh build/fault/faultinject.so

# libFuzzer targets (tests/fuzz/fuzz_NAME.c), each with its seed corpus and dictionary;
# `make fuzz` builds all and runs each for FUZZ_SECONDS (default 60), new inputs going to
# build/fuzz/corpus_NAME. tests/t_fuzz_replay.sh replays the seed corpora in `make test`.
FUZZ_TARGETS = frontend csv passes
FUZZ_CORPUS_frontend = tests/fuzz/corpus
FUZZ_CORPUS_csv      = tests/fuzz/csv_corpus
FUZZ_CORPUS_passes   = tests/fuzz/pass_corpus
FUZZ_DICT_frontend   = tests/fuzz/pipe.dict
FUZZ_DICT_csv        = tests/fuzz/csv.dict
FUZZ_DICT_passes     = tests/fuzz/passes.dict

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(COMP_SRC) $(GEN_SRC) $(GEN_HDR)
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(INC_ALL) -O1 -g -fsanitize=fuzzer,address,undefined $(WARN) -Wno-sign-compare \
	  -o $@ $< $(COMP_SRC) $(GEN_SRC) $(LDLIBS)

fuzz: deps $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  case $$t in frontend) c=$(FUZZ_CORPUS_frontend) d=$(FUZZ_DICT_frontend);; \
	    csv) c=$(FUZZ_CORPUS_csv) d=$(FUZZ_DICT_csv);; passes) c=$(FUZZ_CORPUS_passes) d=$(FUZZ_DICT_passes);; esac; \
	  mkdir -p build/fuzz/corpus_$$t; \
	  echo "== fuzz_$$t: $${FUZZ_SECONDS:-60} s, seeds $$c"; \
	  build/fuzz/fuzz_$$t -max_total_time=$${FUZZ_SECONDS:-60} -max_len=4096 -print_final_stats=1 \
	    -dict=$$d build/fuzz/corpus_$$t $$c || exit 1; \
	done

# --- ThreadSanitizer (tests/t_tsan.sh) -------------------------------------------------
# The threaded runtime built with -fsanitize=thread; tests/t_tsan.sh compiles the
# generated programs of the examples with it and runs them (make test runs it too).
TSAN     = -O1 -g -fsanitize=thread -fno-omit-frame-pointer
RT_TOBJ  = $(RT_SRC:%.c=build/tsan/%.o)

build/tsan/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(RT_INC) $(BLAS_CFLAGS) $(TSAN) $(WARN) $(EXTRA_CFLAGS) -pthread -MMD -MP -c $< -o $@

-include $(RT_TOBJ:.o=.d)

build/tsan/libpiperun.a: $(RT_TOBJ)
	@rm -f $@
	ar rcs $@ $^

test-tsan: deps all build/tsan/libpiperun.a
	@PIPEC=$(CURDIR)/bin/pipec tests/t_tsan.sh --all

# --- coverage (docs/reliability.md) ----------------------------------------------------
# `make coverage`: pipec, its unit tests and libpiperun built with --coverage under
# build/cov/, the whole test suite run against them (the long sweeps whole, as in
# `make test-full`), then lcov's line and branch figures for compiler/ and runtime/ (build/cov/summary.txt, HTML in build/cov/html;
# the figures of a run are recorded in docs/reliability.md).
# Generated programs link build/cov/lib/libpiperun.a, a linker script naming the
# instrumented runtime and libgcov, so the runtime's coverage counts too. README.md and
# docs/ are linked beside build/cov/bin as they sit beside bin/, so the instrumented
# pipec finds `run`'s default training text where the plain one does.
COV      = -O0 -g --coverage
COBJ     = $(COMP_SRC:%.c=build/cov/%.o) $(GEN_SRC:build/gen/%.c=build/cov/gen/%.o)
RT_COBJ  = $(RT_SRC:%.c=build/cov/%.o)
COV_UNIT = $(UNIT_SRC:tests/unit/%.c=build/cov/tests/%)
LCOV     = lcov --quiet --rc lcov_branch_coverage=1

build/cov/gen/%.o: build/gen/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(INC_frontend) $(COV) -std=c11 -Wall -Wno-unused-function -Wno-sign-compare -Wno-unused-parameter -MMD -MP -c $< -o $@

build/cov/runtime/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(RT_INC) $(BLAS_CFLAGS) $(COV) $(WARN) -pthread -MMD -MP -c $< -o $@

build/cov/compiler/%.o: compiler/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(LAYER_INC) $(COV) $(WARN) -MMD -MP -c $< -o $@

-include $(COBJ:.o=.d) $(RT_COBJ:.o=.d)

build/cov/libpipec.a: $(COBJ)
	@rm -f $@
	ar rcs $@ $^

build/cov/libpiperun_cov.a: $(RT_COBJ)
	@rm -f $@
	ar rcs $@ $^

build/cov/lib/libpiperun.a: build/cov/libpiperun_cov.a
	@mkdir -p $(dir $@)
	echo "INPUT($(CURDIR)/build/cov/libpiperun_cov.a $$($(CC) -print-file-name=libgcov.a))" >$@

# __gcov_dump is exported so that the fault shim can write the counters of a run that
# ends in _exit (out of memory) before it does (tests/fault/faultinject.c).
build/cov/bin/pipec: build/cov/compiler/commands/main.o build/cov/libpipec.a
	@mkdir -p $(dir $@)
	$(CC) $(COV) -Wl,--undefined=__gcov_dump,--export-dynamic-symbol=__gcov_dump -o $@ $^ $(LDLIBS)

build/cov/tests/%: tests/unit/%.c tests/unit/testutil.h build/cov/libpipec.a build/cov/libpiperun_cov.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(INC_ALL) $(BLAS_CFLAGS) -Itests/unit $(COV) $(WARN) -o $@ $< \
	  build/cov/libpipec.a build/cov/libpiperun_cov.a -lcmocka $(BLAS_LIBS) -pthread $(LDLIBS)

coverage: deps all
	@$(MAKE) --no-print-directory build/cov/bin/pipec build/cov/lib/libpiperun.a $(COV_UNIT) \
	  build/fault/faultinject.so build/tests/deadlock_agree build/tsan/libpiperun.a
	@for l in $(OPTIONAL_LIBS); do [ ! -f build/$$l ] || cp build/$$l build/cov/lib/; done
	@ln -sfn $(CURDIR)/README.md build/cov/README.md && ln -sfn $(CURDIR)/docs build/cov/docs
	@find build/cov -name '*.gcda' -delete
	-@PIPEC_TEST_JOBS=1 PIPEC_TEST_FULL=1 PIPEC=$(CURDIR)/build/cov/bin/pipec PIPEC_ASAN=$(CURDIR)/build/cov/bin/pipec \
	  PIPERUN_INC=$(CURDIR)/runtime PIPERUN_LIB=$(CURDIR)/build/cov/lib tests/run.sh $(COV_UNIT) \
	  >build/cov/tests.log 2>&1; tail -n 1 build/cov/tests.log
	@$(LCOV) --ignore-errors gcov --capture --directory build/cov --output-file build/cov/all.info
	@$(LCOV) --extract build/cov/all.info '$(CURDIR)/compiler/*' --output-file build/cov/compiler.info
	@$(LCOV) --extract build/cov/all.info '$(CURDIR)/runtime/*' --output-file build/cov/runtime.info
	@for part in compiler runtime; do echo "$$part/:"; \
	  lcov --rc lcov_branch_coverage=1 --summary build/cov/$$part.info 2>&1 | grep -E 'lines|branches'; \
	done | tee build/cov/summary.txt
	@genhtml --quiet --branch-coverage --output-directory build/cov/html build/cov/all.info \
	  && echo "HTML: build/cov/html/index.html"

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/pipec/stdlib \
	  $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/doc/pipec/docs \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/vim/vimfiles/syntax $(DESTDIR)$(PREFIX)/share/vim/vimfiles/ftdetect \
	  $(DESTDIR)$(PREFIX)/share/pipec/vscode/syntaxes
	install -m 755 bin/pipec $(DESTDIR)$(PREFIX)/bin/pipec
	install -m 644 stdlib/*.pipe $(DESTDIR)$(PREFIX)/share/pipec/stdlib/
	install -m 644 build/libpiperun.a $(DESTDIR)$(PREFIX)/lib/
	@for l in $(OPTIONAL_LIBS); do \
	  if [ -f build/$$l ]; then echo "install -m 644 build/$$l $(DESTDIR)$(PREFIX)/lib/"; \
	    install -m 644 build/$$l $(DESTDIR)$(PREFIX)/lib/ || exit 1; fi; \
	done
	install -m 644 runtime/piperun.h runtime/region.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 build/pipec.1 $(DESTDIR)$(PREFIX)/share/man/man1/pipec.1
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/pipec/
	install -m 644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/pipec/docs/
	install -m 644 completions/pipec.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/pipec
	install -m 644 completions/_pipec $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_pipec
	install -m 644 build/editors/vim/syntax/pipe.vim $(DESTDIR)$(PREFIX)/share/vim/vimfiles/syntax/
	install -m 644 build/editors/vim/ftdetect/pipe.vim $(DESTDIR)$(PREFIX)/share/vim/vimfiles/ftdetect/
	install -m 644 build/editors/vscode/package.json build/editors/vscode/language-configuration.json \
	  $(DESTDIR)$(PREFIX)/share/pipec/vscode/
	install -m 644 build/editors/vscode/syntaxes/pipe.tmLanguage.json \
	  $(DESTDIR)$(PREFIX)/share/pipec/vscode/syntaxes/

# --- CUDA backend and MPI transport (docs/cuda.md) ---------------------------------
# `make cuda` builds build/libpiperun_cuda.a with nvcc (runtime/cuda/*.cu plus the CPU
# model, data, summary and trace files it reuses); `make mpi` builds
# build/libpiperun_mpi.a with mpicc; `make test-gpu` runs tests/gpu/*.sh when a GPU is
# there and prints "SKIP: no GPU" otherwise.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || { [ -x $(CUDA_HOME)/bin/nvcc ] && echo $(CUDA_HOME)/bin/nvcc; })
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVFLAGS    = -std=c++17 -O2 -g $(NVCC_ARCH) $(INC_rt_cuda) -I$(CUDA_HOME)/include \
             -Xcompiler -Wall,-Wextra --Werror all-warnings
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart
CU_SRC     = $(wildcard runtime/cuda/*.cu)
CU_OBJ     = $(CU_SRC:runtime/cuda/%.cu=build/cuda/%.o) \
             $(patsubst runtime/cuda/%.c,build/cuda/%.o,$(wildcard runtime/cuda/*.c))
# The CUDA runtime links no compiler file: the stream plan it enqueues from is a table in
# the generated program (docs/cuda.md "The stream plan's table"), its types plan/*.h.
# Its C files compile without the compiler's include paths, so none can include one.
# It reuses every CPU runtime file but the CPU backend's (runtime/cpu/), compiled again
# with PIPERUN_CUDA.
CU_CPPFLAGS = $(CPPFLAGS) $(INC_rt_cuda)
CU_CPU_SRC = $(filter-out runtime/cpu/%,$(RT_SRC))
CU_CPU_OBJ = $(CU_CPU_SRC:runtime/%.c=build/cuda/cpu/%.o)
MPICC     ?= mpicc

build/cuda/%.o: runtime/cuda/%.cu $(wildcard runtime/cuda/*.h runtime/cuda/*.cuh runtime/models/*.h) runtime/piperun.h runtime/core/core.h runtime/workloads/workload.h runtime/region.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

build/cuda/%.o: runtime/cuda/%.c $(wildcard runtime/cuda/*.h) runtime/piperun.h runtime/core/core.h runtime/workloads/workload.h runtime/region.h runtime/prtable.h plan/streams.h plan/opkinds.h
	@mkdir -p $(dir $@)
	$(CC) $(CU_CPPFLAGS) -I$(CUDA_HOME)/include $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/cuda/cpu/%.o: runtime/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(RT_INC) -DPIPERUN_CUDA $(BLAS_CFLAGS) $(CFLAGS) -pthread -MMD -MP -c $< -o $@

# the CPU files' header dependencies (-MMD), so that a changed header rebuilds them
-include $(CU_CPU_OBJ:.o=.d)

build/libpiperun_cuda.a: $(CU_OBJ) $(CU_CPU_OBJ)
	@rm -f $@
	ar rcs $@ $^

cuda:
	@if [ -z "$(NVCC)" ]; then echo "make cuda: nvcc not found (set CUDA_HOME or NVCC)"; exit 1; fi
	@$(MAKE) --no-print-directory build/libpiperun_cuda.a

build/mpi/piperun_mpi.o: runtime/mpi/piperun_mpi.c runtime/cpu/cpu.h runtime/piperun.h runtime/core/core.h runtime/workloads/workload.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(INC_rt_mpi) $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/libpiperun_mpi.a: build/mpi/piperun_mpi.o
	@rm -f $@
	ar rcs $@ $^

mpi: build/libpiperun.a build/libpiperun_mpi.a

# The CUDA backend with one process per rank (runtime/mpi/piperun_cuda_mpi.c: NCCL
# unique id over MPI_Bcast, ncclCommInitRank); needs no CUDA header, only mpi.h.
build/mpi/piperun_cuda_mpi.o: runtime/mpi/piperun_cuda_mpi.c runtime/cuda/cu_dist.h runtime/piperun.h runtime/core/core.h runtime/workloads/workload.h
	@mkdir -p $(dir $@)
	$(MPICC) $(CPPFLAGS) $(INC_rt_mpi) $(BLAS_CFLAGS) $(CFLAGS) -pthread -c $< -o $@

build/libpiperun_cuda_mpi.a: build/mpi/piperun_cuda_mpi.o
	@rm -f $@
	ar rcs $@ $^

cuda-mpi: cuda build/libpiperun_cuda_mpi.a

# What plain `make` adds to bin/pipec and build/libpiperun.a: each optional runtime whose
# compiler is installed (`make install` installs those that were built). A missing one
# is a line saying so, not an error: `pipec` then names the library it cannot find.
OPTIONAL_LIBS = libpiperun_mpi.a libpiperun_cuda.a libpiperun_cuda_mpi.a
NCCL_H = $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
runtimes: build/libpiperun.a
	@if command -v $(MPICC) >/dev/null 2>&1; then \
	  { $(MAKE) -q --no-print-directory build/libpiperun_mpi.a 2>/dev/null || $(MAKE) --no-print-directory build/libpiperun_mpi.a || exit 1; }; \
	else echo "make: skipped the MPI runtime (build/libpiperun_mpi.a): $(MPICC) not found (Debian: libopenmpi-dev)"; fi
	@if [ -z "$(NVCC)" ]; then \
	  echo "make: skipped the CUDA runtime (build/libpiperun_cuda.a): nvcc not found (install the CUDA toolkit or set CUDA_HOME)"; \
	elif [ -z "$(NCCL_H)" ]; then \
	  echo "make: skipped the CUDA runtime (build/libpiperun_cuda.a): nccl.h not found in $(CUDA_HOME)/include or /usr/include (install NCCL)"; \
	else \
	  { $(MAKE) -q --no-print-directory build/libpiperun_cuda.a 2>/dev/null || $(MAKE) --no-print-directory build/libpiperun_cuda.a || exit 1; }; \
	  if command -v $(MPICC) >/dev/null 2>&1; then { $(MAKE) -q --no-print-directory build/libpiperun_cuda_mpi.a 2>/dev/null || $(MAKE) --no-print-directory build/libpiperun_cuda_mpi.a || exit 1; }; \
	  else echo "make: skipped the CUDA MPI runtime (build/libpiperun_cuda_mpi.a): $(MPICC) not found"; fi; \
	fi

test-gpu: all
	@if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi; \
	  $(MAKE) --no-print-directory cuda mpi && tests/gpu/run.sh

# The GPU check that fits a short loan (tests/gpu/quick.sh: about 6 minutes on one H100
# with the build): run it first when a GPU is lent, then `make test-gpu` and the benchmarks.
test-gpu-quick: all
	@if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo "SKIP: no GPU"; exit 0; fi; \
	  $(MAKE) --no-print-directory cuda mpi cuda-mpi && tests/gpu/quick.sh

clean:
	rm -rf build bin
