package lora

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/safetensors"
)

func mustConfig(t *testing.T, js string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPatterns checks rank_pattern and alpha_pattern as PEFT's
// get_pattern_key matches them: re.match(rf"(.*\.)?({key})$", name), the
// first key in the file's order that matches winning.
func TestPatterns(t *testing.T) {
	c := mustConfig(t, `{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj"],
		"rank_pattern": {"layers.1.self_attn.q_proj": 4, "q_proj": 2, "layers\\.[23]\\..*k_proj": 6, "proj": 32},
		"alpha_pattern": {"v_proj": 3, "layers.1.self_attn.q_proj": 5}}`)
	const p = "model.language_model.layers."
	for _, tc := range []struct {
		name  string
		r     int
		alpha float64
	}{
		{p + "1.self_attn.q_proj", 4, 5},        // the first key matches
		{p + "11.self_attn.q_proj", 2, 16},      // "layers.1.…" needs a dot before "1": only "q_proj" matches
		{p + "0.self_attn.q_proj", 2, 16},       // the second key
		{p + "2.self_attn.k_proj", 6, 16},       // a regular expression
		{p + "4.self_attn.k_proj", 8, 16},       // "proj" must be the whole last component: the defaults
		{p + "0.self_attn.v_proj", 8, 3},        // alpha only
		{"x.q_proj.y", 8, 16},                   // the key must end the name
		{"q_proj", 2, 16},                       // no prefix at all
		{p + "1.self_attn.xq_proj", 8, 16},      // "(.*\.)?" ends at a dot
		{p + "1.self_attn.q_proj.proj", 32, 16}, // the last key
	} {
		if r, a := c.RankFor(tc.name), c.AlphaFor(tc.name); r != tc.r || a != tc.alpha {
			t.Errorf("%s: rank %d alpha %v, want %d %v", tc.name, r, a, tc.r, tc.alpha)
		}
	}
	if s := c.ScaleFor(p + "1.self_attn.q_proj"); s != 5.0/4 {
		t.Errorf("scale %v, want 1.25", s)
	}
	rs := mustConfig(t, `{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_rslora": true, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 9}}`)
	if s := rs.ScaleFor("a.q_proj"); s != 16.0/3 {
		t.Errorf("rslora scale %v, want 16/3", s)
	}
	if s := rs.ScaleFor("a.k_proj"); s != 16/math.Sqrt(8) {
		t.Errorf("rslora scale %v, want 16/sqrt(8)", s)
	}
	// A repeated key keeps its first position and its last value, as a
	// Python dict does.
	dup := mustConfig(t, `{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 2, "layers.0.self_attn.q_proj": 4, "q_proj": 3}}`)
	if r := dup.RankFor(p + "0.self_attn.q_proj"); r != 3 {
		t.Errorf("duplicate key: rank %d, want 3", r)
	}
}

// TestPatternsLoad loads an adapter whose modules have ranks and alphas from
// the patterns and checks each module's rank and scale.
func TestPatternsLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var ts []safetensors.Tensor
	const p = "model.language_model.layers."
	ranks := map[string]int{p + "0.self_attn.q_proj": 4, p + "1.self_attn.q_proj": 2, p + "0.mlp.down_proj": 3}
	for name, r := range ranks {
		x, _, _ := linearPair(t, rng, name, safetensors.BF16, r, 6, 5)
		ts = append(ts, x...)
	}
	dir := writeAdapter(t, `{"peft_type": "LORA", "r": 2, "lora_alpha": 8, "use_rslora": true, "target_modules": ["q_proj", "down_proj"],
		"rank_pattern": {"layers.0.self_attn.q_proj": 4, "down_proj": 3}, "alpha_pattern": {"down_proj": 6}}`, ts)
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{p + "0.self_attn.q_proj": 8.0 / 2, p + "1.self_attn.q_proj": 8 / math.Sqrt(2), p + "0.mlp.down_proj": 6 / math.Sqrt(3)}
	for _, m := range a.Modules {
		if m.Rank != ranks[m.Name] || m.Scale != want[m.Name] {
			t.Errorf("%s: rank %d scale %v, want %d %v", m.Name, m.Rank, m.Scale, ranks[m.Name], want[m.Name])
		}
	}
	if a.MaxRank() != 4 {
		t.Errorf("MaxRank %d", a.MaxRank())
	}
}

