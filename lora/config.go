package lora

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/govinfer/govinfer/jsonvalue"
)

// Config is the part of PEFT's adapter_config.json govinfer reads: every
// field that changes the adapted model's numbers or names what it adapts.
// ParseConfig refuses the PEFT features govinfer cannot apply, so a Config
// it returns describes a plain LoRA adapter.
type Config struct {
	PeftType    string // "LORA"
	PeftVersion string // the PEFT release that wrote the file ("0.18.1", "0.19.1.dev0@abc"), "" if absent
	BaseModel   string // base_model_name_or_path, "" if absent
	TaskType    string // "CAUSAL_LM", ...; informational

	R         int     // the default rank
	Alpha     float64 // the default lora_alpha
	UseRSLoRA bool    // scale = alpha/sqrt(r) instead of alpha/r
	UseDoRA   bool    // always false in a Config ParseConfig returns

	// TargetModules selects the linear modules adapted by name.
	TargetModules Targets
	// ExcludeModules removes modules from TargetModules' selection.
	ExcludeModules Targets
	// TargetParameters names nn.Parameters adapted directly (PEFT's
	// ParamWrapper): MoE experts' stacked 3-D tensors such as
	// "mlp.experts.gate_up_proj". An entry matches a parameter whose full
	// name equals it or ends with "." + it.
	TargetParameters []string
	// LayersToTransform restricts suffix-matched TargetModules to these
	// layer indices (nil: all layers); LayersPattern names the module list
	// the index follows ("layers"; nil: the first numbered component).
	LayersToTransform []int
	LayersPattern     []string

	// RankPattern and AlphaPattern override R and Alpha for the modules
	// whose names their keys match, in the file's key order (the first
	// match wins, as in PEFT).
	RankPattern  []RankRule
	AlphaPattern []AlphaRule

	ModulesToSave   []string // always empty in a Config ParseConfig returns
	FanInFanOut     bool     // ignored for linear modules, as PEFT ignores it for nn.Linear
	Bias            string   // always "none" in a Config ParseConfig returns
	InitLoraWeights string   // "true", "false", "gaussian", "eva", ... (how training started)
	VeLoRA          bool     // velora_config is set: a training-time variant, plain LoRA at inference

	layerRes []*regexp.Regexp // finds a module name's layer index
}

// RankRule is one rank_pattern entry: modules whose names match Pattern
// (PEFT: the regular expression `(.*\.)?(Pattern)$` matched from the start
// of the name) get rank R.
type RankRule struct {
	Pattern string
	R       int
	re      *regexp.Regexp
}

// AlphaRule is one alpha_pattern entry, matched as RankRule's.
type AlphaRule struct {
	Pattern string
	Alpha   float64
	re      *regexp.Regexp
}

// Targets is a module selector as PEFT writes target_modules and
// exclude_modules: a list of names or one regular expression.
type Targets struct {
	// Names is the list form: an entry selects a module whose name equals
	// it or ends with "." + it.
	Names []string
	// Regex is the string form: a regular expression the whole module name
	// must match. Empty for the list form.
	Regex string
	// AllLinear is PEFT's "all-linear" shorthand: every linear module but
	// the output layer.
	AllLinear bool
	re        *regexp.Regexp
}

// Set reports whether the selector selects anything at all.
func (t Targets) Set() bool { return len(t.Names) > 0 || t.re != nil || t.AllLinear }

// match reports whether name is selected: listed (exactly or as a suffix at a
// dot) or fully matching the expression.
func (t Targets) match(name string) (hit, exact bool) {
	switch {
	case t.AllLinear:
		return lastComponent(name) != "lm_head", false
	case t.re != nil:
		return t.re.MatchString(name), false
	}
	for _, n := range t.Names {
		if name == n {
			return true, true
		}
	}
	for _, n := range t.Names {
		if strings.HasSuffix(name, "."+n) {
			return true, false
		}
	}
	return false, false
}

// UnsupportedError is an adapter feature govinfer cannot apply. It matches
// ErrUnsupported with errors.Is.
type UnsupportedError struct {
	Feature string // what the adapter uses, as PEFT names it
	Detail  string // why, or what to do instead; may be empty
}

// Error reads "govinfer cannot apply FEATURE[: DETAIL]".
func (e *UnsupportedError) Error() string {
	if e.Detail == "" {
		return "govinfer cannot apply " + e.Feature
	}
	return "govinfer cannot apply " + e.Feature + ": " + e.Detail
}

