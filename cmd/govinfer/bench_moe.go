package main

import (
	"fmt"
	goio "io"
	"time"

	"github.com/govinfer/govinfer/model"
)

// moeJSONKeys lists moeResult's keys for bench's --help.
const moeJSONKeys = "decode_moe_fraction, decode_experts_per_token, decode_expert_bytes_per_token, " +
	"batch_experts_per_step, batch_decode_bytes_per_step, batch_decode_moe_fraction (mixture-of-experts models), " +
	"projected_layers, projected_decode_tokens_per_second (a model of a released Qwen3.5's widths with fewer layers)"

// moeResult is what bench reports of a mixture-of-experts model's decode.
type moeResult struct {
	// DecodeMoEFraction is the share of decode time spent in the MoE
	// blocks (routing, experts and shared expert: model.MoEStats.Time).
	DecodeMoEFraction float64 `json:"decode_moe_fraction,omitempty"`
	// DecodeExpertsPerToken is the experts one decoded token ran, over all
	// layers (k per layer), and DecodeExpertBytesPerToken their bytes.
	DecodeExpertsPerToken     float64 `json:"decode_experts_per_token,omitempty"`
	DecodeExpertBytesPerToken float64 `json:"decode_expert_bytes_per_token,omitempty"`
	// With --batch: the experts a step of the whole batch ran (each once
	// for all the sequences that chose it) and the weight bytes the step
	// read: the dense weights once, those experts once.
	BatchExpertsPerStep   float64 `json:"batch_experts_per_step,omitempty"`
	BatchDecodeBytesStep  float64 `json:"batch_decode_bytes_per_step,omitempty"`
	BatchMoEFraction      float64 `json:"batch_decode_moe_fraction,omitempty"`
	ProjectedLayers       int     `json:"projected_layers,omitempty"`
	ProjectedDecodeTokens float64 `json:"projected_decode_tokens_per_second,omitempty"`
}

// print writes the MoE lines of bench's text output: none for a dense
// model.
func (r *moeResult) print(w goio.Writer) {
	if r.DecodeExpertsPerToken > 0 {
		fmt.Fprintf(w, "experts    %8.1f per token  (%.3f GB of the step; %.0f%% of decode time in MoE blocks)\n",
			r.DecodeExpertsPerToken, r.DecodeExpertBytesPerToken/1e9, 100*r.DecodeMoEFraction)
	}
	if r.BatchExpertsPerStep > 0 {
		fmt.Fprintf(w, "           %8.1f per batch step (%.3f GB read per step; %.0f%% of it in MoE blocks)\n",
			r.BatchExpertsPerStep, r.BatchDecodeBytesStep/1e9, 100*r.BatchMoEFraction)
	}
	if r.ProjectedLayers > 0 {
		fmt.Fprintf(w, "projected  %8.2f tokens/s  (decode of the released %d-layer model of these widths, scaled by bytes read)\n",
			r.ProjectedDecodeTokens, r.ProjectedLayers)
	}
}

// moeWork adds up the MoE work of timed decode steps.
type moeWork struct {
	steps   int
	elapsed time.Duration
	model.MoEStats
}

// add adds the work between two snapshots, over steps steps that took
// elapsed.
func (w *moeWork) add(before, after model.MoEStats, steps int, elapsed time.Duration) {
	w.steps += steps
	w.elapsed += elapsed
	w.Blocks += after.Blocks - before.Blocks
	w.ExpertRuns += after.ExpertRuns - before.ExpertRuns
	w.ExpertBytes += after.ExpertBytes - before.ExpertBytes
	w.Time += after.Time - before.Time
}

// familyLayers gives the layer count of the released Qwen3.5 model of a
// hidden size (and experts or not), for projecting a benchmark of a few
// layers to the whole model; 0 when none matches.
func familyLayers(c *model.Config) int {
	type key struct {
		hidden int
		moe    bool
	}
	return map[key]int{
		{1024, false}: 24, {2048, false}: 24, {2560, false}: 32, {4096, false}: 32, {5120, false}: 64,
		{2048, true}: 40, {3072, true}: 48, {4096, true}: 60,
	}[key{c.HiddenSize, c.MoE()}]
}

// setMoE fills the MoE figures from the decode steps' work (single and
// batched), and the decode rate projected to the released model of these
// widths: the step's time scaled as its bytes, the layers' share times
// the released layer count over this model's.
func (r *benchResult) setMoE(m *model.Model, single, batch moeWork) {
	c := m.Config()
	if layers := familyLayers(c); layers > 0 && r.DecodeTokensPerSecond > 0 && c.NumLayers < layers {
		out := m.OutputBytes()
		stack := float64(r.DecodeBytesPerToken - out)
		scale := (float64(out) + stack*float64(layers)/float64(c.NumLayers)) / float64(r.DecodeBytesPerToken)
		r.ProjectedLayers, r.ProjectedDecodeTokens = layers, r.DecodeTokensPerSecond/scale
	}
	if !c.MoE() || single.steps == 0 {
		return
	}
	r.DecodeMoEFraction = single.Time.Seconds() / single.elapsed.Seconds()
	r.DecodeExpertsPerToken = float64(single.ExpertRuns) / float64(single.steps)
	r.DecodeExpertBytesPerToken = float64(single.ExpertBytes) / float64(single.steps)
	if batch.steps > 0 {
		dense := float64(r.DecodeBytesPerToken) - r.DecodeExpertBytesPerToken
		r.BatchExpertsPerStep = float64(batch.ExpertRuns) / float64(batch.steps)
		r.BatchDecodeBytesStep = dense + float64(batch.ExpertBytes)/float64(batch.steps)
		r.BatchMoEFraction = batch.Time.Seconds() / batch.elapsed.Seconds()
	}
}
