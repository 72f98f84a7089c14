//go:build cgo

package vulkan

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/computetest"
	"github.com/govinfer/govinfer/compute/cpu"
)

// newTestBackend opens a backend with the validation layer on when it is
// installed, failing the test on any message it reports. Without a device
// the test skips, unless GOVINFER_REQUIRE_VULKAN=1 (CI), where it fails.
func newTestBackend(t *testing.T, o Options) *Backend {
	t.Helper()
	o.Validation = o.Validation || layerInstalled()
	var mu sync.Mutex
	o.Log = func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		t.Log(msg)
	}
	b, err := New(o)
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan backend: %v", err)
		}
		t.Skipf("no Vulkan device (set VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json for lavapipe): %v", err)
	}
	t.Log(b.Describe())
	if want := os.Getenv(envExpectSubgroup); want != "" && want != strconv.Itoa(b.SubgroupSize()) {
		b.Close()
		t.Fatalf("subgroup size %d, want %s (%s=%s)", b.SubgroupSize(), want, lpWidthEnv, os.Getenv(lpWidthEnv))
	}
	return b
}

const (
	// envExpectSubgroup, set by TestSubgroupSizes for its child processes,
	// is the subgroup size the device must report.
	envExpectSubgroup = "GOVINFER_VK_EXPECT_SUBGROUP"
	// lpWidthEnv sets lavapipe's vector width, and so its subgroup size
	// (width/32); it must be set before the driver loads.
	lpWidthEnv = "LP_NATIVE_VECTOR_WIDTH"
)

// TestSubgroupSizes reruns the conformance suite in child processes with
// lavapipe at subgroup sizes 4, 8 and 16, since the subgroup size is fixed
// when the driver loads.
func TestSubgroupSizes(t *testing.T) {
	if os.Getenv(envExpectSubgroup) != "" {
		t.Skip("in a child process")
	}
	b := newTestBackend(t, Options{})
	lavapipe := strings.Contains(b.Describe(), "llvmpipe")
	b.Close()
	if !lavapipe {
		t.Skip("not running on lavapipe; subgroup size cannot be forced")
	}
	for _, sg := range []int{4, 8, 16} {
		t.Run(fmt.Sprintf("subgroup%d", sg), func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConformance$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", lpWidthEnv, 32*sg), fmt.Sprintf("%s=%d", envExpectSubgroup, sg))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("conformance at subgroup size %d: %v\n%s", sg, err, out)
			}
			if !strings.Contains(string(out), "PASS") {
				t.Fatalf("child process did not pass:\n%s", out)
			}
		})
	}
}

// layerInstalled reports whether the Khronos validation layer is present.
func layerInstalled() bool {
	gipa, err := loaderOnce()
	if err != nil {
		return false
	}
	return layerAvailable(gipa, validationLayer)
}

func TestConformance(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend { return newTestBackend(t, Options{}) })
}

// TestConformanceSplitWeights runs the suite with 4 KiB weight chunks, so
// that every matrix with rows of at most 512 bytes is split over several
// bindings.
func TestConformanceSplitWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	computetest.Run(t, func(t *testing.T) compute.Backend { return newTestBackend(t, Options{MaxBindingBytes: 1 << 12}) })
}

// TestConformanceTiled runs the suite with the tiled matmul shader for
// every batch above 8, which CPU devices otherwise skip.
func TestConformanceTiled(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend {
		b := newTestBackend(t, Options{})
		b.tiledFrom = maxBatch + 1
		return b
	})
}

// TestConformanceMatvecUnroll runs the suite with the matvec shader
// issuing 2 and 4 weight loads per lane per iteration.
func TestConformanceMatvecUnroll(t *testing.T) {
	for _, u := range []int{2, 4} {
		t.Run(fmt.Sprintf("unroll%d", u), func(t *testing.T) {
			computetest.Run(t, func(t *testing.T) compute.Backend {
				b := newTestBackend(t, Options{})
				b.matvecUnroll = u
				return b
			})
		})
	}
}

// TestConformanceSubmitEach runs the suite with every dispatch submitted
// on its own, so every operation's inputs come from earlier submissions
// and all frames cycle through reuse.
func TestConformanceSubmitEach(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	computetest.Run(t, func(t *testing.T) compute.Backend {
		b := newTestBackend(t, Options{})
		b.rec.submitEvery = 1
		t.Cleanup(func() {
			if b.rec.submissions < b.rec.dispatches {
				t.Errorf("%d submissions for %d dispatches", b.rec.submissions, b.rec.dispatches)
			}
		})
		return b
	})
}

func TestDescribe(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	d := b.Describe()
	for _, want := range []string{"vulkan:", "subgroup", "device-local"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() = %q, missing %q", d, want)
		}
	}
}

// TestSplitWeightChunks checks that a lowered chunk size really splits a
// matrix and that vectors stay whole.
func TestSplitWeightChunks(t *testing.T) {
	b := newTestBackend(t, Options{MaxBindingBytes: 1 << 12})
	defer b.Close()
	w, err := b.LoadWeight("w", compute.BF16, 130, 256, make([]byte, 130*256*2))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(w.(*weight).chunks); n != 17 {
		t.Errorf("[130, 256] bf16 in 4 KiB chunks: %d chunks, want 17", n)
	}
	v, err := b.LoadWeight("v", compute.F32, 1, 5000, make([]byte, 5000*4))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(v.(*weight).chunks); n != 1 {
		t.Errorf("vector: %d chunks, want 1", n)
	}
}

