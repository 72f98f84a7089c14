package safetensors_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/govinfer/govinfer/safetensors"
)

// Write a small checkpoint in two shards, open it and read a tensor back.
func Example() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	w, err := safetensors.FromFloat32("w", safetensors.BF16, []int{2, 2}, []float32{1, 2, 3, 4})
	if err != nil {
		log.Fatal(err)
	}
	scale, err := safetensors.FromFloat32("scale", safetensors.F32, []int{2}, []float32{0.5, 0.25})
	if err != nil {
		log.Fatal(err)
	}
	if err := safetensors.WriteSharded(dir, []safetensors.Tensor{w, scale}, 8); err != nil {
		log.Fatal(err)
	}

	c, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, p := range c.Files() {
		fmt.Println(filepath.Base(p))
	}
	t, err := c.Tensor("w")
	if err != nil {
		log.Fatal(err)
	}
	vals, err := t.ToFloat32()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.DType, t.Shape, vals, c.TotalBytes())
	// Output:
	// model-00001-of-00002.safetensors
	// model-00002-of-00002.safetensors
	// BF16 [2 2] [1 2 3 4] 16
}
