// Package lora reads LoRA adapters in PEFT's layout: adapter_config.json and
// adapter_model.safetensors, as PEFT's save_pretrained (and the trainers
// built on it: Unsloth, Axolotl, ms-swift, TRL) writes them.
//
// An adapter changes a linear y = W·x of the base model to
// y = W·x + Scale·B·(A·x), W' = W + Scale·B·A, with A [Rank, In] and
// B [Out, Rank] per adapted module. The file stores them as
// "base_model.model.<module>.lora_A.weight" and "….lora_B.weight" (older or
// hand-made files may keep PEFT's adapter-name segment,
// "….lora_A.default.weight", or leave out the "base_model.model." prefix, as
// transformers' own adapter saving does).
//
// MoE experts stored as one stacked parameter [E, out, in]
// (mlp.experts.gate_up_proj, mlp.experts.down_proj) are adapted through
// PEFT's target_parameters; see Module for how their matrices are read.
//
// Load validates everything against the config and refuses, with an error
// that names the feature (matching ErrUnsupported), what govinfer cannot
// apply: other PEFT methods, DoRA, modules_to_save and other full weights,
// LoRA on embeddings, trained biases, variants whose forward pass is not
// plain LoRA, LoRA on the vision tower.
package lora

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/govinfer/govinfer/safetensors"
)

// ErrUnsupported is matched by the errors for adapter features govinfer
// cannot apply (an *UnsupportedError).
var ErrUnsupported = errors.New("unsupported LoRA adapter feature")

// The files of a PEFT adapter directory.
const (
	ConfigFile  = "adapter_config.json"
	WeightsFile = "adapter_model.safetensors"
)

// Adapter is a LoRA adapter read into memory.
type Adapter struct {
	Dir     string
	Config  Config
	Modules []Module // sorted by Name
}

// Module is the low-rank update of one linear of the base model:
// W' = W + Scale·B·A.
//
// For a PEFT target_parameters update of a stacked expert parameter
// (Experts > 0), A holds Experts matrices [Rank][In] and B Experts matrices
// [Out][Rank], expert-major, and expert e's weight W_e = base[e] (the base
// tensor is [Experts, Out, In], as transformers stores Qwen3.5-MoE's
// gate_up_proj [E, 2F, H] and down_proj [E, H, F]) becomes
// W_e + Scale·B_e·A_e. PEFT's ParamWrapper stores one lora_A [Rank·E, In]
// whose rows are expert-major (row e·Rank+j is A_e's row j) and one lora_B
// [Out, Rank·E] whose columns are rank-major (column j·E+e is B_e's column
// j); PEFT releases before 0.19.1 stored the pair transposed for such
// [E, out, in] tensors (lora_A [Rank·E, Out], lora_B [In, Rank·E], the update
// of W_e being (B_e·A_e)ᵀ), which Load turns into the layout above when
// peft_version says so and FitBase corrects from the base tensor's shape.
type Module struct {
	Name    string  // the base model's module name: the tensor name without ".weight", e.g. "model.language_model.layers.0.self_attn.q_proj"; for experts the stacked tensor's name, e.g. "model.language_model.layers.0.mlp.experts.gate_up_proj"
	Rank    int     // the rank of the update (of each expert's update)
	Scale   float64 // lora_alpha/r or lora_alpha/sqrt(r) (use_rslora), after rank_pattern/alpha_pattern
	In, Out int     // the input and output widths of the linear (of each expert's)
	A       []float32
	B       []float32
	Experts int // 0 for a linear; the number of stacked experts for a target_parameters update
}

// Load reads the adapter in dir and validates it. Errors name the file and
// the field or tensor at fault.
func Load(dir string) (*Adapter, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("lora: %s is not a directory (want one holding %s and %s)", dir, ConfigFile, WeightsFile)
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	data, err := readConfigFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("lora: %s: %w", cfgPath, err)
	}
	wPath := filepath.Join(dir, WeightsFile)
	f, err := safetensors.Open(wPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, berr := os.Stat(filepath.Join(dir, "adapter_model.bin")); berr == nil {
				return nil, fmt.Errorf("lora: %s: the adapter is a PyTorch pickle (adapter_model.bin); govinfer reads %s only: save it with safe_serialization", dir, WeightsFile)
			}
		}
		return nil, fmt.Errorf("lora: %w", err)
	}
	defer f.Close()
	mods, err := readModules(&cfg, f)
	if err != nil {
		return nil, fmt.Errorf("lora: %s: %w", wPath, err)
	}
	return &Adapter{Dir: dir, Config: cfg, Modules: mods}, nil
}

