package jsonconstraint_test

import (
	"fmt"

	"github.com/govinfer/govinfer/jsonconstraint"
)

func ExampleConstraint() {
	g, err := jsonconstraint.Compile([]byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`))
	if err != nil {
		panic(err)
	}
	// A toy vocabulary; id 6 is the end-of-sequence token.
	tokens := [][]byte{[]byte(`{"`), []byte(`ok":`), []byte(`true`), []byte(`}`), []byte(`"`), []byte(`x`), nil}
	vocab, err := jsonconstraint.NewVocab(tokens, []int{6})
	if err != nil {
		panic(err)
	}
	c := jsonconstraint.NewConstraint(g, vocab)
	mask := make([]bool, len(tokens))
	for _, tok := range []int{0, 1, 2, 3} {
		c.Allowed(mask)
		fmt.Println(mask, c.Accept(tok))
	}
	c.Allowed(mask)
	fmt.Println(mask, c.Done())
	// Output:
	// [true false false false false false false] <nil>
	// [false true false false false false false] <nil>
	// [false false true false false false false] <nil>
	// [false false false true false false false] <nil>
	// [false false false false false false true] true
}