// Is reports whether target is ErrUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupported(feature, format string, args ...any) error {
	return &UnsupportedError{Feature: feature, Detail: fmt.Sprintf(format, args...)}
}

// MaxConfigSize bounds adapter_config.json. Real ones are a few kilobytes; a
// target list naming every module of a large model stays far below this.
const MaxConfigSize = 16 << 20

// ParseConfig reads an adapter_config.json document and refuses what
// govinfer cannot apply: a peft_type other than LORA, DoRA, modules_to_save,
// trained biases, LoRA variants that change the forward pass, adapters whose
// base weights PEFT changed at initialisation. Unknown keys are ignored, as
// PEFT ignores keys of other versions.
func ParseConfig(data []byte) (Config, error) {
	if len(data) > MaxConfigSize {
		return Config{}, fmt.Errorf("%d bytes is over the %d-byte limit", len(data), MaxConfigSize)
	}
	v, err := jsonvalue.Decode(data)
	if err != nil {
		return Config{}, fmt.Errorf("not JSON: %w", err)
	}
	obj, ok := v.(*jsonvalue.Object)
	if !ok {
		return Config{}, fmt.Errorf("not a JSON object but %s", jsonvalue.Kind(v))
	}
	p := configParser{f: jsonvalue.ObjectFields(obj, "")}
	c := p.parse()
	if p.err != nil {
		return Config{}, p.err
	}
	return c, nil
}

// configParser reads fields, keeping the first error.
type configParser struct {
	f   jsonvalue.Fields
	err error
}

func (p *configParser) fail(err error) {
	if p.err == nil && err != nil {
		p.err = err
	}
}

func (p *configParser) str(key, def string) string {
	s, ok, ferr := p.f.Str(key)
	if ferr != nil {
		p.fail(ferr)
	}
	if !ok {
		return def
	}
	return s
}

func (p *configParser) boolean(key string) bool {
	b, _, ferr := p.f.Bool(key)
	if ferr != nil {
		p.fail(ferr)
	}
	return b
}

func (p *configParser) strList(key string) []string {
	a, _, ferr := p.f.Array(key)
	if ferr != nil {
		p.fail(ferr)
		return nil
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			p.fail(fmt.Errorf("%s[%d] must be a string, got %s", key, i, jsonvalue.Kind(e)))
			return nil
		}
		out = append(out, s)
	}
	return out
}

// strOrList reads a member that PEFT allows to be a string or a list of
// strings (layers_pattern).
func (p *configParser) strOrList(key string) []string {
	v, ok := p.f.Get(key)
	if !ok {
		return nil
	}
	if s, isStr := v.(string); isStr {
		return []string{s}
	}
	return p.strList(key)
}

// targets reads target_modules or exclude_modules: null, a list or a
// regular expression.
func (p *configParser) targets(key string) Targets {
	v, ok := p.f.Get(key)
	if !ok {
		return Targets{}
	}
	if s, isStr := v.(string); isStr {
		if key == "target_modules" && strings.EqualFold(s, "all-linear") {
			return Targets{Regex: s, AllLinear: true}
		}
		re, err := compilePython(`^(?:` + s + `)$`)
		if err != nil {
			p.fail(fmt.Errorf("%s: %q is not a regular expression govinfer can read: %w", key, s, err))
			return Targets{}
		}
		return Targets{Regex: s, re: re}
	}
	names := p.strList(key)
	if names == nil {
		p.fail(fmt.Errorf("%s must be a list of names or a regular expression, got %s", key, jsonvalue.Kind(v)))
	}
	return Targets{Names: names}
}

// compilePython compiles a Python re pattern as Go's RE2 reads it. The
// patterns PEFT configs use (alternations, classes, repetitions, anchors)
// mean the same in both; lookarounds and back-references fail to compile.
func compilePython(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(pattern)
}

