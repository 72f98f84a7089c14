package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func haystack(b *testing.B) string {
	for _, c := range mustCases(b) {
		if c.Category == "haystack" || len(c.IDs) > 7000 {
			return c.Text
		}
	}
	b.Fatal("no haystack case")
	return ""
}

// mixedText is about 1 MB of all the encode cases' texts repeated.
func mixedText(b *testing.B) string {
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		for _, c := range mustCases(b) {
			if c.Kind == "encode" {
				sb.WriteString(c.Text)
				sb.WriteString("\n")
			}
		}
	}
	return sb.String()
}

// reportCPU adds the CPU time per operation (ms) and the throughput in CPU
// time (MB/cpu-s) to the benchmark's output.
func reportCPU(b *testing.B, start time.Duration, bytes int) {
	cpu := processCPU(b) - start
	if cpu <= 0 || b.N == 0 {
		return
	}
	per := cpu.Seconds() / float64(b.N)
	b.ReportMetric(per*1e3, "cpu-ms/op")
	if bytes > 0 {
		b.ReportMetric(float64(bytes)/1e6/per, "MB/cpu-s")
	}
}

func benchEncode(b *testing.B, text string, cold bool) {
	tok := mustQwen3(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	defer reportCPU(b, processCPU(b), len(text))
	for b.Loop() {
		if cold {
			tok.model.mu.Lock()
			clear(tok.model.cache)
			tok.model.mu.Unlock()
		}
		tok.Encode(text)
	}
}

// BenchmarkEncodeHaystack encodes the 7,762-token needle-in-a-haystack
// prompt, with the pre-token cache warm (as for repeated prompts) and cold.
func BenchmarkEncodeHaystack(b *testing.B) {
	text := haystack(b)
	b.Run("warm", func(b *testing.B) { benchEncode(b, text, false) })
	b.Run("cold", func(b *testing.B) { benchEncode(b, text, true) })
}

// BenchmarkEncodeMixed1MB encodes 1 MB of mixed scripts, code, emoji and
// white space.
func BenchmarkEncodeMixed1MB(b *testing.B) {
	text := mixedText(b)
	b.Run("warm", func(b *testing.B) { benchEncode(b, text, false) })
	b.Run("cold", func(b *testing.B) { benchEncode(b, text, true) })
}

func BenchmarkDecodeHaystack(b *testing.B) {
	tok := mustQwen3(b)
	text := haystack(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	defer reportCPU(b, processCPU(b), len(text))
	for b.Loop() {
		tok.Decode(ids, false)
	}
}

// BenchmarkLoad loads the 11 MB Qwen3 tokenizer.json and its config.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	defer reportCPU(b, processCPU(b), 0)
	for b.Loop() {
		if _, err := Load(filepath.Join("..", "testdata", "tokenizer", "qwen3")); err != nil {
			b.Fatal(err)
		}
	}
}
