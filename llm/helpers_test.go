package llm_test

import (
	"os"
	"sync"
	"testing"

	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

// checkpointDir holds the random test checkpoint (internal/testckpt),
// written once by TestMain.
var checkpointDir string

// smallDir holds testdata/models/small as a checkpoint llm.Open takes
// (testckpt.WriteSmall), for testdata/lora's adapters.
var smallDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llm-ckpt-")
	if err != nil {
		panic(err)
	}
	if err := testckpt.Write(dir, "../testdata"); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	checkpointDir = dir
	if smallDir, err = os.MkdirTemp("", "llm-small-"); err != nil {
		panic(err)
	}
	if err := testckpt.WriteSmall(smallDir, "../testdata"); err != nil {
		os.RemoveAll(dir)
		os.RemoveAll(smallDir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(smallDir)
	if shared != nil {
		shared.Close()
	}
	if vlModel != nil {
		vlModel.Close()
	}
	os.RemoveAll(dir)
	if vlDir != "" {
		os.RemoveAll(vlDir) // openVL's
	}
	os.Exit(code)
}

var (
	sharedOnce sync.Once
	shared     *llm.Model
	sharedErr  error
)

// openModel returns a model on the test checkpoint shared by the tests.
func openModel(t *testing.T) *llm.Model {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048}) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// collected is a choice's output: its text by kind, its calls, its tokens
// and its Finish event.
type collected struct {
	reasoning, content string
	calls              []llm.ToolCall
	tokens             []int
	finish             llm.Event
}

// collect runs a stream to its end.
func collect(t *testing.T, st *llm.Stream) []collected {
	t.Helper()
	defer st.Close()
	out := make([]collected, st.Choices())
	for ev := range st.Events() {
		c := &out[ev.Choice]
		for _, tk := range ev.Tokens {
			c.tokens = append(c.tokens, tk.ID)
		}
		switch ev.Kind {
		case llm.KindReasoning:
			c.reasoning += ev.Text
		case llm.KindContent, llm.KindFinish:
			c.content += ev.Text
		case llm.KindToolCall:
			c.calls = append(c.calls, *ev.ToolCall)
		}
		if ev.Kind == llm.KindFinish {
			c.finish = ev
		}
	}
	return out
}

// greedy returns greedy decoding of up to max tokens.
func greedy(max int) llm.Params {
	return llm.Params{MaxTokens: max, Temperature: llm.F64(0)}
}
