package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/randmodel"
)

// familyShapes are the Qwen3.5 releases make-random knows.
var familyShapes = []string{"qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-27b",
	"qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b"}

// TestMakeRandomShapeConfigOnly writes every family shape's config with
// --config-only, in full and shortened by --layers, and loads it.
func TestMakeRandomShapeConfigOnly(t *testing.T) {
	_, help, _ := run(t, "", "make-random", "--help")
	for _, name := range familyShapes {
		if !strings.Contains(help, name) {
			t.Errorf("--help does not list %s", name)
		}
		want, err := randmodel.LookupShape(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, layers := range []int{0, 2, 6} {
			dir := t.TempDir()
			args := []string{"make-random", "--out", dir, "--shape", name, "--config-only"}
			if layers > 0 {
				args = append(args, "--layers", strconv.Itoa(layers))
			}
			code, _, errOut := run(t, "", args...)
			if code != exitOK {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			if !strings.Contains(errOut, "without weights") {
				t.Errorf("%v: stderr %q", args, errOut)
			}
			if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); !os.IsNotExist(err) {
				t.Errorf("%v wrote weights (%v)", args, err)
			}
			c, err := model.LoadConfig(dir)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			n := want.Layers
			if layers > 0 {
				n = layers
			}
			if c.HiddenSize != want.Hidden || c.NumLayers != n || c.VocabSize != 248320 || c.NumExperts != want.Experts ||
				c.MoEIntermediateSize != want.ExpertWidth || c.IntermediateSize != want.Intermediate ||
				!slices.Equal(c.LayerTypes, randmodel.LayerTypes(n)) {
				t.Errorf("%v: loaded %+v", args, c)
			}
		}
	}
}

// TestMakeRandomMaxGB: a write larger than --max-gb is refused in one line
// that gives the size, before anything is written; the bench models fit the
// default limit.
func TestMakeRandomMaxGB(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "qwen3.5-35b-a3b")
	if code != exitUsage {
		t.Fatalf("exit %d, want %d: %s", code, exitUsage, errOut)
	}
	if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; lines != 1 ||
		!strings.Contains(errOut, "69.32 GB") || !strings.Contains(errOut, "--config-only") {
		t.Errorf("want a one-line refusal with the size, got %q", errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused write created %s (%v)", dir, err)
	}
	// make_moe_bench_model.sh's 35B-A3B of 8 layers and a whole 9B fit.
	for _, c := range []struct {
		shape  string
		layers int
	}{{"qwen3.5-35b-a3b", 8}, {"qwen3.5-9b", 0}, {"qwen3.5-9b", 4}} {
		s, err := randmodel.LookupShape(c.shape)
		if err != nil {
			t.Fatal(err)
		}
		if c.layers > 0 {
			s.Layers = c.layers
		}
		if n := randmodel.Size(s, randmodel.Options{}).Total; n > defaultMaxGB*1e9 {
			t.Errorf("%s with %d layers: %d bytes, over the default --max-gb %d", c.shape, s.Layers, n, defaultMaxGB)
		}
	}
}

// TestMakeRandomFamilyShape writes two layers of the 0.8B's widths (a small
// vocabulary) and generates with them; GOVINFER_TEST_FULL_SHAPES=1 also
// writes two whole layers of the 35B-A3B (5.4 GB, a minute or more) and
// generates with it.
func TestMakeRandomFamilyShape(t *testing.T) {
	cases := [][]string{{"--shape", "qwen3.5-0.8b", "--layers", "2", "--vocab", "1024", "--no-tokenizer"}}
	if os.Getenv("GOVINFER_TEST_FULL_SHAPES") != "" && !testing.Short() {
		cases = append(cases, []string{"--shape", "qwen3.5-35b-a3b", "--layers", "2"})
	}
	for _, args := range cases {
		dir := t.TempDir()
		code, _, errOut := run(t, "", append([]string{"make-random", "--out", dir}, args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		// The size comes first, then the progress line.
		if i, j := strings.Index(errOut, "to write ("), strings.Index(errOut, "writing "+dir); i < 0 || j < i {
			t.Errorf("%v: stderr %q", args, errOut)
		}
		code, out, errOut := run(t, "", "generate", "--model", dir, "--ids", "1,2,3", "-n", "2")
		if code != exitOK {
			t.Fatalf("%v: generate: exit %d: %s", args, code, errOut)
		}
		if got := strings.Count(out, ",") + 1; got != 2 {
			t.Errorf("%v: generated %q, want 2 ids", args, out)
		}
	}
}
