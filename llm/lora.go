package llm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/model"
)

// LoRA adapters (PEFT's adapter_config.json and adapter_model.safetensors)
// run on the model unmerged: attached once, chosen per request
// (Params.LoRA), one batch mixing requests of different adapters, each
// request's tokens what it gets alone. Options.LoRAMerge adds them into the
// weights at load instead, for one adapter at the base model's speed.

// LoRAAdapter is an adapter Open attaches (Options.LoRA).
type LoRAAdapter struct {
	// Name is what requests choose it by (Params.LoRA); empty means the
	// base name of Path.
	Name string
	// Path is the adapter's directory.
	Path string
	// Scale multiplies its update when a request names it without a
	// scale, or in the merged weights; 0 means 1.
	Scale float64
}

// LoRAUse chooses an adapter for a request.
type LoRAUse struct {
	// Name is the adapter's name (LoRAInfo.Name).
	Name string
	// Scale multiplies its update: 1 as trained, 0 turns it off
	// (llama-server's per-request lora scale). Nil means the adapter's
	// default scale (LoRAAdapter.Scale).
	Scale *float64
}

// LoRAInfo describes an attached adapter (Model.LoRAs).
type LoRAInfo struct {
	Name string
	Path string
	// ID is the adapter's load order, from 0 (llama-server's id).
	ID int
	// Rank is the largest rank of its modules, Modules the number of base
	// matrices it updates, Bytes the memory its matrices take.
	Rank, Modules int
	Bytes         int64
	// Scale is its default scale (LoRAAdapter.Scale).
	Scale float64
	// Parent is the id of the model it adapts (Model.Name).
	Parent string
	// Merged says that it was added into the weights at load
	// (Options.LoRAMerge): every request runs with it.
	Merged bool
	// Digest is a SHA-256 of its files, the identity the prefix cache
	// keys state by.
	Digest [32]byte
	// LoadTime is how long reading and attaching it took.
	LoadTime time.Duration
}

// ErrUnknownLoRA is matched (errors.Is) by the errors for adapter names
// that are not attached.
var ErrUnknownLoRA = errors.New("unknown LoRA adapter")

// LoRAError is an adapter a request or a call names that cannot be used,
// or that cannot be loaded. It matches ErrUnknownLoRA when Unknown is set.
type LoRAError struct {
	Name    string
	Unknown bool // no adapter of that name is attached
	Err     error
}

func (e *LoRAError) Error() string {
	if e.Unknown {
		return fmt.Sprintf("llm: LoRA adapter %q is not loaded", e.Name)
	}
	return fmt.Sprintf("llm: LoRA adapter %q: %v", e.Name, e.Err)
}

// Unwrap returns the cause.
func (e *LoRAError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnknownLoRA for an unknown adapter.
func (e *LoRAError) Is(target error) bool { return e.Unknown && target == ErrUnknownLoRA }

// loras is a Model's attached adapters.
type loras struct {
	mu      sync.Mutex
	byName  map[string]*loraEntry
	nextID  int
	max     int  // Options.MaxLoRAs, 0 for no bound
	maxRank int  // Options.MaxLoRARank, 0 for no bound
	merged  bool // Options.LoRAMerge: the adapters are in the weights
}

type loraEntry struct {
	info LoRAInfo
	ad   *model.Adapter // nil when merged
}

// loraName returns a's name: Name, or the base name of Path.
func loraName(a LoRAAdapter) string {
	if a.Name != "" {
		return a.Name
	}
	return filepath.Base(filepath.Clean(a.Path))
}

// loraDigest returns a SHA-256 of an adapter's config and weights files.
func loraDigest(dir string) ([32]byte, error) {
	var d [32]byte
	h := sha256.New()
	for _, f := range []string{lora.ConfigFile, lora.WeightsFile} {
		fd, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			return d, err
		}
		n, err := io.Copy(h, fd)
		fd.Close()
		if err != nil {
			return d, fmt.Errorf("%s: %w", f, err)
		}
		fmt.Fprintf(h, "\x00%s %d\x00", f, n)
	}
	h.Sum(d[:0])
	return d, nil
}

