package outparse_test

import (
	"fmt"

	"github.com/govinfer/govinfer/outparse"
)

func ExampleParser() {
	p := outparse.NewParser(outparse.Options{
		Thinking: true,
		Tools:    map[string]outparse.ToolSchema{"get_weather": {"days": {"integer"}}},
		NewID:    func() string { return "call_0" },
	})
	chunks := []string{"The user wants", " Oslo.\n</thi", "nk>\n\n<tool_call>\n<function=get_weather>\n",
		"<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"}
	for _, c := range chunks {
		for _, e := range p.Push(c) {
			switch e.Kind {
			case outparse.Reasoning, outparse.Content:
				fmt.Printf("%s %q\n", e.Kind, e.Text)
			case outparse.ToolCall:
				fmt.Println(e.Kind, e.Call.ID, e.Call.Function.Name, e.Call.Function.Arguments)
			}
		}
	}
	p.Finish()
	// Output:
	// reasoning "The user wants"
	// reasoning " Oslo."
	// tool_call call_0 get_weather {"city": "Oslo", "days": 3}
}
