package model

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/govinfer/govinfer/randmodel"
)

// benchModel returns a checkpoint for benchmarks: a test checkpoint by name,
// or "9b-widths", a random model with the real Qwen3.5-9B layer widths and
// few layers, generated once into the user cache directory.
func benchModel(b *testing.B, name string) string {
	b.Helper()
	if name != "9b-widths" {
		return filepath.Join("..", "testdata", "models", name)
	}
	shape, err := randmodel.LookupShape("qwen3.5-9b")
	if err != nil {
		b.Fatal(err)
	}
	shape.Layers, shape.Vocab = 4, 32768 // all four mixer kinds' widths; a smaller vocab keeps the file at ~1.5 GB
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "govinfer", fmt.Sprintf("bench-9b-widths-l%d-v%d", shape.Layers, shape.Vocab))
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		return dir
	}
	start := time.Now()
	if err := randmodel.Write(dir, shape, randmodel.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %s in %s", dir, time.Since(start).Round(time.Millisecond))
	return dir
}

// BenchmarkDecode measures one decode step (one token of one sequence after a
// 64-token prompt) and reports tokens/s and the weight bytes read per second.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"small", "9b-widths"} {
		b.Run(name, func(b *testing.B) {
			m, err := Open(benchModel(b, name), withCPU(b, Options{}))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			seq, err := m.NewSequence()
			if err != nil {
				b.Fatal(err)
			}
			defer seq.Close()
			ctx := context.Background()
			prompt := make([]int, 64)
			for i := range prompt {
				prompt[i] = (i * 7919) % m.Config().VocabSize
			}
			if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: prompt}}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: []int{i % m.Config().VocabSize}}}); err != nil {
					b.Fatal(err)
				}
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "tokens/s")
			b.ReportMetric(float64(m.DecodeBytes())*float64(b.N)/secs/1e9, "GB/s")
		})
	}
}

// BenchmarkPrefill measures a 256-token prompt in one step and reports
// prompt tokens/s.
func BenchmarkPrefill(b *testing.B) {
	const promptLen = 256
	for _, name := range []string{"small", "9b-widths"} {
		b.Run(name, func(b *testing.B) {
			m, err := Open(benchModel(b, name), withCPU(b, Options{}))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			prompt := make([]int, promptLen)
			for i := range prompt {
				prompt[i] = (i * 7919) % m.Config().VocabSize
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				seq, err := m.NewSequence()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: prompt}}); err != nil {
					b.Fatal(err)
				}
				seq.Close()
			}
			b.ReportMetric(float64(b.N*promptLen)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkDecodeBatch measures decode steps of 1 and 16 sequences at once
// on the small model and reports aggregate tokens/s: batching pays when the
// 16-sequence figure is several times the single one, since each step reads
// the weights once for the whole batch.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("small/seqs=%d", batch), func(b *testing.B) {
			m, err := Open(benchModel(b, "small"), withCPU(b, Options{}))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			inputs := make([]Input, batch)
			for i := range inputs {
				seq, err := m.NewSequence()
				if err != nil {
					b.Fatal(err)
				}
				defer seq.Close()
				prompt := make([]int, 32+i)
				for j := range prompt {
					prompt[j] = (j*7919 + i) % m.Config().VocabSize
				}
				if _, err := m.Step(ctx, []Input{{Seq: seq, Tokens: prompt, Logits: NoLogits}}); err != nil {
					b.Fatal(err)
				}
				inputs[i] = Input{Seq: seq, Tokens: []int{i}}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Step(ctx, inputs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