// readConfigFile reads adapter_config.json, refusing one over MaxConfigSize
// before reading it.
func readConfigFile(path string) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	data, err := io.ReadAll(io.LimitReader(fd, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("%s: over the %d-byte limit of an adapter config", path, MaxConfigSize)
	}
	return data, nil
}

// Bytes returns the size of the A and B matrices as float32.
func (a *Adapter) Bytes() int64 {
	var n int64
	for i := range a.Modules {
		n += 4 * int64(len(a.Modules[i].A)+len(a.Modules[i].B))
	}
	return n
}

// Module returns the update of the base module (or stacked expert tensor)
// named name.
func (a *Adapter) Module(name string) (*Module, bool) {
	i := sort.Search(len(a.Modules), func(i int) bool { return a.Modules[i].Name >= name })
	if i < len(a.Modules) && a.Modules[i].Name == name {
		return &a.Modules[i], true
	}
	return nil, false
}

// MaxRank returns the largest Rank of the adapter's modules (of one
// expert's update for stacked experts).
func (a *Adapter) MaxRank() int {
	r := 0
	for i := range a.Modules {
		r = max(r, a.Modules[i].Rank)
	}
	return r
}

// FitBase checks the update against the shape of the base tensor it
// adapts: [Out, In] for a linear, [Experts, Out, In] for stacked experts.
// An expert update stored the other way round ([Experts, In, Out] in its
// matrices, as PEFT before 0.19.1 stored it and some transformers versions
// loaded it) is turned around when the shape tells (Out ≠ In); a square
// expert matrix keeps the orientation Load chose from peft_version.
func (m *Module) FitBase(shape []int) error {
	mismatch := func() error {
		if m.Experts > 0 {
			return fmt.Errorf("lora: %s: the adapter's update is %d experts × [%d, %d] (out, in), but the base tensor is %v",
				m.Name, m.Experts, m.Out, m.In, shape)
		}
		return fmt.Errorf("lora: %s: the adapter's update is [%d, %d] (out, in), but the base tensor is %v", m.Name, m.Out, m.In, shape)
	}
	if m.Experts == 0 {
		if len(shape) != 2 || shape[0] != m.Out || shape[1] != m.In {
			return mismatch()
		}
		return nil
	}
	if len(shape) != 3 || shape[0] != m.Experts {
		return mismatch()
	}
	switch {
	case shape[1] == m.Out && shape[2] == m.In:
		return nil
	case shape[1] == m.In && shape[2] == m.Out:
		m.reorient()
		return nil
	}
	return mismatch()
}

// reorient turns each expert's pair around: (A_e, B_e) becomes (B_eᵀ, A_eᵀ),
// whose product is (B_e·A_e)ᵀ, and In and Out swap.
func (m *Module) reorient() {
	r, in, out := m.Rank, m.In, m.Out
	a := make([]float32, len(m.A))
	b := make([]float32, len(m.B))
	for e := 0; e < m.Experts; e++ {
		ae := m.A[e*r*in : (e+1)*r*in]   // [r][in]
		be := m.B[e*out*r : (e+1)*out*r] // [out][r]
		na := a[e*r*out : (e+1)*r*out]   // [r][out] = beᵀ
		nb := b[e*in*r : (e+1)*in*r]     // [in][r] = aeᵀ
		for j := 0; j < r; j++ {
			for o := 0; o < out; o++ {
				na[j*out+o] = be[o*r+j]
			}
			for i := 0; i < in; i++ {
				nb[i*r+j] = ae[j*in+i]
			}
		}
	}
	m.A, m.B, m.In, m.Out = a, b, out, in
}

// visionComponents are module-name components of vision towers and
// projectors (Qwen3.5's "model.visual", and the names other multimodal
// models use).
var visionComponents = []string{"visual", "vision_tower", "vision_model", "vision_encoder", "multi_modal_projector", "mm_projector"}