func (p *configParser) parse() Config {
	c := Config{
		PeftType:    p.str("peft_type", ""),
		PeftVersion: p.str("peft_version", ""),
		BaseModel:   p.str("base_model_name_or_path", ""),
		TaskType:    p.str("task_type", ""),
		UseRSLoRA:   p.boolean("use_rslora"),
		UseDoRA:     p.boolean("use_dora"),
		FanInFanOut: p.boolean("fan_in_fan_out"),
		Bias:        p.str("bias", "none"),
	}
	if p.err != nil {
		return c
	}
	// What govinfer refuses, checked first so that the refusal, not a
	// side effect of the feature, is what the user reads.
	switch {
	case c.PeftType == "":
		p.fail(fmt.Errorf("peft_type is missing (want \"LORA\")"))
	case c.PeftType != "LORA":
		p.fail(unsupported(fmt.Sprintf("PEFT type %q", c.PeftType), "only LORA adapters are read"))
	case c.UseDoRA:
		p.fail(unsupported("DoRA (use_dora)", "its magnitude vectors rescale the adapted weight; merge the adapter into the base with PEFT instead"))
	case c.Bias != "none":
		p.fail(unsupported(fmt.Sprintf("bias %q", c.Bias), "the adapter trains the base model's biases; only bias \"none\" is read"))
	}
	if p.err != nil {
		return c
	}
	if mts := p.strList("modules_to_save"); len(mts) > 0 {
		p.fail(unsupported("modules_to_save", "the adapter carries full copies of %s", strings.Join(mts, ", ")))
		return c
	}
	p.refuseVariants()
	if p.err != nil {
		return c
	}
	c.InitLoraWeights = p.initWeights()
	c.VeLoRA = p.f.Has("velora_config")

	r, ok, ferr := p.f.Int("r")
	switch {
	case ferr != nil:
		p.fail(ferr)
	case !ok:
		p.fail(fmt.Errorf("r is missing"))
	case r <= 0:
		p.fail(fmt.Errorf("r must be a positive integer, got %d", r))
	}
	c.R = r
	alpha, ok, ferr := p.f.Float("lora_alpha")
	switch {
	case ferr != nil:
		p.fail(ferr)
	case !ok:
		p.fail(fmt.Errorf("lora_alpha is missing"))
	}
	c.Alpha = alpha

	c.TargetModules = p.targets("target_modules")
	c.ExcludeModules = p.targets("exclude_modules")
	if v, ok := p.f.Get("target_parameters"); ok {
		if _, isStr := v.(string); isStr {
			p.fail(fmt.Errorf("target_parameters must be a list of parameter names, not a string (PEFT refuses one too)"))
			return c
		}
		c.TargetParameters = p.strList("target_parameters")
		for _, t := range c.TargetParameters {
			if t == "" || strings.HasPrefix(t, ".") || strings.HasSuffix(t, ".") {
				p.fail(fmt.Errorf("target_parameters: %q is not a parameter name", t))
			}
		}
		if len(c.TargetParameters) > 0 && c.FanInFanOut {
			p.fail(unsupported("fan_in_fan_out with target_parameters", "PEFT refuses the combination"))
		}
	}
	if !c.TargetModules.Set() && len(c.TargetParameters) == 0 && !p.f.Has("target_modules") {
		p.fail(fmt.Errorf("target_modules is missing and there are no target_parameters"))
	}
	p.layers(&c)
	c.RankPattern = p.rankPattern()
	c.AlphaPattern = p.alphaPattern()
	return c
}

// refuseVariants refuses the LoRA variants and extras whose forward pass or
// saved state is not plain LoRA.
func (p *configParser) refuseVariants() {
	refusals := []struct{ key, feature, detail string }{
		{"lora_bias", "lora_bias", "lora_B has a trained bias"},
		{"use_qalora", "QALoRA (use_qalora)", "lora_A reads pooled inputs"},
		{"alora_invocation_tokens", "aLoRA (alora_invocation_tokens)", "the adapter applies only after its invocation tokens"},
		{"use_bdlora", "BD-LoRA (use_bdlora)", "block-diagonal factors"},
		{"arrow_config", "Arrow routing (arrow_config)", "per-token routing among adapters"},
		{"kasa_config", "KaSA (kasa_config)", "a learned diagonal between lora_A and lora_B"},
		{"monteclora_config", "MonteCLoRA (monteclora_config)", "a variational sampler"},
		{"layer_replication", "layer_replication", "the adapted model repeats layers of the base"},
		{"trainable_token_indices", "trainable_token_indices", "the adapter carries trained token embeddings"},
	}
	for _, r := range refusals {
		v, ok := p.f.Get(r.key)
		if !ok {
			continue
		}
		switch x := v.(type) {
		case bool:
			if !x {
				continue
			}
		case []any:
			if len(x) == 0 {
				continue
			}
		}
		p.fail(unsupported(r.feature, "%s", r.detail))
		return
	}
}

