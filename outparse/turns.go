package outparse

import (
	"strings"

	"github.com/govinfer/govinfer/tokenizer"
)

// turnStart opens every message in the Qwen3.5 chat template
// ("<|im_start|>" + role + "\n").
const turnStart = "<|im_start|>"

// TurnPositions returns the token positions in a rendered, tokenized chat
// prompt where its turns begin: the "<|im_start|>" of each user message
// (tool results included, which the template sends as user turns), and the
// first token of each assistant message's content, right after
// "<|im_start|>assistant\n" (the generation prompt's included). They are
// where later requests of the same conversation are likely to diverge from
// this one: a new turn is appended at a user message, and the template
// renders an assistant turn's reasoning differently once a new user message
// follows it. A tokenizer without "<|im_start|>" gives none.
func TurnPositions(tok *tokenizer.Tokenizer, ids []int) []int {
	start, ok := tok.TokenID(turnStart)
	if !ok {
		return nil
	}
	var out []int
	for i, id := range ids {
		if id != start {
			continue
		}
		// The role and its newline, a token or a few.
		for j := i + 1; j < len(ids) && j <= i+4; j++ {
			role := tok.Decode(ids[i+1:j+1], false)
			if strings.HasPrefix(role, "user") {
				out = append(out, i)
				break
			}
			if role == "assistant\n" {
				out = append(out, j+1)
				break
			}
			if strings.Contains(role, "\n") {
				if strings.HasPrefix(role, "assistant\n") { // the newline merged with the content
					out = append(out, i)
				}
				break
			}
		}
	}
	return out
}
