package shaders

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSPIRVCurrent recompiles every shader with glslc and checks the
// committed .spv matches, so a GLSL edit cannot ship with stale SPIR-V.
func TestSPIRVCurrent(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc not installed (Debian package glslc): cannot check the committed SPIR-V is current")
	}
	srcs, err := filepath.Glob("*.comp")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no shader sources found: %v", err)
	}
	dir := t.TempDir()
	// Compile copies in a scratch directory with build.sh itself, so the
	// test checks the same command line `make shaders` runs.
	for _, f := range append(srcs, "common.glsl", "build.sh") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", filepath.Join(dir, "build.sh"))
	cmd.Env = append(os.Environ(), "GLSLC="+glslc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	for _, src := range srcs {
		name := strings.TrimSuffix(src, ".comp")
		fresh, err := os.ReadFile(filepath.Join(dir, name+".spv"))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(name + ".spv")
		if err != nil {
			t.Errorf("%s.spv missing: run shaders/build.sh", name)
			continue
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s.spv is stale: run shaders/build.sh", name)
		}
	}
}

// TestCode checks every embedded module loads and has a source.
func TestCode(t *testing.T) {
	names := Names()
	if len(names) < 11 {
		t.Fatalf("only %d shaders embedded: %v", len(names), names)
	}
	for _, n := range names {
		if _, err := Code(n); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(n + ".comp"); err != nil {
			t.Errorf("%s.spv has no source: %v", n, err)
		}
	}
	if _, err := Code("nonexistent"); err == nil {
		t.Error("Code of a missing shader succeeded")
	}
}
