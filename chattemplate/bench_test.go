package chattemplate

import (
	"os"
	"testing"
)

// BenchmarkRenderChat renders the longest golden conversations with the
// Qwen3.5 template (decode of the request included).
func BenchmarkRenderChat(b *testing.B) {
	tmpl, cases := loadGolden(b)
	for _, name := range []string{"long_multi_turn", "agent_multi_step"} {
		for _, c := range cases {
			if c.Name != name {
				continue
			}
			b.Run(name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, err := renderCase(tmpl, c.Inputs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkParse parses the Qwen3.5 template.
func BenchmarkParse(b *testing.B) {
	src := mustRead(b, "../testdata/chat/chat_template.jinja")
	for i := 0; i < b.N; i++ {
		if _, err := Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

func mustRead(b *testing.B, path string) string {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}
