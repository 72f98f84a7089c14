package diag_test

import (
	"context"
	"fmt"

	"github.com/govinfer/govinfer/diag"
	"github.com/govinfer/govinfer/diag/diagtest"
)

// ExampleRun runs the behaviour checks against a scripted fake server.
func ExampleRun() {
	srv := diagtest.NewServer(diagtest.Config{Tokenize: true})
	defer srv.Close()
	rep, err := diag.Run(context.Background(), diag.Options{
		BaseURL: srv.URL,
		Only:    []diag.Part{diag.PartBehavior},
	})
	if err != nil {
		fmt.Println("run broke:", err)
	}
	fmt.Println(rep.Status, rep.Model, rep.BehaviorPasses, "of", len(rep.Behavior))
	// Output: complete diagtest/fake 11 of 11
}
