package tokenizer_test

import (
	"fmt"
	"log"
	"path/filepath"

	"github.com/govinfer/govinfer/tokenizer"
)

func Example() {
	tok, err := tokenizer.Load(filepath.Join("..", "testdata", "tokenizer", "qwen3"))
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("<|im_start|>user\nHello, world!<|im_end|>")
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, true))
	end, _ := tok.TokenID("<|im_end|>")
	fmt.Println(end, tok.IsSpecial(end), tok.EOSTokens())
	// Output:
	// [151644 872 198 9707 11 1879 0 151645]
	// "user\nHello, world!"
	// 151645 true [151645]
}

func ExampleDecoder() {
	tok, err := tokenizer.Load(filepath.Join("..", "testdata", "tokenizer", "qwen3"))
	if err != nil {
		log.Fatal(err)
	}
	// The four byte tokens of 😀, then "Hello", ",", " world", "!".
	d := tok.NewDecoder(true, []string{" world"})
	for _, id := range []int{172, 253, 246, 222, 9707, 11, 1879, 0} {
		text, stopped := d.Push(id)
		fmt.Printf("%d -> %q %v\n", id, text, stopped)
		if stopped {
			break
		}
	}
	fmt.Printf("stopped on %q\n", d.StopString())
	// Output:
	// 172 -> "" false
	// 253 -> "" false
	// 246 -> "" false
	// 222 -> "😀" false
	// 9707 -> "Hello" false
	// 11 -> "," false
	// 1879 -> "" true
	// stopped on " world"
}
