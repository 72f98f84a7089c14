package lora_test

import (
	"fmt"
	"log"

	"github.com/govinfer/govinfer/lora"
)

func ExampleLoad() {
	a, err := lora.Load("../testdata/lora/lora-small-b")
	if err != nil {
		log.Fatal(err)
	}
	m, ok := a.Module("model.language_model.layers.3.self_attn.o_proj")
	if !ok {
		log.Fatal("no o_proj update")
	}
	fmt.Printf("%d modules, rank %d, %d KiB\n", len(a.Modules), a.MaxRank(), a.Bytes()>>10)
	fmt.Printf("%s: [%d, %d] += %g · B[%d, %d] · A[%d, %d]\n", m.Name, m.Out, m.In, m.Scale, m.Out, m.Rank, m.Rank, m.In)
	// Output:
	// 28 modules, rank 4, 241 KiB
	// model.language_model.layers.3.self_attn.o_proj: [256, 512] += 1 · B[256, 4] · A[4, 512]
}
