package llm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/govinfer/govinfer/llm"
)

// A chat on a checkpoint directory. The test checkpoint's weights are
// random, so the example prints the finish reason and token count rather
// than the (meaningless) answer.
func Example() {
	m, err := llm.Open(checkpointDir, llm.Options{}) // CPU backend on all cores
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	st, err := m.Chat(context.Background(), llm.ChatRequest{
		Messages: []llm.Message{{Role: "user", Content: "What is the capital of France?"}},
		Thinking: llm.Bool(false),
		Params:   llm.Params{MaxTokens: 8, Temperature: llm.F64(0), IgnoreEOS: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	answer := ""
	for ev := range st.Events() {
		switch ev.Kind {
		case llm.KindContent:
			answer += ev.Text // print it as it comes
		case llm.KindFinish:
			fmt.Println("finish:", ev.Finish, "tokens:", st.Usage().CompletionTokens)
		}
	}
	// Output: finish: length tokens: 8
}

// Open a base model, attach LoRA adapters (at open and at run time) and
// generate with one: requests choose adapters by name, and one batch may
// mix them. The test model's weights are random, so the example prints
// the adapters and the token count rather than the text.
func ExampleModel_LoadLoRA() {
	m, err := llm.Open(smallDir, llm.Options{
		LoRA:        []llm.LoRAAdapter{{Name: "support", Path: "../testdata/lora/lora-small-a"}},
		MaxLoRARank: 64,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if _, err := m.LoadLoRA(context.Background(), "legal", "../testdata/lora/lora-small-b"); err != nil {
		log.Fatal(err)
	}
	for _, a := range m.LoRAs() {
		fmt.Printf("adapter %d %s: rank %d\n", a.ID, a.Name, a.Rank)
	}
	st, err := m.Complete(context.Background(), llm.CompletionRequest{
		Prompts: []llm.Prompt{{Text: "Hello"}},
		Params:  llm.Params{MaxTokens: 8, Temperature: llm.F64(0), IgnoreEOS: true, LoRA: []llm.LoRAUse{{Name: "legal"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for ev := range st.Events() {
		if ev.Kind == llm.KindFinish {
			fmt.Println("finish:", ev.Finish, "tokens:", st.Usage().CompletionTokens)
		}
	}
	// Output:
	// adapter 0 support: rank 8
	// adapter 1 legal: rank 4
	// finish: length tokens: 8
}
