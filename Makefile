# sharc build. `make` builds the library, the sharc command and the test
# runner; `make test` and `make run` first install missing Debian packages.
CC      ?= gcc
BUILD   ?= build
OPT     ?= -O3
SAN     ?=
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS  := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fopenmp -fno-math-errno -fPIC \
           -Iinclude -DSHARC_MULTIARCH='"$(MULTIARCH)"' $(SAN) $(EXTRA_CFLAGS)
# MPI (Open MPI or MPICH, whichever Debian's mpi-c alternative names); only
# src/comm/comm_mpi.c and comm_mpi_shm.c see its headers.
MPI_CFLAGS := $(shell pkg-config --cflags mpi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs mpi-c 2>/dev/null)
LDLIBS  = -fopenmp $(MPI_LIBS) $(CUDA_LIBS) -lyaml -ljson-c -lonig -lutf8proc -lnettle -lz -luring -ldl -lmvec -lm -lpthread $(SAN)

# CUDA (note [cuda-build] in docs/ARCHITECTURE.md): src/device/cuda/*.cu are
# compiled whenever nvcc is found under CUDA_HOME (CUDA=0 turns it off); the
# CUDA runtime is linked statically (it loads the driver, libcuda.so.1, only
# at the first CUDA call), cuBLASLt is dlopen'ed when a cuda device opens.
# Without nvcc, src/device/cuda/absent.c says that CUDA support was not built.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA      ?= $(if $(wildcard $(NVCC)),1,0)
CUDA_ARCH ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo $(CUDA_ARCH) -Iinclude -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter \
             $(if $(findstring -Werror,$(EXTRA_CFLAGS)),-Werror=all-warnings) $(EXTRA_NVCCFLAGS)
