package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/internal/testckpt"
	"github.com/govinfer/govinfer/llm"
)

// A Go program serves a model it opened over the OpenAI-compatible API.
// The model stays the program's: it may use it beside the server, and
// closes it after the server.
func Example() {
	dir := randomCheckpoint() // stands in for "/path/to/Qwen3.5-9B"
	defer os.RemoveAll(dir)
	m, err := llm.Open(dir, llm.Options{MaxModelLen: 2048})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	srv, err := httpapi.Start(context.Background(), m, httpapi.Config{Addr: "127.0.0.1:0", ServedModelName: "my-model"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	resp, err := http.Post("http://"+srv.Addr()+"/v1/completions", "application/json",
		strings.NewReader(`{"model": "my-model", "prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": true}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, "completion tokens:", body.Usage.CompletionTokens)
	fmt.Println("served requests:", m.Stats().Finished.Length)
	// Output:
	// 200 OK completion tokens: 4
	// served requests: 1
}

// randomCheckpoint writes a random model of tiny widths with the test
// tokenizer and chat template (internal/testckpt) to a new directory.
func randomCheckpoint() string {
	dir, err := os.MkdirTemp("", "httpapi-example-")
	if err != nil {
		log.Fatal(err)
	}
	if err := testckpt.Write(dir, "../testdata"); err != nil {
		log.Fatal(err)
	}
	return dir
}
