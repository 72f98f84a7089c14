package main

import (
	"context"
	"fmt"
	goio "io"
	"time"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/lora"
	"github.com/govinfer/govinfer/model"
)

// bench --lora: the cost of a LoRA adapter, unmerged and merged, in the
// same run as the base model, rounds alternating and medians reported.

// loraBenchResult is bench --lora's report.
type loraBenchResult struct {
	Adapter     string  `json:"adapter"`
	Rank        int     `json:"rank"`
	Modules     int     `json:"modules"`
	AdapterMiB  float64 `json:"adapter_mib"`
	LoadSeconds float64 `json:"load_seconds"` // reading the files and attaching them
	Prompt      int     `json:"prompt_tokens"`
	Gen         int     `json:"gen_tokens"`
	Quantize    string  `json:"quantize,omitempty"`

	PrefillBase  float64 `json:"prefill_tok_s_base"`
	PrefillLoRA  float64 `json:"prefill_tok_s_lora"`
	PrefillRatio float64 `json:"prefill_ratio"`
	DecodeBase   float64 `json:"decode_tok_s_base"`
	DecodeLoRA   float64 `json:"decode_tok_s_lora"`
	DecodeRatio  float64 `json:"decode_ratio"`

	// Batch: BatchSeqs sequences decoding together, all with one adapter
	// against spread over BatchAdapters adapters (copies of it).
	BatchSeqs      int     `json:"batch_seqs"`
	BatchAdapters  int     `json:"batch_adapters"`
	BatchOne       float64 `json:"batch_tok_s_one_adapter"`
	BatchMany      float64 `json:"batch_tok_s_many_adapters"`
	BatchManyRatio float64 `json:"batch_many_ratio"`

	// Merged: the adapter added into the weights at load, decoding against
	// the base (loaded the same way, measured in turns with it).
	MergedDecode float64 `json:"decode_tok_s_merged,omitempty"`
	MergedRatio  float64 `json:"merged_ratio,omitempty"`
	MergedNote   string  `json:"merged_note,omitempty"`
}

type loraBenchOptions struct {
	dir, quantize string
	backend       compute.Backend
	adapter       string
	prompt, gen   int
	repeat        int
	batch         int
	noMerged      bool
	mergeFormat   string // --lora-merge-format
}

// benchLoRA measures an adapter on the model (see loraBenchResult).
func benchLoRA(ctx context.Context, o loraBenchOptions, log goio.Writer) (*loraBenchResult, error) {
	res := &loraBenchResult{Adapter: o.adapter, Prompt: o.prompt, Gen: o.gen, Quantize: o.quantize, BatchSeqs: o.batch, BatchAdapters: 4}
	m, err := model.OpenContext(ctx, o.dir, model.Options{Backend: o.backend, Quantize: o.quantize})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	start := time.Now()
	ad, err := lora.Load(o.adapter)
	if err != nil {
		return nil, err
	}
	a, err := m.AttachAdapter("bench", ad)
	if err != nil {
		return nil, err
	}
	res.LoadSeconds = time.Since(start).Seconds()
	res.Rank, res.Modules, res.AdapterMiB = a.Rank(), a.Modules(), float64(a.Bytes())/(1<<20)
	adapters := []*model.Adapter{a}
	for i := 1; i < res.BatchAdapters; i++ {
		c, err := m.AttachAdapter(fmt.Sprintf("bench-%d", i), ad)
		if err != nil {
			return nil, err
		}
		adapters = append(adapters, c)
	}
	ids := benchPrompt(m.Config(), o.prompt, 1)
	var pb, pl, db, dl, bo, bm []float64
	one := func(int) []model.AdapterUse { return []model.AdapterUse{{Adapter: a, Scale: 1}} }
	many := func(i int) []model.AdapterUse {
		return []model.AdapterUse{{Adapter: adapters[i%len(adapters)], Scale: 1}}
	}
	for r := range o.repeat + 1 { // the first round warms up
		p0, d0, err := loraOnce(ctx, m, ids, o.gen, nil)
		if err != nil {
			return nil, err
		}
		p1, d1, err := loraOnce(ctx, m, ids, o.gen, one(0))
		if err != nil {
			return nil, err
		}
		b1, err := benchBatch(ctx, m, o.batch, o.prompt, o.gen, nil, nil, &moeWork{}, one)
		if err != nil {
			return nil, err
		}
		b4, err := benchBatch(ctx, m, o.batch, o.prompt, o.gen, nil, nil, &moeWork{}, many)
		if err != nil {
			return nil, err
		}
		if r > 0 {
			pb, pl, db, dl, bo, bm = append(pb, p0), append(pl, p1), append(db, d0), append(dl, d1), append(bo, b1), append(bm, b4)
		}
	}
	res.PrefillBase, res.PrefillLoRA = median(pb), median(pl)
	res.DecodeBase, res.DecodeLoRA = median(db), median(dl)
	res.BatchOne, res.BatchMany = median(bo), median(bm)
	res.PrefillRatio, res.DecodeRatio, res.BatchManyRatio = res.PrefillLoRA/res.PrefillBase, res.DecodeLoRA/res.DecodeBase, res.BatchMany/res.BatchOne
	for _, x := range adapters {
		x.Close()
	}
	if o.noMerged {
		return res, nil
	}
	mm, err := model.OpenContext(ctx, o.dir, model.Options{Backend: o.backend, Quantize: o.quantize, Merge: []model.MergedAdapter{{Adapter: ad, Scale: 1}}, MergeFormat: o.mergeFormat})
	if err != nil {
		return nil, fmt.Errorf("merged: %w", err)
	}
	defer mm.Close()
	var mb, md []float64
	for r := range o.repeat + 1 {
		_, d0, err := loraOnce(ctx, m, ids, o.gen, nil)
		if err != nil {
			return nil, err
		}
		_, d1, err := loraOnce(ctx, mm, ids, o.gen, nil)
		if err != nil {
			return nil, err
		}
		if r > 0 {
			mb, md = append(mb, d0), append(md, d1)
		}
	}
	res.MergedDecode = median(md)
	res.MergedRatio = res.MergedDecode / median(mb)
	if o.quantize == "" && o.mergeFormat == "base" {
		res.MergedNote = "merged into a float checkpoint in its own format (--lora-merge-format base): the base's bytes, the update rounded"
	} else if o.quantize == "" {
		res.MergedNote = "merged into a float checkpoint, the matrices the adapter touches are F32 (a BF16 base reads twice their bytes); with --quantize or --lora-merge-format base they keep the base's format"
	} else {
		res.MergedNote = "merged matrices are quantized to " + o.quantize + " as the base's"
	}
	return res, nil
}