func isVision(module string) bool {
	for _, c := range strings.Split(module, ".") {
		if contains(visionComponents, c) {
			return true
		}
	}
	return false
}

// pair is the two tensors of one LoRA wrapper.
type pair struct{ a, b string }

// tensorKind sorts a tensor name of the file.
type tensorKind int

const (
	kindA tensorKind = iota
	kindB
	kindSkip // training-only state of an accepted variant
)

const peftPrefix = "base_model.model."

// classify reads a tensor name: which factor it is, of which module path
// (with any base_layer infixes of nested wrappers), under which adapter-name
// segment. Tensors that are not LoRA factors give the error saying what they
// are.
func classify(cfg *Config, name string) (kind tensorKind, module, adapter string, err error) {
	rest := strings.TrimPrefix(name, peftPrefix)
	parts := strings.Split(rest, ".")
	for i := len(parts) - 1; i >= 1; i-- {
		if parts[i] != "lora_A" && parts[i] != "lora_B" {
			continue
		}
		k := kindA
		if parts[i] == "lora_B" {
			k = kindB
		}
		tail := parts[i+1:]
		switch {
		case len(tail) == 1 && tail[0] == "weight":
			return k, strings.Join(parts[:i], "."), "", nil
		case len(tail) == 2 && tail[1] == "weight" && tail[0] != "":
			return k, strings.Join(parts[:i], "."), tail[0], nil
		case len(tail) > 0 && tail[len(tail)-1] == "bias":
			return 0, "", "", unsupported("lora_bias", "tensor %q is a trained bias of lora_B", name)
		}
		break
	}
	has := func(c string) bool { return contains(parts, c) }
	last := parts[len(parts)-1]
	switch {
	case has("lora_magnitude_vector"):
		return 0, "", "", unsupported("DoRA", "tensor %q is a DoRA magnitude vector", name)
	case has("lora_embedding_A") || has("lora_embedding_B"):
		return 0, "", "", unsupported("LoRA on embeddings", "tensor %q adapts an embedding table", name)
	case has("modules_to_save") || has("original_module"):
		return 0, "", "", unsupported("modules_to_save", "tensor %q is a full trained copy of a module", name)
	case has("trainable_tokens_delta") || has("trainable_tokens_original"):
		return 0, "", "", unsupported("trainable_token_indices", "tensor %q holds trained token embeddings", name)
	case has("lora_velora_embed") && cfg.VeLoRA:
		return kindSkip, "", "", nil
	case has("lora_diag"):
		return 0, "", "", unsupported("KaSA", "tensor %q is a KaSA diagonal", name)
	case last == "bias":
		return 0, "", "", unsupported("trained biases", "tensor %q is a bias of the base model", name)
	case last == "weight":
		return 0, "", "", unsupported("full weights", "tensor %q is a weight of the base model saved with the adapter (a resized or targeted embedding, or modules_to_save)", name)
	}
	return 0, "", "", fmt.Errorf("tensor %q is not a LoRA factor (…lora_A.weight or …lora_B.weight)", name)
}