// TestTargets checks which module names a config selects, as PEFT's
// check_target_module_exists does.
func TestTargets(t *testing.T) {
	const p = "model.language_model.layers."
	cases := []struct {
		cfg  string
		yes  []string
		no   []string
		desc string
	}{
		{`"target_modules": ["q_proj", "mlp.down_proj"]`,
			[]string{p + "0.self_attn.q_proj", "q_proj", p + "3.mlp.down_proj"},
			[]string{p + "0.self_attn.xq_proj", p + "0.self_attn.q_proj.x", p + "0.shared_expert.down_proj", "mtp.x_mlp.down_proj"}, "list: equal or a suffix at a dot"},
		{`"target_modules": ".*\\.(q_proj|v_proj)"`,
			[]string{p + "0.self_attn.q_proj", p + "9.self_attn.v_proj"},
			[]string{"q_proj", p + "0.self_attn.q_proj.lora", p + "0.self_attn.k_proj"}, "regular expression: the whole name"},
		{`"target_modules": ".*layers\\.[0-2]\\..*proj"`,
			[]string{p + "2.mlp.up_proj"},
			[]string{p + "3.mlp.up_proj", p + "12.mlp.up_proj"}, "regular expression on the layer"},
		{`"target_modules": "all-linear"`,
			[]string{p + "0.self_attn.q_proj", p + "0.mlp.gate.weight"},
			[]string{"lm_head"}, "all-linear: all but the output layer"},
		{`"target_modules": "ALL-LINEAR", "exclude_modules": ["o_proj"]`,
			[]string{p + "0.self_attn.q_proj"},
			[]string{p + "0.self_attn.o_proj"}, "all-linear less a list"},
		{`"target_modules": ["q_proj", "k_proj"], "exclude_modules": ".*layers\\.1\\..*"`,
			[]string{p + "0.self_attn.q_proj"},
			[]string{p + "1.self_attn.q_proj"}, "exclusion by expression"},
		{`"target_modules": ["q_proj", "` + p + `5.self_attn.k_proj"], "layers_to_transform": [0, 2]`,
			[]string{p + "0.self_attn.q_proj", p + "2.self_attn.q_proj", p + "5.self_attn.k_proj"},
			[]string{p + "1.self_attn.q_proj", p + "20.self_attn.q_proj", p + "0.self_attn.k_proj"}, "layers: suffix matches only, the first numbered component"},
		{`"target_modules": ["q_proj"], "layers_to_transform": 1, "layers_pattern": ["layers", "h"]`,
			[]string{p + "1.self_attn.q_proj", "transformer.h.1.attn.q_proj", "q_proj"},
			[]string{p + "0.self_attn.q_proj", "x.q_proj"}, "layers: one index, a pattern (an entry equal to the name skips the layer check, as in PEFT)"},
		{`"target_modules": ["q_proj"], "layers_to_transform": []`,
			[]string{p + "7.self_attn.q_proj"},
			nil, "layers: an empty list restricts nothing"},
	}
	for _, c := range cases {
		cfg := mustConfig(t, `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, `+c.cfg+`}`)
		for _, n := range c.yes {
			if !cfg.IsTarget(n) {
				t.Errorf("%s: %s not selected", c.desc, n)
			}
		}
		for _, n := range c.no {
			if cfg.IsTarget(n) {
				t.Errorf("%s: %s selected", c.desc, n)
			}
		}
	}
}

// TestRegexTargetsLoad loads an adapter with a regular expression
// target_modules, and one with a module the expression leaves out.
func TestRegexTargetsLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const p = "model.language_model.layers."
	q0, _, _ := linearPair(t, rng, p+"0.self_attn.q_proj", safetensors.F16, 2, 4, 4)
	v3, _, _ := linearPair(t, rng, p+"3.self_attn.v_proj", safetensors.F16, 2, 4, 4)
	k1, _, _ := linearPair(t, rng, p+"1.self_attn.k_proj", safetensors.F16, 2, 4, 4)
	cfg := `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ".*\\.self_attn\\.(q|v)_proj"}`
	a, err := Load(writeAdapter(t, cfg, append(q0, v3...)))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Modules) != 2 || a.Modules[0].Name != p+"0.self_attn.q_proj" || a.Modules[1].Name != p+"3.self_attn.v_proj" {
		t.Errorf("modules %v %v", a.Modules[0].Name, a.Modules[1].Name)
	}
	_, err = Load(writeAdapter(t, cfg, append(q0, k1...)))
	wantErr(t, err, `module "`+p+`1.self_attn.k_proj" has LoRA factors, but adapter_config.json's target_modules ".*\\.self_attn\\.(q|v)_proj" do not select it`)
	_, err = Load(writeAdapter(t, `{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q_proj", "k_proj"], "layers_to_transform": [0]}`, append(q0, k1...)))
	wantErr(t, err, "in layers [0]")
}

func TestPeftBefore(t *testing.T) {
	for _, c := range []struct {
		v          string
		before, ok bool
	}{
		{"0.18.1", true, true}, {"0.19.0", true, true}, {"0.19.1", false, true}, {"0.20.0", false, true},
		{"0.19.1.dev0@abc", false, true}, {"1.0.0rc1", false, true}, {"0.9.0", true, true},
		{"", false, false}, {"0.19", false, false}, {"x.y.z", false, false},
	} {
		if b, ok := peftBefore(c.v, 0, 19, 1); b != c.before || ok != c.ok {
			t.Errorf("%q: %v %v", c.v, b, ok)
		}
	}
}

func TestVisionNames(t *testing.T) {
	for _, n := range []string{"model.visual.blocks.0.attn.qkv", "model.visual.merger.linear_fc1", "vision_tower.encoder.q", "model.multi_modal_projector.linear_1"} {
		if !isVision(n) {
			t.Errorf("%s is vision", n)
		}
	}
	for _, n := range []string{qProj, "lm_head", "model.language_model.layers.0.mlp.visualize"} {
		if isVision(n) {
			t.Errorf("%s is not vision", n)
		}
	}
	if !strings.Contains((&UnsupportedError{Feature: "X"}).Error(), "govinfer cannot apply X") {
		t.Error("UnsupportedError text")
	}
}
