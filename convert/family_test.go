package convert

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/randmodel"
)

// familyCase is a released Qwen3.5 shape cut to two layers, as safetensors
// and as the BF16 GGUF this package writes from it.
type familyCase struct {
	name, safetensors, gguf string
	moe                     bool
}

// familyShapes writes, once per test, two layers of the 0.8B, 2B, 4B, 27B
// and 35B-A3B shapes at their real widths, with a vocabulary of 4,096 (and
// the 35B-A3B with 16 of its 256 experts) so that the suite stays fast,
// and converts each to a BF16 GGUF file. GOVINFER_TEST_FULL_SHAPES=1 keeps
// the 35B-A3B's 256 experts.
func familyShapes(t *testing.T) []familyCase {
	t.Helper()
	if testing.Short() {
		t.Skip("writes about 2 GB of checkpoints")
	}
	var cases []familyCase
	root := t.TempDir()
	for _, name := range []string{"qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-27b", "qwen3.5-35b-a3b"} {
		s, err := randmodel.LookupShape(name)
		if err != nil {
			t.Fatal(err)
		}
		s.Layers, s.Vocab = 2, 4096
		if s.MoE() && os.Getenv("GOVINFER_TEST_FULL_SHAPES") == "" {
			s.Experts = 16
		}
		dir := filepath.Join(root, name)
		if err := randmodel.Write(dir, s, randmodel.Options{Seed: 9}); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(root, name+"-bf16.gguf")
		if _, err := Write(context.Background(), dir, out, Options{Type: TypeBF16}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cases = append(cases, familyCase{name: name, safetensors: dir, gguf: out, moe: s.MoE()})
	}
	return cases
}

// familyLogits returns the logits of every position of a short prompt on
// the model at path, run on a backend of its own from newBackend (a
// backend keeps the weights it loaded until it is closed: lavapipe's 2 GiB
// holds one of these models at a time).
func familyLogits(t *testing.T, path string, newBackend func() compute.Backend) []float32 {
	t.Helper()
	be := newBackend()
	defer be.Close()
	m, err := model.Open(path, model.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seq, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	out, err := m.Step(context.Background(), []model.Input{{Seq: seq, Tokens: []int{17, 4000, 3, 256, 1024, 99, 7}, Logits: model.AllLogits}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Logits
}

// checkFamily compares each shape's GGUF with its safetensors on be: the
// same logits bit for bit for a dense model, and within familyTol with
// every argmax equal for a mixture of experts, whose router the file
// stores in F32 where the checkpoint has BF16 (the same values, whose
// products round otherwise). It returns each shape's safetensors logits.
func checkFamily(t *testing.T, cases []familyCase, be func() compute.Backend) map[string][]float32 {
	out := map[string][]float32{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := familyLogits(t, c.safetensors, be)
			got := familyLogits(t, c.gguf, be)
			out[c.name] = want
			if !c.moe {
				if !slices.Equal(got, want) {
					t.Errorf("GGUF logits differ from the safetensors' (rel %.3g)", relErr(got, want))
				}
				return
			}
			if e := relErr(got, want); e > familyTol {
				t.Errorf("GGUF logits differ from the safetensors' by %.3g (> %g)", e, familyTol)
			}
			checkArgmaxes(t, got, want)
		})
	}
	return out
}

// familyTol bounds a MoE shape's GGUF-against-safetensors difference:
// float32 rounding of routers of 2,048 columns, far below any expert
// change on these prompts.
const familyTol = 1e-4

// checkArgmaxes checks that two runs' logits pick the same token at every
// position (vocabulary 4,096).
func checkArgmaxes(t *testing.T, got, want []float32) {
	t.Helper()
	const vocab = 4096
	for p := 0; p+vocab <= len(want); p += vocab {
		if g, w := compute.Argmax(got[p:p+vocab]), compute.Argmax(want[p:p+vocab]); g != w {
			t.Errorf("position %d: argmax %d, want %d", p/vocab, g, w)
		}
	}
}

// TestFamilyGGUF checks that two layers of every released dense and MoE
// shape answer from their safetensors and from the GGUF file written from
// them with the same logits, on the CPU and on Vulkan (familyVulkan), and
// that the two backends agree.
func TestFamilyGGUF(t *testing.T) {
	cases := familyShapes(t)
	onCPU := checkFamily(t, cases, func() compute.Backend { return cpu.New(cpu.Options{}) })
	familyVulkan(t, cases, onCPU)
}
