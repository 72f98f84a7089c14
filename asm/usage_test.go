package asm

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestNoAllocs checks that the kernels do not allocate.
func TestNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols, n = 13, 70, 9
	w := randU16(r, kinds[0], rows*cols)
	wf := randF32(r, rows*cols)
	x := randF32(r, n*cols)
	xb := randU16(r, kinds[0], n*cols)
	dst := make([]float32, n*rows)
	for _, k := range kernelSets(t) {
		calls := map[string]func(){
			"DotBF16":    func() { k.DotBF16(w[:cols], x) },
			"DotF16":     func() { k.DotF16(w[:cols], x) },
			"DotF32":     func() { k.DotF32(wf[:cols], x) },
			"Axpy":       func() { k.Axpy(0.5, x[:cols], dst) },
			"Scale":      func() { k.Scale(0.5, dst) },
			"MatVecBF16": func() { _ = k.MatVecBF16(dst, w, rows, cols, x) },
			"MatVecF16":  func() { _ = k.MatVecF16(dst, w, rows, cols, x) },
			"MatVecF32":  func() { _ = k.MatVecF32(dst, wf, rows, cols, x) },
			"MatMulBF16": func() { _ = k.MatMulBF16(dst, rows, w, rows, cols, x, n) },
			"MatMulF16":  func() { _ = k.MatMulF16(dst, rows, w, rows, cols, x, n) },
			"MatMulF32":  func() { _ = k.MatMulF32(dst, rows, wf, rows, cols, x, n) },
			"GemmBF16":   func() { _ = k.GemmBF16(dst, rows, w, rows, cols, xb, n) },
		}
		for name, f := range calls {
			if a := testing.AllocsPerRun(20, f); a != 0 {
				t.Errorf("%s %s: %v allocations per call", k.Name(), name, a)
			}
		}
	}
}

// TestConcurrentRowBlocks splits one product across goroutines by row blocks,
// the way the CPU backend does, and checks it matches the one-call result.
func TestConcurrentRowBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols, n, workers = 64, 300, 7, 4
	w := randU16(r, kinds[0], rows*cols)
	x := randF32(r, n*cols)
	for _, k := range kernelSets(t) {
		want := make([]float32, n*rows)
		if err := k.MatMulBF16(want, rows, w, rows, cols, x, n); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n*rows)
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for b := range workers {
			r0, r1 := b*rows/workers, (b+1)*rows/workers
			wg.Go(func() {
				for range 50 {
					errs[b] = k.MatMulBF16(got[r0:], rows, w[r0*cols:r1*cols], r1-r0, cols, x, n)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: value %d: concurrent %g, single call %g", k.Name(), i, got[i], want[i])
			}
		}
	}
}

// TestGeneratedUpToDate regenerates the assembly and compares it with the
// files in the package.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	// The generator runs on the host even when the tests are cross-compiled
	// (GOARCH=arm64 with an -exec emulator).
	host, err := exec.Command(goTool, "env", "GOHOSTOS", "GOHOSTARCH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	hostOS, hostArch, _ := strings.Cut(strings.TrimSpace(string(host)), "\n")
	dir := t.TempDir()
	cmd := exec.Command(goTool, "run", "./internal/asmgen", "-out", dir)
	cmd.Env = append(os.Environ(), "GOOS="+hostOS, "GOARCH="+hostArch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("asmgen: %v\n%s", err, out)
	}
	gen, err := filepath.Glob(filepath.Join(dir, "*.s"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("asmgen wrote no files (%v)", err)
	}
	have, _ := filepath.Glob("*.s")
	if len(have) != len(gen) {
		t.Errorf("package has %d .s files, generator writes %d", len(have), len(gen))
	}
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Base(g))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run go generate in asm/", filepath.Base(g))
		}
	}
}
