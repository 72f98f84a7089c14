package outparse

import "strings"

// The opening of a Qwen3.5 tool call and the prompt endings, as the chat
// template writes them.
const (
	callNameClose = ">\n"
	// afterThink separates the reasoning from the answer in the template.
	afterThink = "\n\n"
	// thinkingPrompt ends a prompt whose generation opens with reasoning.
	thinkingPrompt = thinkOpen + "\n"
)

// ThinkingOpened reports whether a rendered prompt leaves the model in its
// reasoning block: the Qwen3.5 template ends the generation prompt with
// "<think>\n" when thinking is enabled (and with an empty, closed block when
// it is not). Its result is the Thinking option of the output parser.
func ThinkingOpened(prompt string) bool { return strings.HasSuffix(prompt, thinkingPrompt) }
