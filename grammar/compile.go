package grammar

import (
	"fmt"

	"github.com/govinfer/govinfer/grammar/regex"
)

// Regex compiles a regular expression that the whole output must match
// (vLLM's structured_outputs.regex).
func Regex(pattern string) (*Grammar, error) {
	n, err := regex.Parse(pattern, false)
	if err != nil {
		return nil, err
	}
	return Build([]Rule{{Name: "regex", Body: n}}, "regex")
}

// MaxChoices bounds a choice list.
const MaxChoices = 4096

// Choice compiles a list of strings the output must be exactly one of
// (vLLM's structured_outputs.choice).
func Choice(choices []string) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, &Error{Pos: -1, Msg: "the choice list is empty"}
	}
	if len(choices) > MaxChoices {
		return nil, &Error{Pos: -1, Msg: fmt.Sprintf("%d choices; at most %d are allowed", len(choices), MaxChoices)}
	}
	alts := make([]*regex.Node, len(choices))
	for i, c := range choices {
		alts[i] = regex.Lit(c)
		if c == "" {
			alts[i] = &regex.Node{Op: regex.OpEmpty}
		}
	}
	return Build([]Rule{{Name: "choice", Body: regex.Alt(alts...)}}, "choice")
}