// readLoRA reads the adapter at path, checked against the rank bound.
func readLoRA(path string, maxRank int) (*lora.Adapter, [32]byte, error) {
	ad, err := lora.Load(path)
	if err != nil {
		return nil, [32]byte{}, err
	}
	if r := ad.MaxRank(); maxRank > 0 && r > maxRank {
		return nil, [32]byte{}, fmt.Errorf("its rank %d is over the limit of %d (max_lora_rank)", r, maxRank)
	}
	d, err := loraDigest(path)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("lora: %w", err)
	}
	return ad, d, nil
}

// checkLoRAOptions checks Options' adapters before the model loads.
func checkLoRAOptions(o Options) error {
	if o.MaxLoRAs < 0 || o.MaxLoRARank < 0 {
		return fmt.Errorf("llm: max LoRAs and max LoRA rank must not be negative, got %d and %d", o.MaxLoRAs, o.MaxLoRARank)
	}
	if o.LoRAMerge && len(o.LoRA) == 0 {
		return errors.New("llm: LoRA merge asked without an adapter")
	}
	if o.MaxLoRAs > 0 && len(o.LoRA) > o.MaxLoRAs {
		return fmt.Errorf("llm: %d LoRA adapters given, over the limit of %d (max_loras)", len(o.LoRA), o.MaxLoRAs)
	}
	seen := map[string]bool{}
	for _, a := range o.LoRA {
		name := loraName(a)
		switch {
		case a.Path == "":
			return fmt.Errorf("llm: LoRA adapter %q has no path", name)
		case name == "" || name == "." || name == string(filepath.Separator):
			return fmt.Errorf("llm: LoRA adapter %s needs a name", a.Path)
		case seen[name]:
			return fmt.Errorf("llm: two LoRA adapters are named %q", name)
		case math.IsNaN(a.Scale) || math.IsInf(a.Scale, 0):
			return fmt.Errorf("llm: LoRA adapter %q: scale %v", name, a.Scale)
		}
		seen[name] = true
	}
	return nil
}

// mergeLoRAs reads the adapters Options.LoRAMerge adds into the weights,
// and returns them with their entries and the disk tier's key part.
func mergeLoRAs(o Options, parent string) ([]model.MergedAdapter, []*loraEntry, string, error) {
	var ms []model.MergedAdapter
	var entries []*loraEntry
	var key strings.Builder
	for i, a := range o.LoRA {
		start := time.Now()
		name := loraName(a)
		ad, d, err := readLoRA(a.Path, o.MaxLoRARank)
		if err != nil {
			return nil, nil, "", &LoRAError{Name: name, Err: err}
		}
		scale := a.Scale
		if scale == 0 {
			scale = 1
		}
		ms = append(ms, model.MergedAdapter{Adapter: ad, Scale: scale})
		fmt.Fprintf(&key, "%x*%v ", d, scale)
		entries = append(entries, &loraEntry{info: LoRAInfo{Name: name, Path: a.Path, ID: i, Rank: ad.MaxRank(), Modules: len(ad.Modules),
			Bytes: ad.Bytes(), Scale: scale, Parent: parent, Merged: true, Digest: d, LoadTime: time.Since(start)}})
	}
	return ms, entries, key.String(), nil
}

// initLoRAs attaches Options' unmerged adapters, or records the merged
// ones, after the model loaded.
func (lm *Model) initLoRAs(ctx context.Context, o Options, merged []*loraEntry) error {
	lm.loras = loras{byName: map[string]*loraEntry{}, max: o.MaxLoRAs, maxRank: o.MaxLoRARank, merged: o.LoRAMerge}
	for _, e := range merged {
		lm.loras.byName[e.info.Name] = e
		lm.loras.nextID = e.info.ID + 1
	}
	if o.LoRAMerge {
		return nil
	}
	for _, a := range o.LoRA {
		if _, err := lm.loadLoRA(ctx, loraName(a), a.Path, a.Scale); err != nil {
			lm.closeLoRAs()
			return err
		}
	}
	return nil
}

