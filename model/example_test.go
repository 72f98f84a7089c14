package model_test

import (
	"context"
	"fmt"
	"log"

	"github.com/govinfer/govinfer/model"
)

// Open a checkpoint, feed a prompt of token ids to a new sequence and
// generate greedily.
func Example() {
	m, err := model.Open("../testdata/models/tiny", model.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	seq, err := m.NewSequence()
	if err != nil {
		log.Fatal(err)
	}
	defer seq.Close()

	res, err := m.Generate(context.Background(), seq, []int{280, 17, 512}, model.GenerateOptions{MaxTokens: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(res.Tokens), "tokens; the sequence now holds", seq.Len())
	// Output: 5 tokens; the sequence now holds 7
}
