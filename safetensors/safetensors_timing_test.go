package safetensors

import (
	"path/filepath"
	"testing"
)

var smallDir = filepath.Join("..", "testdata", "models", "small")

// BenchmarkOpenSmall maps and validates the small reference checkpoint file.
func BenchmarkOpenSmall(b *testing.B) {
	path := filepath.Join(smallDir, SingleFileName)
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkOpenCheckpointSmall opens the small checkpoint directory.
func BenchmarkOpenCheckpointSmall(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c, err := OpenCheckpoint(smallDir)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkReadAllSmall opens the small checkpoint and touches one byte per
// 4 KiB page of every tensor: the cost of mapping the weights in (from the
// page cache).
func BenchmarkReadAllSmall(b *testing.B) {
	b.ReportAllocs()
	var sum byte
	for b.Loop() {
		c, err := OpenCheckpoint(smallDir)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(c.TotalBytes())
		for _, name := range c.Names() {
			t, err := c.Tensor(name)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(t.Data); i += 4096 {
				sum += t.Data[i]
			}
		}
		c.Close()
	}
	_ = sum
}

// BenchmarkTensorLookup measures one Checkpoint.Tensor call.
func BenchmarkTensorLookup(b *testing.B) {
	c, err := OpenCheckpoint(smallDir)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	name := "model.language_model.layers.3.self_attn.q_proj.weight"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Tensor(name); err != nil {
			b.Fatal(err)
		}
	}
}