// initWeights reads init_lora_weights and refuses the initialisations that
// change the base model's weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA): such
// an adapter only fits the residual model PEFT made, unless it was saved with
// path_initial_model_for_weight_conversion, which turns it into a plain LoRA
// and writes init_lora_weights true.
func (p *configParser) initWeights() string {
	v, ok := p.f.Get("init_lora_weights")
	if !ok {
		return "true"
	}
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x)
	case string:
		l := strings.ToLower(x)
		for _, mut := range []string{"pissa", "olora", "corda", "loftq", "lora_ga"} {
			if strings.HasPrefix(l, mut) {
				p.fail(unsupported(fmt.Sprintf("init_lora_weights %q", x),
					"the adapter fits a base model PEFT changed at initialisation; save it with path_initial_model_for_weight_conversion to get a plain LoRA"))
				return x
			}
		}
		return x
	}
	p.fail(fmt.Errorf("init_lora_weights must be a boolean or a string, got %s", jsonvalue.Kind(v)))
	return ""
}

// layers reads layers_to_transform (an integer or a list) and
// layers_pattern.
func (p *configParser) layers(c *Config) {
	if v, ok := p.f.Get("layers_to_transform"); ok {
		if _, isNum := v.(json.Number); isNum {
			n, _, ferr := p.f.Int("layers_to_transform")
			p.fail(ferr)
			c.LayersToTransform = []int{n}
		} else {
			l, ferr := p.f.IntList("layers_to_transform")
			p.fail(ferr)
			c.LayersToTransform = l
			if c.LayersToTransform == nil {
				c.LayersToTransform = []int{}
			}
		}
	}
	c.LayersPattern = p.strOrList("layers_pattern")
	if c.TargetModules.re != nil && (c.LayersToTransform != nil || c.LayersPattern != nil) {
		p.fail(fmt.Errorf("layers_to_transform and layers_pattern cannot be used with a regular expression target_modules (PEFT refuses it too)"))
	}
	if len(c.LayersPattern) > 0 && c.LayersToTransform == nil {
		p.fail(fmt.Errorf("layers_pattern needs layers_to_transform (PEFT refuses it too)"))
	}
	if len(c.LayersPattern) == 0 {
		c.layerRes = []*regexp.Regexp{regexp.MustCompile(`^.*?\.[^.]*\.(\d+)\.`)}
	}
	for _, lp := range c.LayersPattern {
		re, err := compilePython(`^.*?\.(?:` + lp + `)\.(\d+)\.`)
		if err != nil {
			p.fail(fmt.Errorf("layers_pattern: %q is not a regular expression govinfer can read: %w", lp, err))
			return
		}
		c.layerRes = append(c.layerRes, re)
	}
}

// patternRegex compiles a rank_pattern or alpha_pattern key as PEFT's
// get_pattern_key matches it: re.match(rf"(.*\.)?({key})$", name).
func patternRegex(field, key string) (*regexp.Regexp, error) {
	re, err := compilePython(`^(?:.*\.)?(?:` + key + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%s: key %q is not a regular expression govinfer can read: %w", field, key, err)
	}
	return re, nil
}

func (p *configParser) rankPattern() []RankRule {
	f, ok, ferr := p.f.Object("rank_pattern")
	if ferr != nil || !ok {
		p.fail(ferr)
		return nil
	}
	var out []RankRule
	for _, k := range f.Obj.Keys() {
		r, _, ferr := f.Int(k)
		if ferr != nil {
			p.fail(fmt.Errorf("rank_pattern[%q]: %s", k, ferr.Message))
			return nil
		}
		if r <= 0 {
			p.fail(fmt.Errorf("rank_pattern[%q]: the rank must be a positive integer, got %d", k, r))
			return nil
		}
		re, err := patternRegex("rank_pattern", k)
		if err != nil {
			p.fail(err)
			return nil
		}
		out = append(out, RankRule{Pattern: k, R: r, re: re})
	}
	return out
}

func (p *configParser) alphaPattern() []AlphaRule {
	f, ok, ferr := p.f.Object("alpha_pattern")
	if ferr != nil || !ok {
		p.fail(ferr)
		return nil
	}
	var out []AlphaRule
	for _, k := range f.Obj.Keys() {
		a, _, ferr := f.Float(k)
		if ferr != nil {
			p.fail(fmt.Errorf("alpha_pattern[%q]: %s", k, ferr.Message))
			return nil
		}
		re, err := patternRegex("alpha_pattern", k)
		if err != nil {
			p.fail(err)
			return nil
		}
		out = append(out, AlphaRule{Pattern: k, Alpha: a, re: re})
	}
	return out
}

// RankFor returns the rank of the module or parameter named key (for
// target_parameters, the parameter's full name): the value of the first
// rank_pattern key that matches it, else R.
func (c *Config) RankFor(key string) int {
	for _, r := range c.RankPattern {
		if r.re.MatchString(key) {
			return r.R
		}
	}
	return c.R
}