// readModules reads and validates every LoRA factor of f against cfg.
func readModules(cfg *Config, f *safetensors.File) ([]Module, error) {
	wrappers := map[string]map[int]*pair{} // unwrapped module → nesting depth → factors
	adapterNames := map[string]bool{}
	for _, name := range f.Names() {
		kind, path, adapter, err := classify(cfg, name)
		if err != nil {
			return nil, err
		}
		if kind == kindSkip {
			continue
		}
		adapterNames[adapter] = true
		if len(adapterNames) > 1 {
			return nil, fmt.Errorf("tensor %q: the file mixes adapter-name segments (%s); want one adapter", name, strings.Join(sortedKeys(adapterNames), ", "))
		}
		module, depth := unwrap(path)
		if module == "" || contains(strings.Split(module, "."), "base_layer") || contains(strings.Split(module, "."), "") {
			return nil, fmt.Errorf("tensor %q: %q is not a module name", name, path)
		}
		if wrappers[module] == nil {
			wrappers[module] = map[int]*pair{}
		}
		p := wrappers[module][depth]
		if p == nil {
			p = &pair{}
			wrappers[module][depth] = p
		}
		slot := &p.a
		if kind == kindB {
			slot = &p.b
		}
		if *slot != "" {
			return nil, fmt.Errorf("tensors %q and %q are the same LoRA factor", *slot, name)
		}
		*slot = name
	}
	if len(wrappers) == 0 {
		return nil, fmt.Errorf("no LoRA factors (…lora_A.weight, …lora_B.weight) in the file")
	}

	var mods []Module
	for _, module := range sortedKeys(wrappers) {
		ws := wrappers[module]
		if isVision(module) {
			return nil, unsupported("LoRA on the vision tower", "module %q", module)
		}
		params, err := cfg.paramTargets(module)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ConfigFile, err)
		}
		isTarget := cfg.IsTarget(module)
		if len(params) > 0 && isTarget {
			return nil, fmt.Errorf("module %q is selected both by target_modules and by target_parameters (PEFT refuses that)", module)
		}
		if len(params) == 0 {
			if ws[0] == nil || len(ws) > 1 {
				return nil, fmt.Errorf("module %q: nested LoRA wrappers (base_layer), but target_parameters select no parameter of it", module)
			}
			if !isTarget {
				return nil, fmt.Errorf("module %q has LoRA factors, but %s's target_modules%s do not select it", module, ConfigFile, describeTargets(cfg))
			}
			m, err := readLinear(cfg, f, module, module, *ws[0])
			if err != nil {
				return nil, err
			}
			mods = append(mods, m)
			continue
		}
		for d := range ws {
			if d >= len(params) {
				return nil, fmt.Errorf("module %q has LoRA wrappers nested %d deep, but target_parameters select %d of its parameters (%s)",
					module, maxKey(ws)+1, len(params), strings.Join(params, ", "))
			}
		}
		if len(ws) != len(params) {
			return nil, fmt.Errorf("module %q has %d LoRA wrappers, but target_parameters select %d of its parameters (%s)",
				module, len(ws), len(params), strings.Join(params, ", "))
		}
		for d := 0; d < len(params); d++ {
			// The first parameter PEFT wraps is the innermost wrapper.
			param := params[len(params)-1-d]
			key := module + "." + param
			var m Module
			var err error
			if param == "weight" {
				m, err = readLinear(cfg, f, module, key, *ws[d])
			} else {
				m, err = readExperts(cfg, f, key, *ws[d])
			}
			if err != nil {
				return nil, err
			}
			mods = append(mods, m)
		}
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	for i := 1; i < len(mods); i++ {
		if mods[i].Name == mods[i-1].Name {
			return nil, fmt.Errorf("module %q is adapted twice", mods[i].Name)
		}
	}
	return mods, nil
}

// unwrap strips the trailing ".base_layer" components PEFT inserts for
// nested ParamWrappers, returning the module and the nesting depth.
func unwrap(path string) (string, int) {
	depth := 0
	for strings.HasSuffix(path, ".base_layer") {
		path = strings.TrimSuffix(path, ".base_layer")
		depth++
	}
	return path, depth
}

func describeTargets(cfg *Config) string {
	t := cfg.TargetModules
	var s string
	switch {
	case t.AllLinear:
		s = ` "all-linear" (every linear but the output layer)`
	case t.Regex != "":
		s = fmt.Sprintf(" %q", t.Regex)
	case len(t.Names) > 0:
		s = " [" + strings.Join(t.Names, " ") + "]"
	default:
		s = " (none)"
	}
	if cfg.ExcludeModules.Set() {
		s += " less exclude_modules"
	}
	if len(cfg.LayersToTransform) > 0 {
		s += fmt.Sprintf(" in layers %v", cfg.LayersToTransform)
	}
	return s
}

