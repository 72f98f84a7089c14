//go:build cgo

package model

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/compute/vulkan"
	"github.com/govinfer/govinfer/lora"
)

// TestGoldenMoEVulkan runs the mixture-of-experts goldens, the MTP head's
// and speculative decoding's on the Vulkan backend.
func TestGoldenMoEVulkan(t *testing.T) {
	runGoldens(t, "moe-tiny", Options{Backend: newVulkan(t)})
	runMTPGoldens(t, Options{Backend: newVulkan(t)}, moeTiny)
	runSpeculativeGoldens(t, Options{Backend: newVulkan(t)}, moeTiny)
}

// TestMoEBatchInvariantVulkan checks batch invariance on the Vulkan backend.
func TestMoEBatchInvariantVulkan(t *testing.T) {
	checkMoEBatchInvariant(t, Options{Backend: newVulkan(t)})
}

// TestGoldenMoEVulkanCPUExperts runs the goldens, the MTP head's and
// speculation with everything on Vulkan but the experts, which a CPU
// backend holds and runs (--cpu-moe), and with the first two layers'
// experts only (--n-cpu-moe 2).
func TestGoldenMoEVulkanCPUExperts(t *testing.T) {
	for _, layers := range []int{-1, 2} {
		host := cpu.New(cpu.Options{})
		defer host.Close()
		o := Options{Backend: newVulkan(t), ExpertBackend: host, CPUMoELayers: layers}
		runGoldens(t, "moe-tiny", o)
		if layers < 0 {
			runMTPGoldens(t, o, moeTiny)
			runSpeculativeGoldens(t, o, moeTiny)
		}
	}
}

// decodeSteps prefills prompt and decodes n greedy tokens one step at a
// time, returning the tokens, every step's logits and the device's
// submissions per decode step.
func decodeSteps(t *testing.T, m *Model, be *vulkan.Backend, prompt []int, n int) ([]int, [][]float32, []int) {
	t.Helper()
	seq, logits := prefill(t, m, prompt, 0, false)
	var toks []int
	var all [][]float32
	var subs []int
	for range n {
		tok := argmax(logits)
		toks = append(toks, tok)
		before := be.Stats().Submissions
		out, err := m.Step(context.Background(), []Input{{Seq: seq, Tokens: []int{tok}, Logits: LastLogits, Decode: true}})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, be.Stats().Submissions-before)
		logits = out[0].Logits
		all = append(all, logits)
	}
	return toks, all, subs
}

// TestMoEDeviceRoutingVulkan checks that the Vulkan backend routes every
// MoE layer on the device (experts stacked, one weight per projection),
// that its greedy tokens are the host routing's with logits within the
// goldens' tolerance, and that a decode step then makes one submission
// (no read-back inside the MoE layers), where host routing makes one per
// MoE layer more.
func TestMoEDeviceRoutingVulkan(t *testing.T) {
	gm := loadGolden(t, "moe-tiny", Options{})
	prompt := gm.g.Cases[len(gm.g.Cases)-2].Prompt
	tol := gm.g.Tolerances.LogitsRelMax
	type run struct {
		toks   []int
		logits [][]float32
		subs   []int
	}
	runs := map[bool]run{}
	for _, host := range []bool{false, true} {
		be := newVulkan(t)
		m, err := Open(moeTiny, Options{Backend: be, HostMoERouting: host})
		if err != nil {
			t.Fatal(err)
		}
		layers := 0
		for i := range m.w.layers {
			moe := m.w.layers[i].mlp.(*moeMLP)
			want := routeDevice
			if host {
				want = routeHost
			}
			if moe.route != want {
				t.Fatalf("HostMoERouting %v: layer %d routes %d, want %d", host, i, moe.route, want)
			}
			if !host && (moe.stack.gateUp == nil || moe.stack.down == nil || moe.experts[0].gateUp != nil) {
				t.Fatalf("layer %d: experts not stacked", i)
			}
			layers++
		}
		toks, logits, subs := decodeSteps(t, m, be, prompt, 6)
		m.Close()
		runs[host] = run{toks, logits, subs}
		t.Logf("HostMoERouting %v: %d MoE layers, submissions per decode step %v", host, layers, subs)
		for _, s := range subs {
			if !host && s != 1 {
				t.Errorf("device routing: %d submissions in a decode step, want 1", s)
			}
			if host && s < layers+1 {
				t.Errorf("host routing: %d submissions in a decode step, want at least %d", s, layers+1)
			}
		}
	}
	dev, host := runs[false], runs[true]
	if !slices.Equal(dev.toks, host.toks) {
		t.Errorf("greedy tokens %v on the device's routing, %v on the host's", dev.toks, host.toks)
	}
	for i := range dev.logits {
		if e := relErr(dev.logits[i], host.logits[i]); e > tol {
			t.Errorf("step %d: logits differ by %.3g (tolerance %.3g)", i, e, tol)
		}
	}
}

// TestLoRAMoEMergedVulkan checks an adapter merged into every MoE matrix
// at load, the experts included, on the Vulkan backend, whose experts
// then load stacked: the logits are the adapted checkpoint's on the CPU.
func TestLoRAMoEMergedVulkan(t *testing.T) {
	ad, prompt, want := moeLoRAReference(t)
	m, err := Open(moeTiny, Options{Backend: newVulkan(t), Merge: []MergedAdapter{{Adapter: ad, Scale: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if moe := m.w.layers[0].mlp.(*moeMLP); moe.route != routeDevice {
		t.Fatalf("layer 0 routes %d, want on the device", moe.route)
	}
	if e := relErr(adapterLogits(t, m, nil, prompt), want); e > 1e-4 {
		t.Errorf("merged on Vulkan: rel err %.3g against the adapted checkpoint", e)
	}
}

// TestLoRAMoEUnmergedVulkan checks expert updates unmerged on Vulkan with
// the routing on the host, and that device routing refuses them with a
// message that says what to do.
func TestLoRAMoEUnmergedVulkan(t *testing.T) {
	checkLoRAMoEUnmerged(t, Options{Backend: newVulkan(t), HostMoERouting: true})
	adapterDir, _ := moeLoRACase(t)
	ad, err := lora.Load(adapterDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(moeTiny, Options{Backend: newVulkan(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.AttachAdapter("moe", ad); err == nil || !strings.Contains(err.Error(), "--lora-merge") {
		t.Fatalf("attaching expert updates to device-routed experts: %v", err)
	}
}
