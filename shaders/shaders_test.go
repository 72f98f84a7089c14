package shaders

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envGLSLCCoopmat names a glslc that compiles GL_KHR_cooperative_matrix
// (glslang 13 or later; scripts/vk-sysroot.sh unpacks one), for the
// shaders that need it. Without it those shaders are left unchecked, unless
// GOVINFER_REQUIRE_COOPMAT=1, where that fails.
const envGLSLCCoopmat = "GOVINFER_GLSLC_COOPMAT"

// TestSPIRVCurrent recompiles every shader with glslc and checks the
// committed .spv matches, so a GLSL edit cannot ship with stale SPIR-V.
func TestSPIRVCurrent(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc not installed (Debian package glslc): cannot check the committed SPIR-V is current")
	}
	all, err := filepath.Glob("*.comp")
	if err != nil || len(all) == 0 {
		t.Fatalf("no shader sources found: %v", err)
	}
	glslcCoopmat := os.Getenv(envGLSLCCoopmat)
	var srcs []string
	for _, src := range all {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("GL_KHR_cooperative_matrix")) && glslcCoopmat == "" {
			if os.Getenv("GOVINFER_REQUIRE_COOPMAT") == "1" {
				t.Errorf("%s needs a glslc that knows GL_KHR_cooperative_matrix: set %s", src, envGLSLCCoopmat)
			} else {
				t.Logf("%s not checked: set %s to a glslc that knows GL_KHR_cooperative_matrix", src, envGLSLCCoopmat)
			}
			continue
		}
		srcs = append(srcs, src)
	}
	includes, err := filepath.Glob("*.glsl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Compile copies in a scratch directory with build.sh itself, so the
	// test checks the same command line `make shaders` runs.
	for _, f := range append(append(srcs, includes...), "build.sh") {
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
	if glslcCoopmat != "" {
		cmd.Env = append(cmd.Env, "GLSLC_COOPMAT="+glslcCoopmat)
	}
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

// TestReflect checks the bindings read from each module's SPIR-V against
// the declarations in its GLSL source (and the files it includes): every
// `layout(binding = N) ... buffer` is used, and written unless readonly.
func TestReflect(t *testing.T) {
	decl := regexp.MustCompile(`layout\(binding = (\d+)\)\s+(readonly\s+|writeonly\s+)?buffer`)
	include := regexp.MustCompile(`(?m)^#include "([^"]+)"`)
	for _, name := range Names() {
		src, err := os.ReadFile(name + ".comp")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range include.FindAllSubmatch(src, -1) {
			inc, err := os.ReadFile(string(m[1]))
			if err != nil {
				t.Fatal(err)
			}
			src = append(src, inc...)
		}
		var want Bindings
		for _, m := range decl.FindAllSubmatch(src, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			want.Used |= 1 << n
			if !strings.HasPrefix(string(m[2]), "readonly") {
				want.Written |= 1 << n
			}
		}
		code, err := Code(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Reflect(code)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s: reflected bindings used %08b written %08b, source declares used %08b written %08b",
				name, got.Used, got.Written, want.Used, want.Written)
		}
		if want.Used == 0 {
			t.Errorf("%s: no storage buffers found in the source", name)
		}
	}
	if _, err := Reflect([]uint32{1, 2, 3}); err == nil {
		t.Error("Reflect accepted a non-SPIR-V module")
	}
	if _, err := Reflect([]uint32{spirvMagic, 0, 0, 0, 0, 5 << 16}); err == nil {
		t.Error("Reflect accepted a truncated instruction")
	}
}
