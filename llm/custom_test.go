package llm_test

import (
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// A custom (free-form) tool is offered as a function of one string
// parameter, its forced call comes back as ToolCall.Custom with the text as
// Input, and such a call in the history renders as that one parameter.
func TestCustomTool(t *testing.T) {
	m := openModel(t)
	patch := llm.Tool{Name: "apply_patch", Description: "Apply a patch.", Custom: true, Grammar: `start: "*** Begin Patch" /(.|\n)*/ "*** End Patch"`}
	prompt, _, err := m.ChatPrompt(llm.ChatRequest{Messages: user("Fix it."), Tools: []llm.Tool{patch}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name": "apply_patch"`, `"input": {"type": "string"`, "*** Begin Patch", `"required": ["input"]`} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the prompt lacks %s:\n%s", want, prompt)
		}
	}
	req := llm.ChatRequest{Messages: user("Fix it."), Tools: []llm.Tool{patch},
		ToolChoice: llm.ToolChoice{Mode: "function", Function: "apply_patch"}, Thinking: llm.Bool(false), Params: greedy(40)}
	out := collect(t, mustChat(t, m, req))[0]
	if len(out.calls) == 0 {
		t.Skipf("the random model did not close the call within 40 tokens (finish %s)", out.finish.Finish)
	}
	c := out.calls[0]
	if !c.Custom || c.Name != "apply_patch" || !strings.Contains(c.Arguments, c.Input[:min(len(c.Input), 3)]) {
		t.Errorf("call %+v, want a custom call whose Input is its argument", c)
	}
	history := append(user("Fix it."), llm.Message{Role: "assistant", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "apply_patch", Custom: true, Input: "*** Begin Patch\n*** End Patch"}}},
		llm.Message{Role: "tool", ToolCallID: "call_1", Content: "Done."})
	prompt, _, err = m.ChatPrompt(llm.ChatRequest{Messages: history, Tools: []llm.Tool{patch}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prompt, "<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>") {
		t.Errorf("the call in the history renders as:\n%s", prompt)
	}
}
