package model_test

import (
	"context"
	"fmt"
	"log"

	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/model"
)

// Open a checkpoint on a CPU backend, feed a prompt of token ids to a new
// sequence and decode greedily, one step per token. (Applications use llm,
// whose engine runs this loop for many requests at once.)
func Example() {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := model.Open("../testdata/models/tiny", model.Options{Backend: be})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	seq, err := m.NewSequence()
	if err != nil {
		log.Fatal(err)
	}
	defer seq.Close()

	ctx := context.Background()
	tokens := []int{280, 17, 512}
	for range 5 {
		out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: tokens, Logits: model.LastArgmax}})
		if err != nil {
			log.Fatal(err)
		}
		tokens = []int{out[0].Argmax}
	}
	fmt.Println("the sequence now holds", seq.Len(), "tokens")
	// Output: the sequence now holds 7 tokens
}