// loraOnce prefills ids in a new sequence running with uses and decodes
// gen tokens greedily, returning both rates in tokens/s.
func loraOnce(ctx context.Context, m *model.Model, ids []int, gen int, uses []model.AdapterUse) (prefill, decode float64, err error) {
	seq, err := m.NewSequence()
	if err != nil {
		return 0, 0, err
	}
	defer seq.Close()
	if err := seq.Reserve(min(len(ids)+gen, m.Config().MaxContext())); err != nil {
		return 0, 0, err
	}
	if err := seq.SetAdapters(uses); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: ids}})
	if err != nil {
		return 0, 0, err
	}
	prefill = float64(len(ids)) / time.Since(start).Seconds()
	tok := compute.Argmax(out[0].Logits)
	start = time.Now()
	for range gen {
		out, err = m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{tok}, Logits: model.LastArgmax, Decode: true}})
		if err != nil {
			return 0, 0, err
		}
		tok = out[0].Argmax
	}
	return prefill, float64(gen) / time.Since(start).Seconds(), nil
}

// print writes the report as text.
func (r *loraBenchResult) print(w goio.Writer) {
	fmt.Fprintf(w, "LoRA adapter %s: rank %d, %d modules, %.1f MiB, loaded in %.3fs\n", r.Adapter, r.Rank, r.Modules, r.AdapterMiB, r.LoadSeconds)
	fmt.Fprintf(w, "prefill %d tokens: %.1f tok/s with the adapter, %.1f without: %.3fx\n", r.Prompt, r.PrefillLoRA, r.PrefillBase, r.PrefillRatio)
	fmt.Fprintf(w, "decode %d tokens:  %.2f tok/s with the adapter, %.2f without: %.3fx\n", r.Gen, r.DecodeLoRA, r.DecodeBase, r.DecodeRatio)
	fmt.Fprintf(w, "batch of %d: %.2f tok/s over %d adapters, %.2f over one: %.3fx\n", r.BatchSeqs, r.BatchMany, r.BatchAdapters, r.BatchOne, r.BatchManyRatio)
	if r.MergedDecode > 0 {
		fmt.Fprintf(w, "merged: decode %.2f tok/s, %.3fx the base (%s)\n", r.MergedDecode, r.MergedRatio, r.MergedNote)
	}
}