// closeLoRAs detaches every adapter.
func (lm *Model) closeLoRAs() {
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	for name, e := range lm.loras.byName {
		if e.ad != nil {
			e.ad.Close()
		}
		delete(lm.loras.byName, name)
	}
}

// LoadLoRA reads the PEFT adapter in the directory path and attaches it
// under name, for requests to choose (Params.LoRA). It fails, leaving the
// model and the other adapters as they were, when the name is taken, the
// model holds Options.MaxLoRAs adapters, the adapter's rank is over
// Options.MaxLoRARank, its files are missing, truncated or use a feature
// govinfer cannot apply (lora.ErrUnsupported), its shapes are another
// base's, or the model was opened with its adapters merged. The error is
// a *LoRAError.
func (lm *Model) LoadLoRA(ctx context.Context, name, path string) (LoRAInfo, error) {
	return lm.loadLoRA(ctx, name, path, 1)
}

func (lm *Model) loadLoRA(ctx context.Context, name, path string, scale float64) (LoRAInfo, error) {
	start := time.Now()
	fail := func(err error) (LoRAInfo, error) { return LoRAInfo{}, &LoRAError{Name: name, Err: err} }
	if scale == 0 {
		scale = 1
	}
	switch {
	case name == "":
		return fail(errors.New("the adapter needs a name"))
	case path == "":
		return fail(errors.New("the adapter needs a path"))
	case math.IsNaN(scale) || math.IsInf(scale, 0):
		return fail(fmt.Errorf("scale %v", scale))
	}
	if err := lm.loraRoom(name); err != nil {
		return fail(err)
	}
	ad, digest, err := readLoRA(path, lm.loras.maxRank)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	// Checked again: another load may have taken the room or the name.
	if err := lm.loraRoomLocked(name); err != nil {
		return fail(err)
	}
	a, err := lm.m.AttachAdapter(name, ad)
	if err != nil {
		return fail(errors.Unwrap(err))
	}
	e := &loraEntry{ad: a, info: LoRAInfo{Name: name, Path: path, ID: lm.loras.nextID, Rank: a.Rank(), Modules: a.Modules(),
		Bytes: a.Bytes(), Scale: scale, Parent: lm.name, Digest: digest, LoadTime: time.Since(start)}}
	lm.loras.nextID++
	lm.loras.byName[name] = e
	return e.info, nil
}

// loraRoom checks that an adapter can be attached under name.
func (lm *Model) loraRoom(name string) error {
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	return lm.loraRoomLocked(name)
}

func (lm *Model) loraRoomLocked(name string) error {
	l := &lm.loras
	switch {
	case l.merged:
		return errors.New("the model was opened with its LoRA adapters merged into the weights (LoRAMerge); adapters cannot be added at run time")
	case l.byName[name] != nil:
		return fmt.Errorf("an adapter named %q is already loaded", name)
	case l.max > 0 && len(l.byName) >= l.max:
		return fmt.Errorf("%d adapters are loaded, the limit (max_loras) is %d", len(l.byName), l.max)
	}
	return nil
}

// unmerged returns the loaded adapter name, or a LoRAError: it is not
// loaded, or it is merged into the weights (merged says why that refuses
// the caller). l.mu is held.
func (l *loras) unmerged(name, merged string) (*loraEntry, error) {
	e := l.byName[name]
	switch {
	case e == nil:
		return nil, &LoRAError{Name: name, Unknown: true}
	case e.ad == nil:
		return nil, &LoRAError{Name: name, Err: errors.New(merged)}
	}
	return e, nil
}

