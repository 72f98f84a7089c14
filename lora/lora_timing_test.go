package lora

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkLoad reads each shared adapter (F32 and BF16 factors) from disk.
func BenchmarkLoad(b *testing.B) {
	for _, fx := range fixtures {
		dir := filepath.Join("../testdata/lora", fx.dir)
		st, err := os.Stat(filepath.Join(dir, WeightsFile))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fx.dir, func(b *testing.B) {
			b.SetBytes(st.Size())
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Load(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