// factors reads and checks the two tensors of a wrapper: both present, 2-D,
// non-empty, of a float dtype, sharing the rank dimension.
func factors(f *safetensors.File, p pair, module string) (a, b safetensors.Tensor, err error) {
	if p.a == "" || p.b == "" {
		have, miss := p.a, "lora_B"
		if have == "" {
			have, miss = p.b, "lora_A"
		}
		return a, b, fmt.Errorf("module %q: tensor %q has no %s beside it", module, have, miss)
	}
	a, _ = f.Tensor(p.a)
	b, _ = f.Tensor(p.b)
	for _, t := range []safetensors.Tensor{a, b} {
		switch t.DType {
		case safetensors.F32, safetensors.BF16, safetensors.F16:
		default:
			return a, b, fmt.Errorf("tensor %q is %s; LoRA factors must be F32, BF16 or F16", t.Name, t.DType)
		}
		if len(t.Shape) != 2 || t.Shape[0] == 0 || t.Shape[1] == 0 {
			return a, b, fmt.Errorf("tensor %q has shape %v; a LoRA factor is a non-empty matrix", t.Name, t.Shape)
		}
	}
	if a.Shape[0] != b.Shape[1] {
		return a, b, fmt.Errorf("module %q: lora_A %v and lora_B %v disagree on the rank (lora_A's rows, lora_B's columns)", module, a.Shape, b.Shape)
	}
	return a, b, nil
}

// values converts a factor to float32 (exactly: F32, BF16 and F16 all are
// float32 values) and refuses NaN and infinities.
func values(t safetensors.Tensor) ([]float32, error) {
	v, err := t.ToFloat32()
	if err != nil {
		return nil, err
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("tensor %q: element %d is %v", t.Name, i, x)
		}
	}
	return v, nil
}

// checkRank compares a factor's rank with the config's for key.
func checkRank(cfg *Config, key, tensor string, rank int) error {
	if want := cfg.RankFor(key); rank != want {
		return fmt.Errorf("tensor %q has rank %d, but %s gives %s rank %d (r, rank_pattern)", tensor, rank, ConfigFile, key, want)
	}
	return nil
}

// readLinear reads the update of a linear (or of a 2-D parameter targeted
// directly, whose key is "<module>.weight").
func readLinear(cfg *Config, f *safetensors.File, module, key string, p pair) (Module, error) {
	a, b, err := factors(f, p, module)
	if err != nil {
		return Module{}, err
	}
	rank := a.Shape[0]
	if err := checkRank(cfg, key, a.Name, rank); err != nil {
		return Module{}, err
	}
	m := Module{Name: module, Rank: rank, Scale: cfg.ScaleFor(key), In: a.Shape[1], Out: b.Shape[0]}
	if m.A, err = values(a); err != nil {
		return Module{}, err
	}
	if m.B, err = values(b); err != nil {
		return Module{}, err
	}
	return m, nil
}

// readExperts reads a ParamWrapper's update of a stacked expert tensor:
// lora_A [r·E, in] with expert-major rows, lora_B [out, r·E] with rank-major
// columns (PEFT's get_delta_weight reshapes them to (E, r, in) and
// (out, r, E)); B is regrouped expert-major.
func readExperts(cfg *Config, f *safetensors.File, key string, p pair) (Module, error) {
	a, b, err := factors(f, p, key)
	if err != nil {
		return Module{}, err
	}
	r := cfg.RankFor(key)
	rows := a.Shape[0]
	if rows%r != 0 {
		return Module{}, fmt.Errorf("tensor %q has %d rows, not a multiple of %s's rank %d for %s (r, rank_pattern): a stacked-expert factor has rank × experts rows",
			a.Name, rows, ConfigFile, r, key)
	}
	m := Module{Name: key, Rank: r, Scale: cfg.ScaleFor(key), In: a.Shape[1], Out: b.Shape[0], Experts: rows / r}
	if m.A, err = values(a); err != nil { // [E][r][in] already
		return Module{}, err
	}
	bv, err := values(b)
	if err != nil {
		return Module{}, err
	}
	E, out := m.Experts, m.Out
	m.B = make([]float32, len(bv))
	for e := 0; e < E; e++ {
		for o := 0; o < out; o++ {
			for j := 0; j < r; j++ {
				m.B[(e*out+o)*r+j] = bv[o*r*E+j*E+e]
			}
		}
	}
	// PEFT before 0.19.1 read an [E, out, in] tensor as [E, in, out]:
	// lora_A [r·E, out], lora_B [in, r·E].
	if before, ok := peftBefore(cfg.PeftVersion, 0, 19, 1); ok && before {
		m.reorient()
	}
	return m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func maxKey(m map[int]*pair) int {
	k := -1
	for d := range m {
		k = max(k, d)
	}
	return k
}
