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
