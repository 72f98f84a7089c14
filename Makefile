# govinfer build, test and demo targets. `make help` lists them.
GO      ?= go
BIN     ?= bin/govinfer
PKGS    := ./...

# The Debian 13 sysroot with a lavapipe that has VK_KHR_cooperative_matrix
# (scripts/vk-sysroot.sh), for the cooperative-matrix shaders.
VKSYS       ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/govinfer/vk-sysroot-trixie

# The demo's random checkpoint is made once, deterministically, here.
DEMO_DIR    ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/govinfer/demo-qwen3.5-random
DEMO_REPORT ?= demo-report.json

.PHONY: help build test test-coopmat race test-short vet fmt bench shaders demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build bin/govinfer
	$(GO) build -o $(BIN) ./cmd/govinfer

test: ## run the whole test suite (what CI runs)
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)
	# The pure-Go kernel twins alone (no assembly), on the kernels and the goldens.
	$(GO) test -count=1 -tags noasm ./asm/ ./compute/cpu/ ./model/
	# The NEON kernels, cross-compiled and run under qemu where it is installed; and quant, whose
	# blocks must stay llama.cpp's bytes on arm64, where Go fuses multiply-adds (about a minute).
	if command -v qemu-aarch64-static >/dev/null; then \
		GOARCH=arm64 $(GO) test -count=1 -exec qemu-aarch64-static ./asm/... ./quant/; \
	else echo "qemu-aarch64-static not installed: arm64 kernels not tested"; fi

test-coopmat: ## the cooperative-matrix shaders on a lavapipe that has them (downloads a Debian 13 sysroot once; CI runs it)
	scripts/vk-sysroot.sh "$(VKSYS)" >/dev/null
	GOVINFER_REQUIRE_COOPMAT=1 GOVINFER_GLSLC_COOPMAT="$(VKSYS)/glslc" $(GO) test -count=1 -run TestSPIRVCurrent ./shaders/
	# Every module through spirv-val, which knows SPV_KHR_cooperative_matrix (so matmulcm16, which
	# lavapipe cannot run, is at least validated).
	for f in shaders/*.spv; do "$(VKSYS)/run" "$(VKSYS)/root/usr/bin/spirv-val" --target-env vulkan1.1 "$$f" || exit 1; done
	GOVINFER_REQUIRE_COOPMAT=1 $(GO) test -count=1 -exec "$(VKSYS)/run" -run 'Coopmat|BF16FitsF16|Quant' ./compute/vulkan/ ./model/

race: ## the race detector over the concurrent packages (not part of CI: ~3 minutes here)
	$(GO) test -race -short -count=1 ./engine/ ./httpapi/ ./compute/cpu/ ./asm/ ./tokenizer/ ./diag/... ./cmd/govinfer/

test-short: ## skip the slower tests
	$(GO) test -short -count=1 $(PKGS)

vet: ## go vet
	$(GO) vet $(PKGS)

fmt: ## gofmt every file
	gofmt -w $$(git ls-files '*.go')

demo: build ## serve a small random checkpoint in-process and run the diagnostic against it
	@if [ ! -f "$(DEMO_DIR)/model.safetensors" ]; then \
		echo "creating the demo checkpoint in $(DEMO_DIR) (once)"; \
		$(BIN) make-random --out "$(DEMO_DIR)" --shape small --seed 1; \
	fi
	$(BIN) diag --model-dir "$(DEMO_DIR)" --report "$(DEMO_REPORT)"
	@echo
	@echo "The weights are random: the behaviour checks fail, as they must. The plumbing checks"
	@echo "(identical greedy completions, request isolation, decode timing, long-context prefill) are real."
	@echo "Report: $(DEMO_REPORT)"
	@echo "The checkpoint: $(DEMO_DIR). Chat with it: $(BIN) chat --model $(DEMO_DIR)"
	@echo "or serve it (the chat page at http://127.0.0.1:8000/): $(BIN) serve --model $(DEMO_DIR)"

bench: ## decode and prefill benchmarks of the model package
	$(GO) test -run '^$$' -bench . -benchtime 3x ./model/

shaders: ## recompile the GLSL shaders to the committed SPIR-V (needs glslc; the cooperative-matrix ones take the sysroot's)
	scripts/vk-sysroot.sh "$(VKSYS)" >/dev/null
	GLSLC_COOPMAT="$(VKSYS)/glslc" sh shaders/build.sh

clean: ## remove build outputs
	rm -rf bin
