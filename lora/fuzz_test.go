package lora

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

// FuzzParse feeds arbitrary configs and safetensors files to the parsers
// Load runs. Whatever the input, parsing must not panic, and an adapter
// that parses must be consistent (sorted unique modules whose factors have
// the sizes their shapes say) and hold no more than twice the file's bytes
// (16-bit factors widen to float32): a header cannot make it allocate
// beyond the file's size.
func FuzzParse(f *testing.F) {
	cfgB, err := os.ReadFile("../testdata/lora/lora-small-b/" + ConfigFile)
	if err != nil {
		f.Fatal(err)
	}
	t := &testing.T{}
	rng := rand.New(rand.NewPCG(19, 20))
	small, _, _ := linearPair(t, rng, qProj, safetensors.BF16, 2, 3, 4)
	smallFile, err := safetensors.Marshal(small, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfgB, smallFile)
	f.Add([]byte(`{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":".*q_proj","rank_pattern":{"q_proj":2},"alpha_pattern":{"self_attn\\..*":1.5},"use_rslora":true}`), smallFile)
	gu := newExpertFactors(rng, 2, 2*ffn, hidden)
	dn := newExpertFactors(rng, 3, hidden, ffn)
	expertFile, err := safetensors.Marshal(append(gu.tensors(t, experts+".base_layer", safetensors.F16), dn.tensors(t, experts, safetensors.F32)...), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(expertsConfig("0.18.0")), expertFile)
	f.Add([]byte(`{"peft_type":"LORA","r":1,"lora_alpha":1,"target_modules":"all-linear"}`), []byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Add([]byte(`[]`), []byte{})
	f.Fuzz(func(t *testing.T, cfgData, st []byte) {
		cfg, err := ParseConfig(cfgData)
		if err != nil {
			return
		}
		file, err := safetensors.OpenBytes("fuzz", st)
		if err != nil {
			if !errors.Is(err, safetensors.ErrInvalid) {
				t.Fatalf("safetensors error %v is not ErrInvalid", err)
			}
			return
		}
		mods, err := readModules(&cfg, file)
		if err != nil {
			return
		}
		a := &Adapter{Config: cfg, Modules: mods}
		if a.Bytes() > 2*int64(len(st)) {
			t.Fatalf("%d bytes of factors from a %d-byte file", a.Bytes(), len(st))
		}
		if len(mods) == 0 || !slices.IsSortedFunc(mods, func(x, y Module) int {
			if x.Name < y.Name {
				return -1
			}
			return 1
		}) {
			t.Fatalf("modules not sorted and unique")
		}
		for i := range mods {
			m := &mods[i]
			e := max(m.Experts, 1)
			if m.Rank < 1 || m.In < 1 || m.Out < 1 || len(m.A) != e*m.Rank*m.In || len(m.B) != e*m.Out*m.Rank || math.IsNaN(m.Scale) {
				t.Fatalf("module %s: rank %d in %d out %d experts %d, %d and %d values, scale %v", m.Name, m.Rank, m.In, m.Out, m.Experts, len(m.A), len(m.B), m.Scale)
			}
			if got, ok := a.Module(m.Name); !ok || got != m {
				t.Fatalf("Module(%q) does not find it", m.Name)
			}
			shape := []int{m.Out, m.In}
			if m.Experts > 0 {
				shape = []int{m.Experts, m.In, m.Out}
			}
			if err := m.FitBase(shape); err != nil {
				t.Fatal(err)
			}
		}
	})
}
