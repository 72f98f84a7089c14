package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/model"
)

// LoRA adapter flags: serve's, as vLLM's (--enable-lora, --lora-modules
// name=path ... or its JSON form, --max-loras, --max-lora-rank), and
// generate's, chat's and bench's --lora PATH[:SCALE] (repeatable).

// Defaults of --max-loras and --max-lora-rank. vLLM's are 1 and 16; its
// --max-loras bounds the adapters of one batch (more wait in a CPU cache),
// govinfer's the adapters attached at once, all of which one batch may mix.
const (
	defaultMaxLoRAs    = 8
	defaultMaxLoRARank = 64
)

// expandMultiValue rewrites vLLM's one-flag-several-values form of the
// named flags ("--lora-modules a=x b=y --port 8000") into repeated flags
// ("--lora-modules a=x --lora-modules b=y --port 8000"), which package
// flag reads: the values after such a flag, up to the next argument that
// starts with "-", all belong to it.
func expandMultiValue(args []string, names ...string) []string {
	multi := map[string]bool{}
	for _, n := range names {
		multi["-"+n], multi["--"+n] = true, true
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		flagName, value, hasValue := strings.Cut(a, "=")
		if !multi[flagName] {
			out = append(out, a)
			continue
		}
		n := 0
		if hasValue {
			out = append(out, flagName, value)
			n++
		}
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			out = append(out, flagName, args[i])
			n++
		}
		if n == 0 {
			out = append(out, flagName) // package flag reports the missing value
		}
	}
	return out
}

// loraModules is serve's --lora-modules: adapters as vLLM takes them,
// name=path or JSON {"name": ..., "path": ..., "base_model_name": ...}.
type loraModules []llm.LoRAAdapter

func (m *loraModules) String() string {
	var parts []string
	for _, a := range *m {
		parts = append(parts, a.Name+"="+a.Path)
	}
	return strings.Join(parts, " ")
}

func (m *loraModules) Set(v string) error {
	a, err := parseLoRAModule(v)
	if err != nil {
		return err
	}
	*m = append(*m, a)
	return nil
}

// parseLoRAModule reads one --lora-modules value.
func parseLoRAModule(v string) (llm.LoRAAdapter, error) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		var j struct {
			Name          string `json:"name"`
			Path          string `json:"path"`
			BaseModelName string `json:"base_model_name"`
		}
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return llm.LoRAAdapter{}, fmt.Errorf("want name=path or JSON {\"name\": ..., \"path\": ..., \"base_model_name\": ...}: %v", err)
		}
		if j.Name == "" || j.Path == "" {
			return llm.LoRAAdapter{}, fmt.Errorf("%s: the JSON form needs name and path", v)
		}
		return llm.LoRAAdapter{Name: j.Name, Path: j.Path}, nil
	}
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return llm.LoRAAdapter{}, fmt.Errorf("%q: want name=path or JSON {\"name\": ..., \"path\": ...}", v)
	}
	return llm.LoRAAdapter{Name: name, Path: path}, nil
}

// loraPaths is generate's, chat's and bench's --lora PATH[:SCALE].
type loraPaths []llm.LoRAAdapter

func (l *loraPaths) String() string {
	var parts []string
	for _, a := range *l {
		parts = append(parts, a.Path)
	}
	return strings.Join(parts, ",")
}

func (l *loraPaths) Set(v string) error {
	path, scale := v, 1.0
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		if s, err := strconv.ParseFloat(v[i+1:], 64); err == nil {
			path, scale = v[:i], s
		}
	}
	if path == "" {
		return fmt.Errorf("want PATH or PATH:SCALE")
	}
	name := filepath.Base(filepath.Clean(path))
	for _, a := range *l {
		if a.Name == name {
			name = fmt.Sprintf("%s-%d", name, len(*l))
		}
	}
	*l = append(*l, llm.LoRAAdapter{Name: name, Path: path, Scale: scale})
	return nil
}

// loraHelp is --lora's help text.
const loraHelp = "LoRA adapter directory (PEFT's adapter_config.json and adapter_model.safetensors) to run with, as PATH or PATH:SCALE (scale 1 by default); repeatable, the adapters adding up"

// loraFlags adds --lora and --lora-merge to a flag set.
func loraFlags(fs *flag.FlagSet) (*loraPaths, *bool) {
	var l loraPaths
	fs.Var(&l, "lora", loraHelp)
	merge := fs.Bool("lora-merge", false, "add the --lora adapters into the weights while they load; a BF16 checkpoint's matrices the adapters touch are kept exact in F32 (twice their bytes) unless --lora-merge-format base; --quantize keeps its format")
	return &l, merge
}

// loraMergeFormatUsage is --lora-merge-format's help.
const loraMergeFormatUsage = "with --lora-merge, the format of a BF16/F16 checkpoint's merged matrices: f32 keeps the adapted model exact (twice those matrices' bytes), base keeps the checkpoint's own (the base's speed; the update rounded with the weights, logits about 1 % off); a --quantize load re-quantizes either way"

// mergeFormatFlag adds --lora-merge-format to fs.
func mergeFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("lora-merge-format", "f32", loraMergeFormatUsage)
}

// options returns the llm options of --lora and --lora-merge, and the
// adapters every request runs with (none when merged).
func (l loraPaths) options(merge bool) (adapters []llm.LoRAAdapter, uses []llm.LoRAUse, err error) {
	if merge && len(l) == 0 {
		return nil, nil, fmt.Errorf("--lora-merge needs --lora")
	}
	if merge {
		return l, nil, nil
	}
	for _, a := range l {
		uses = append(uses, llm.LoRAUse{Name: a.Name})
	}
	return l, uses, nil
}

// merged reads the --lora adapters for --lora-merge (model.Options.Merge);
// nil without it.
func (l loraPaths) merged(merge bool) ([]model.MergedAdapter, error) {
	if !merge {
		return nil, nil
	}
	if len(l) == 0 {
		return nil, fmt.Errorf("--lora-merge needs --lora")
	}
	var out []model.MergedAdapter
	for _, a := range l {
		ad, err := lora.Load(a.Path)
		if err != nil {
			return nil, fmt.Errorf("--lora %s: %w", a.Path, err)
		}
		out = append(out, model.MergedAdapter{Adapter: ad, Scale: a.Scale})
	}
	return out, nil
}

// attach attaches the --lora adapters to m unmerged and returns them as a
// request's adapters (none with --lora-merge, whose adapters are in the
// weights).
func (l loraPaths) attach(m *model.Model, merge bool) ([]engine.LoRA, error) {
	if merge {
		return nil, nil
	}
	var out []engine.LoRA
	for i, a := range l {
		ad, err := lora.Load(a.Path)
		if err != nil {
			return nil, fmt.Errorf("--lora %s: %w", a.Path, err)
		}
		att, err := m.AttachAdapter(a.Name, ad)
		if err != nil {
			return nil, fmt.Errorf("--lora %s: %w", a.Path, err)
		}
		out = append(out, engine.LoRA{Adapter: att, Scale: float32(a.Scale), Name: a.Name, ID: i})
	}
	return out, nil
}