// AlphaFor returns lora_alpha for key, as RankFor returns the rank.
func (c *Config) AlphaFor(key string) float64 {
	for _, a := range c.AlphaPattern {
		if a.re.MatchString(key) {
			return a.Alpha
		}
	}
	return c.Alpha
}

// ScaleFor returns the scale of key's update: AlphaFor(key)/RankFor(key),
// or AlphaFor(key)/sqrt(RankFor(key)) with use_rslora.
func (c *Config) ScaleFor(key string) float64 {
	r := float64(c.RankFor(key))
	if c.UseRSLoRA {
		return c.AlphaFor(key) / math.Sqrt(r)
	}
	return c.AlphaFor(key) / r
}

// IsTarget reports whether PEFT adapts the module named name through
// target_modules: not excluded by exclude_modules, selected by
// target_modules, and, for a list entry matched as a suffix, in a layer of
// layers_to_transform.
func (c *Config) IsTarget(name string) bool {
	if hit, _ := c.ExcludeModules.match(name); hit {
		return false
	}
	hit, exact := c.TargetModules.match(name)
	if !hit || exact || c.TargetModules.re != nil || c.TargetModules.AllLinear || c.LayersToTransform == nil || len(c.LayersToTransform) == 0 {
		return hit
	}
	layer, ok := c.layerIndex(name)
	if !ok {
		return false
	}
	for _, l := range c.LayersToTransform {
		if l == layer {
			return true
		}
	}
	return false
}

// layerIndex finds the layer index of a module name as PEFT does: the
// number after the first "<something>." component (the lazy
// `.*?\.[^.]*\.(\d+)\.`), or after "<layers_pattern>.".
func (c *Config) layerIndex(name string) (int, bool) {
	for _, re := range c.layerRes {
		if m := re.FindStringSubmatch(name); m != nil {
			n, err := strconv.Atoi(m[1])
			return n, err == nil
		}
	}
	return 0, false
}

// paramTargets returns the names of module's parameters that
// target_parameters select: a parameter p is selected when module + "." + p
// equals an entry or ends with "." + the entry, p being the entry's last
// component. The result is in the order PEFT wraps them (see paramOrder).
func (c *Config) paramTargets(module string) ([]string, error) {
	var ps []string
	for _, t := range c.TargetParameters {
		p := lastComponent(t)
		key := module + "." + p
		if (key == t || strings.HasSuffix(key, "."+t)) && !contains(ps, p) {
			ps = append(ps, p)
		}
	}
	if len(ps) < 2 {
		return ps, nil
	}
	// PEFT nests one ParamWrapper per parameter in the order the module
	// registered them: the first is the innermost. govinfer knows the order
	// of the MoE experts' stacked tensors in transformers.
	for _, p := range ps {
		if paramOrder(p) < 0 {
			return nil, fmt.Errorf("target_parameters select %d parameters of %s (%s), and govinfer cannot tell which nested wrapper in the file adapts %q",
				len(ps), module, strings.Join(ps, ", "), p)
		}
	}
	sortByParamOrder(ps)
	return ps, nil
}

// paramOrder is the registration order of the stacked expert parameters in
// transformers' MoE expert modules (Qwen3.5-MoE, Qwen3-MoE, Mixtral, GPT-OSS
// at transformers 5): gate_up_proj before down_proj. -1 for others.
func paramOrder(p string) int {
	switch p {
	case "gate_up_proj":
		return 0
	case "down_proj":
		return 1
	}
	return -1
}

func sortByParamOrder(ps []string) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && paramOrder(ps[j]) < paramOrder(ps[j-1]); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func lastComponent(name string) string {
	return name[strings.LastIndexByte(name, '.')+1:]
}

// peftBefore reports whether version (PEFT's "X.Y.Z[.devN][@hash]") is
// older than major.minor.patch; ok is false when it cannot be read.
func peftBefore(version string, major, minor, patch int) (before, ok bool) {
	v, _, _ := strings.Cut(version, "@")
	parts := strings.Split(v, ".")
	if len(parts) < 3 {
		return false, false
	}
	var n [3]int
	for i := range n {
		digits := parts[i]
		end := 0
		for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
			end++
		}
		x, err := strconv.Atoi(digits[:end])
		if err != nil {
			return false, false
		}
		n[i] = x
	}
	want := [3]int{major, minor, patch}
	for i := range n {
		if n[i] != want[i] {
			return n[i] < want[i], true
		}
	}
	return false, true
}