ifeq ($(CUDA),1)
CUDA_SRC  := $(wildcard src/device/cuda/*.cu)
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++
else
CUDA_OBJ  := $(BUILD)/src/device/cuda/absent.o
CUDA_LIBS :=
endif

# The CUDA simulator (note [cudasim]): the same kernel sources compiled by
# the host C++ compiler against tests/cudasim's runtime and cuBLASLt, so CI
# runs tests/gpu (build/sim/gpu_kernels, gpu_model) and the cuda device
# without a GPU. Needs only CUDA's headers (CUDASIM=0 turns it off).
CXX       ?= g++
CUDASIM   ?= $(if $(wildcard $(CUDA_HOME)/include/cublasLt.h),1,0)
SIM       := $(BUILD)/sim
SIM_CXXFLAGS := -std=c++17 -g -O1 -fPIC -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
                -U_FORTIFY_SOURCE $(filter -Werror,$(EXTRA_CFLAGS))
SIM_OBJ   := $(patsubst src/device/cuda/%.cu,$(SIM)/%.o,$(wildcard src/device/cuda/*.cu)) $(SIM)/cudasim.o

LIB_SRC := $(wildcard src/core/*.c src/device/*.c src/device/cpu/*.c src/model/*.c src/fsdp/*.c src/optim/*.c src/data/*.c \
                      src/io/*.c src/config/*.c src/train/*.c src/comm/*.c \
                      src/ckpt/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ := $(BUILD)/src/cli/main.o $(BUILD)/src/cli/doctor.o $(BUILD)/src/cli/doctor_env.o
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(wildcard bench/*.c)

.PHONY: all deps test run asan tsan clean fixtures bench format fuzz hf-fixtures tokenizer-fixtures
all: $(BUILD)/libsharc.a $(BUILD)/libsharc.so $(BUILD)/sharc $(BUILD)/sharc_tests $(BUILD)/mpi_tests \
     $(BUILD)/mpi_nccl $(BUILD)/libfake_nccl.so \
     $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%) $(if $(filter 1,$(CUDA)),$(BUILD)/gpu_kernels $(BUILD)/gpu_model) \
     $(if $(filter 1,$(CUDASIM)),$(SIM)/sharc $(SIM)/gpu_kernels $(SIM)/gpu_model $(SIM)/libcudasim_cublaslt.so \
                                  $(SIM)/cudasim_selftest)

$(BUILD)/%.o: %.c $(wildcard include/sharc/*.h) $(wildcard src/*/*.h src/*/*/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ptxas's report of each kernel's registers, spills and shared memory is kept
# beside the object (X.ptxas; tests/cli/cuda_resources.sh reads it, note
# [cuda-resources]); the rest of nvcc's messages are shown as usual
$(BUILD)/src/device/cuda/%.o: src/device/cuda/%.cu $(wildcard include/sharc/*.h) $(wildcard src/device/*.h src/device/cuda/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2> $@.ptxas; rc=$$?; \
	  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $@.ptxas >&2; exit $$rc

# tests/gpu/*.c: gpu_kernels (each CUDA kernel against the CPU one), gpu_model
# (whole-model forward + backward); tests/gpu/run.sh runs them on a GPU machine
$(BUILD)/gpu_%: tests/gpu/%.c $(BUILD)/libsharc.a $(wildcard include/sharc/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libsharc.a $(LDLIBS)

# the simulator's build: kernel sources rewritten (tests/cudasim/rewrite.sh)
# and compiled with cudasim.h first; the C objects are the main build's
$(SIM)/%.cpp: src/device/cuda/%.cu tests/cudasim/rewrite.sh
	@mkdir -p $(dir $@)
	tests/cudasim/rewrite.sh $< $@
$(SIM)/%.o: $(SIM)/%.cpp tests/cudasim/cudasim.h $(wildcard include/sharc/*.h src/device/*.h src/device/cuda/*.h)
	$(CXX) $(SIM_CXXFLAGS) -include tests/cudasim/cudasim.h -Isrc/device/cuda -Iinclude -I$(CUDA_HOME)/include -c $< -o $@
$(SIM)/cudasim.o: tests/cudasim/cudasim.cpp tests/cudasim/cudasim.h
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -Itests/cudasim -I$(CUDA_HOME)/include -c $< -o $@
$(SIM)/selftest.cpp: tests/cudasim/selftest.cu tests/cudasim/rewrite.sh
	@mkdir -p $(dir $@)
	tests/cudasim/rewrite.sh $< $@
$(SIM)/cudasim_selftest: $(SIM)/selftest.o $(SIM)/cudasim.o
	$(CXX) -rdynamic -o $@ $^ -lpthread
$(SIM)/libcudasim_cublaslt.so: tests/cudasim/cublaslt.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -I$(CUDA_HOME)/include -O2 -shared -o $@ $<
$(SIM)/libsharc.a: $(LIB_SRC:%.c=$(BUILD)/%.o) $(SIM_OBJ)
	@rm -f $@
	ar rcs $@ $^
SIM_LDLIBS = -rdynamic -fopenmp $(MPI_LIBS) -lyaml -ljson-c -lonig -lutf8proc -lnettle -lz -luring -ldl -lmvec -lm \
             -lpthread -lstdc++ $(SAN)
$(SIM)/sharc: $(CLI_OBJ) $(SIM)/libsharc.a
	$(CC) -o $@ $^ $(SIM_LDLIBS)
$(SIM)/gpu_%: tests/gpu/%.c $(SIM)/libsharc.a $(wildcard include/sharc/*.h)
	$(CC) $(CFLAGS) -o $@ $< $(SIM)/libsharc.a $(SIM_LDLIBS)

MPI_OBJ := $(BUILD)/src/comm/comm_mpi.o $(BUILD)/src/comm/comm_mpi_shm.o
$(MPI_OBJ): $(BUILD)/%.o: %.c $(wildcard include/sharc/*.h) $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/libsharc.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libsharc.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(BUILD)/sharc: $(CLI_OBJ) $(BUILD)/libsharc.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/sharc_tests: $(TEST_OBJ) $(BUILD)/libsharc.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/mpi_tests: $(BUILD)/tests/mpi/mpi_tests.o $(BUILD)/libsharc.a
	$(CC) -o $@ $^ $(LDLIBS)

# note [nccl]: the NCCL backend against MPI's, with a test double of libnccl
# (and of the few CUDA driver calls) on host memory over MPI
$(BUILD)/mpi_nccl: $(BUILD)/tests/mpi/mpi_nccl.o $(BUILD)/libsharc.a
	$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/libfake_nccl.so: tests/support/fake_nccl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes $(MPI_CFLAGS) -shared -o $@ $< $(MPI_LIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libsharc.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -o $@ $^ $(LDLIBS)

deps:
	@scripts/deps.sh test

# The whole suite: unit tests in their own processes, then tests/cli/*.sh.
test: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/sharc_tests --scripts tests/cli --bin $(BUILD)

# The main job: train a small byte-level GPT on the King James Bible, save, sample.
run: deps
	@$(MAKE) --no-print-directory all
	scripts/run.sh $(BUILD)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@$(MAKE) --no-print-directory all BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
	ASAN_OPTIONS=detect_leaks=1 build-asan/sharc_tests --scripts tests/cli --bin build-asan \
	    --timeout-scale 4

# The threaded paths (the optimizer's offload thread, the async checkpoint
# writer, the watchdog) under ThreadSanitizer: tests/tsan/run.sh, ~1 min
# after a build of its own (note [sanitizers] in docs/ARCHITECTURE.md).
tsan: deps
	@$(MAKE) --no-print-directory all BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread"
	tests/tsan/run.sh build-tsan

# Regenerate the PyTorch fixtures under tests/fixtures (needs python3-torch).
fixtures:
	@scripts/deps.sh dev
	/usr/bin/python3 tools/gen_fixtures.py tests/fixtures

# Regenerate tests/fixtures/hf_reference.safetensors: sharc exports the
# seeded tiny models, tools/hf_reference.py (plain PyTorch) computes logits.
hf-fixtures: all
	@scripts/deps.sh dev
	rm -rf $(BUILD)/hf-fixture && mkdir -p $(BUILD)/hf-fixture
	SHARC_HF_FIXTURE_OUT=$(abspath $(BUILD))/hf-fixture $(BUILD)/sharc_tests --filter hf_reference_models_export
	/usr/bin/python3 tools/hf_reference.py tests/fixtures/hf_reference.safetensors \
	    gpt2=$(BUILD)/hf-fixture/gpt2 llama=$(BUILD)/hf-fixture/llama qwen2=$(BUILD)/hf-fixture/qwen2 \
	    qwen3=$(BUILD)/hf-fixture/qwen3 llama31=$(BUILD)/hf-fixture/llama31 mistral=$(BUILD)/hf-fixture/mistral \
	    qwen3_moe=$(BUILD)/hf-fixture/qwen3_moe

# Regenerate the tokenizer, chat-template and SFT references under
# tests/fixtures/{tokenizer,chat,sft} (needs the npm files of
# scripts/fetch_tokenizers.sh, node, python3-jinja2 and bible-kjv).
TOKCACHE ?= $(or $(SHARC_TOKENIZERS),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sharc/tokenizers)
tokenizer-fixtures:
	@scripts/deps.sh test
	@mkdir -p $(BUILD)
	bible -f 'Gen1:1-Rev22:21' > $(BUILD)/kjv.txt
	for n in gpt2 llama3 qwen3; do node tools/tokenizer_reference.mjs $(TOKCACHE)/js/tokenizers.mjs $(TOKCACHE)/$$n $$n \
	    --whole kjv $(BUILD)/kjv.txt --lines multilingual tests/tokenizer/multilingual.txt \
	    --jsonl fuzz tests/tokenizer/fuzz.jsonl > tests/fixtures/tokenizer/$$n.ref || exit 1; done
	node tools/tokenizer_reference.mjs $(TOKCACHE)/js/tokenizers.mjs tests/fixtures/tokenizer/small small \
	    --whole kjv $(BUILD)/kjv.txt --lines multilingual tests/tokenizer/multilingual.txt \
	    --jsonl fuzz tests/tokenizer/fuzz.jsonl > tests/fixtures/tokenizer/small.ref
	/usr/bin/python3 tools/chat_reference.py $(TOKCACHE) tests/fixtures/chat
	/usr/bin/python3 tools/openrlhf_reference.py $(TOKCACHE) tests/fixtures/sft/cases.ref

# libFuzzer on the safetensors reader (Debian's clang), ASan + UBSan, for
# FUZZ_SECONDS; new inputs go to $(BUILD)/fuzz-corpus, crashes to $(BUILD)/.
FUZZ_SECONDS ?= 60
FUZZ_SRC := tests/fuzz/fuzz_safetensors.c src/io/safetensors.c src/core/fileio.c src/core/dtype.c src/core/status.c
$(BUILD)/fuzz_safetensors: $(FUZZ_SRC) $(wildcard include/sharc/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(FUZZ_SRC) -o $@ -ljson-c -lm
# config.json / index.json of an HF directory (hf.c instrumented, the rest from libsharc.a)
$(BUILD)/fuzz_hf_json: tests/fuzz/fuzz_hf_json.c src/io/hf.c $(FUZZ_SRC) $(BUILD)/libsharc.a
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fno-omit-frame-pointer \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined tests/fuzz/fuzz_hf_json.c src/io/hf.c \
	    $(filter-out tests/fuzz/fuzz_safetensors.c,$(FUZZ_SRC)) $(BUILD)/libsharc.a -o $@ -fopenmp=libgomp $(MPI_LIBS) \
	    -lyaml -ljson-c -lz -luring -ldl -lmvec -lm -lpthread
# tokenizer.json (+ config and a text) into the tokenizer loader and encoder
FUZZ_TOK_SRC := tests/fuzz/fuzz_tokenizer.c src/data/tokenizer.c src/data/encoder.c src/core/fileio.c src/core/status.c
$(BUILD)/fuzz_tokenizer: $(FUZZ_TOK_SRC) $(wildcard include/sharc/*.h) src/data/tokenizer_impl.h
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fno-omit-frame-pointer -fopenmp=libgomp \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(FUZZ_TOK_SRC) -o $@ \
	    -ljson-c -lonig -lutf8proc -lnettle -lm
fuzz: $(BUILD)/fuzz_safetensors $(BUILD)/fuzz_hf_json $(BUILD)/fuzz_tokenizer
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-hf $(BUILD)/fuzz-corpus-tok
	$(BUILD)/fuzz_safetensors -max_total_time=$(FUZZ_SECONDS) -dict=tests/fuzz/safetensors.dict \
	    -artifact_prefix=$(BUILD)/ -print_final_stats=1 $(BUILD)/fuzz-corpus tests/fuzz/corpus
	$(BUILD)/fuzz_hf_json -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(BUILD)/ -print_final_stats=1 \
	    $(BUILD)/fuzz-corpus-hf tests/fuzz/corpus_hf
	$(BUILD)/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) -dict=tests/fuzz/tokenizer.dict -max_len=20000 \
	    -artifact_prefix=$(BUILD)/ -print_final_stats=1 $(BUILD)/fuzz-corpus-tok tests/fuzz/corpus_tokenizer

bench: all
	bench/run.sh $(BUILD)

clean:
	rm -rf build build-asan build-tsan

# The house style (.clang-format; tests/cli/format.sh checks it in the suite).
format:
	git ls-files '*.c' '*.h' '*.cu' '*.cpp' | xargs clang-format -i