// UnloadLoRA detaches the adapter name: new requests can no longer choose
// it, and those running with it finish with it (its memory is freed when
// the last one ends). A merged adapter cannot be unloaded.
func (lm *Model) UnloadLoRA(name string) error {
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	e, err := lm.loras.unmerged(name, "it is merged into the weights and cannot be unloaded")
	if err != nil {
		return err
	}
	delete(lm.loras.byName, name)
	e.ad.Close()
	return nil
}

// LoRAs returns the attached adapters, by ID.
func (lm *Model) LoRAs() []LoRAInfo {
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	out := make([]LoRAInfo, 0, len(lm.loras.byName))
	for _, e := range lm.loras.byName {
		out = append(out, e.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// LoRA returns the attached adapter name.
func (lm *Model) LoRA(name string) (LoRAInfo, bool) {
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	if e := lm.loras.byName[name]; e != nil {
		return e.info, true
	}
	return LoRAInfo{}, false
}

// LoRAStats returns the names of the adapters of the running and the
// waiting requests (vLLM's vllm:lora_requests_info).
func (lm *Model) LoRAStats() engine.LoRAStats { return lm.eng.LoRAStats() }

// resolveLoRA returns the engine's adapters for a request's choice. A
// merged adapter needs nothing: the weights hold it (at its one scale).
func (lm *Model) resolveLoRA(uses []LoRAUse) ([]engine.LoRA, error) {
	if len(uses) == 0 {
		return nil, nil
	}
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	var out []engine.LoRA
	seen := map[string]bool{}
	for i, u := range uses {
		param := fmt.Sprintf("lora[%d]", i)
		e := lm.loras.byName[u.Name]
		if e == nil {
			return nil, &LoRAError{Name: u.Name, Unknown: true}
		}
		if seen[u.Name] {
			return nil, paramErr(param, "LoRA adapter %q is chosen twice", u.Name)
		}
		seen[u.Name] = true
		scale := e.info.Scale
		if u.Scale != nil {
			scale = *u.Scale
		}
		if math.IsNaN(scale) || math.IsInf(scale, 0) || math.Abs(scale) > MaxLoRAScale {
			return nil, paramErr(param, "the scale of LoRA adapter %q must be finite and within ±%g, got %v", u.Name, float64(MaxLoRAScale), scale)
		}
		if e.ad == nil {
			if scale != e.info.Scale {
				return nil, paramErr(param, "LoRA adapter %q is merged into the weights at scale %g; it cannot run at %g", u.Name, e.info.Scale, scale)
			}
			continue
		}
		if scale == 0 {
			continue
		}
		out = append(out, engine.LoRA{Adapter: e.ad, Scale: float32(scale), Digest: e.info.Digest, Name: e.info.Name, ID: e.info.ID})
	}
	if len(out) > 1 {
		// Requests with the same adapters share cached state whatever
		// order they named them in.
		slices.SortStableFunc(out, func(a, b engine.LoRA) int { return a.ID - b.ID })
	}
	return out, nil
}

// MaxLoRAScale bounds |scale| of a request's adapter.
const MaxLoRAScale = 100

// SetLoRAScale sets the default scale of the adapter name: the scale of
// requests that name it without one (llama-server's POST /lora-adapters).
// A merged adapter's scale is fixed.
func (lm *Model) SetLoRAScale(name string, scale float64) error {
	if math.IsNaN(scale) || math.IsInf(scale, 0) || math.Abs(scale) > MaxLoRAScale {
		return &LoRAError{Name: name, Err: fmt.Errorf("scale %v is not finite and within ±%g", scale, float64(MaxLoRAScale))}
	}
	lm.loras.mu.Lock()
	defer lm.loras.mu.Unlock()
	e, err := lm.loras.unmerged(name, "it is merged into the weights at a fixed scale")
	if err != nil {
		return err
	}
	e.info.Scale = scale
	return nil
}

// LoRALimits returns Options.MaxLoRAs and Options.MaxLoRARank (0: no
// bound).
func (lm *Model) LoRALimits() (maxLoRAs, maxRank int) { return lm.loras.max, lm.loras.maxRank }