// TestBadInputs checks that misuse surfaces as errors at the next Sync
// rather than as panics or device faults, and that the backend recovers.
func TestBadInputs(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	ctx := context.Background()
	x, _ := b.NewBuffer(10)
	y, _ := b.NewBuffer(10)
	w, err := b.LoadWeight("w", compute.F32, 4, 5, make([]byte, 80))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(){
		"copy past end":       func() { b.Copy(x, 5, y, 0, 6) },
		"overlapping copy":    func() { b.Copy(x, 0, x, 2, 5) },
		"matmul x too short":  func() { b.MatMul(y, x, w, 3) },
		"embed id range":      func() { b.Embed(x, w, []int32{4}) },
		"add past end":        func() { b.Add(x, y, 11) },
		"rope odd rotary":     func() { b.Rope(x, compute.DenseHeads(1, 4), 1, make([]float32, 3), 3) },
		"heads outside":       func() { b.L2Norm(x, compute.Heads{Off: 8, RowStride: 4, HeadStride: 4, Count: 1, Dim: 4}, 1, 1e-6) },
		"foreign buffer":      func() { b.Add(x, fakeBuffer{}, 1) },
		"conv kernel too big": func() { b.CausalConv1D(x, 5, 4, w, 5, []compute.ConvSeq{{Row: 0, N: 1, State: y}}) },
	}
	for name, f := range cases {
		f()
		if err := b.Sync(ctx); err == nil {
			t.Errorf("%s: Sync reported no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Still usable afterwards.
	b.Add(x, y, 10)
	if err := b.Sync(ctx); err != nil {
		t.Errorf("after errors: %v", err)
	}
	if _, err := b.LoadWeight("bad", compute.BF16, 2, 3, make([]byte, 5)); err == nil {
		t.Error("LoadWeight with short data succeeded")
	}
	if _, err := b.NewBuffer(-1); err == nil {
		t.Error("NewBuffer(-1) succeeded")
	}
}

type fakeBuffer struct{}

func (fakeBuffer) Len() int { return 100 }

// TestValidationMessagesFail checks that a validation error raised by a
// Vulkan call reaches Sync, so the validated conformance run means
// something.
func TestValidationMessagesFail(t *testing.T) {
	if !layerInstalled() {
		t.Skip("validation layer not installed (Debian package vulkan-validationlayers)")
	}
	b := newTestBackend(t, Options{Validation: true})
	defer b.Close()
	// A zero-sized buffer violates VUID-VkBufferCreateInfo-size-00912.
	var buf vk.Buffer
	info := vk.BufferCreateInfo{SType: vk.StructureTypeBufferCreateInfo, Size: 0,
		Usage: vk.BufferUsageFlags(vk.BufferUsageStorageBufferBit), SharingMode: vk.SharingModeExclusive}
	if vk.CreateBuffer(b.dev, &info, nil, &buf) == vk.Success && buf != vk.NullBuffer {
		defer vk.DestroyBuffer(b.dev, buf, nil)
	}
	if err := b.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "validation") {
		t.Fatalf("Sync after an invalid call = %v, want a validation error", err)
	}
}

// TestMemoryBandwidth checks that the copy-bandwidth measurement runs,
// reports a plausible rate and leaves the backend usable.
func TestMemoryBandwidth(t *testing.T) {
	b := newTestBackend(t, Options{})
	defer b.Close()
	ctx := context.Background()
	x, _ := b.NewBuffer(4)
	if err := b.Upload(x, 0, []float32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	gbps, err := b.MemoryBandwidth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy bandwidth %.1f GB/s (read + write)", gbps)
	if gbps < 0.1 || gbps > 100000 {
		t.Errorf("bandwidth %.3g GB/s is implausible", gbps)
	}
	b.Add(x, x, 4)
	got := make([]float32, 4)
	if err := b.Download(ctx, got, x, 0); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != float32(2*(i+1)) {
			t.Fatalf("after MemoryBandwidth: got %v, want [2 4 6 8]", got)
		}
	}
}

// TestConformanceAttentionSplit runs the suite with the cache length split
// into blocks of 16 positions, so attention runs as partial softmaxes over
// many splits plus the merge pass even at the suite's short lengths.
func TestConformanceAttentionSplit(t *testing.T) {
	computetest.Run(t, func(t *testing.T) compute.Backend {
		b := newTestBackend(t, Options{})
		b.attnSplitLen = attnBlock
		return b
	})
}

// TestDeltaRuleChunked runs the suite's delta rule case with the chunked
// form for every sequence of at least one token, and again with scratch
// for only three chunks of the suite's 200-token sequence with two 128-wide
// value heads, so that it runs in two windows.
func TestDeltaRuleChunked(t *testing.T) {
	var run func(*computetest.Env) error
	for _, c := range computetest.Cases() {
		if c.Name == "GatedDeltaRule" {
			run = c.Fn
		}
	}
	if run == nil {
		t.Fatal("the suite has no GatedDeltaRule case")
	}
	ref := cpu.New(cpu.Options{Threads: 2})
	defer ref.Close()
	for _, scratch := range []uint64{0, 3 * 4 * uint64(deltaChunkFloats(&compute.DeltaRule{Nv: 2, Dk: 128, Dv: 128}))} {
		t.Run(fmt.Sprintf("scratch%d", scratch), func(t *testing.T) {
			b := newTestBackend(t, Options{})
			defer b.Close()
			b.deltaChunkMin = 1
			if scratch > 0 {
				b.deltaScratchMax = scratch
			}
			e := &computetest.Env{Ref: ref, DUT: b, Rng: rand.New(rand.NewPCG(7, 11)), Ctx: t.Context()}
			if err := run(e); err != nil {
				t.Error(err)
			}
			if err := b.Sync(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
}
