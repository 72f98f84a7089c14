package diag

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Long-context check settings.
const (
	// LongContextID is the id of the long-context retrieval check.
	LongContextID = "heldout-near-8k-retrieval"
	// longContextCap caps the default target length, as in the seed.
	longContextCap = 8192
	// longContextMargin is kept free below the server's max_model_len for
	// the answer and for small differences in how the prompt is counted.
	longContextMargin = 256
	// longContextMaxTokens bounds the answer.
	longContextMaxTokens = 16
	// maxCountProbes bounds the token-count requests of the filler search.
	maxCountProbes = 40
)

// fillerSentences are cycled to pad the long-context prompt. They contain no
// digits, so the buried code is the only number in the text.
var fillerSentences = [...]string{
	"The morning train left the station a few minutes late, as it often did in winter.",
	"A gardener trimmed the hedges along the quiet street while the neighbours slept.",
	"In the library, the reading room smelled faintly of old paper and floor polish.",
	"The river widened below the bridge, where herons waited patiently in the shallows.",
	"Someone had left a bicycle leaning against the bakery window all afternoon.",
	"The committee discussed the colour of the new benches for most of the meeting.",
	"Clouds drifted slowly over the hills, throwing long shadows across the fields.",
	"At the market, a vendor arranged apples and pears into neat, shining pyramids.",
	"The old clock in the hallway chimed the quarter hour with a tired, gentle sound.",
	"A cat watched the pigeons from the windowsill without any intention of moving.",
	"The harbour lights came on one by one as the fishing boats returned at dusk.",
	"Students crossed the courtyard carrying books, coffee and unfinished arguments.",
}

// longContextTarget returns the prompt length to aim for: override when
// positive, else the server's max_model_len minus a margin, capped at
// longContextCap (the cap alone when the server does not say).
func longContextTarget(maxModelLen, override int) int {
	if override > 0 {
		return override
	}
	if maxModelLen <= 0 {
		return longContextCap - longContextMargin
	}
	return min(maxModelLen-longContextMargin, longContextCap)
}

// haystack is the long-context prompt: filler with one fact buried in it.
type haystack struct {
	code  string  // the 4-digit code to retrieve
	depth float64 // where the fact sits, as a fraction of the filler
}

func newHaystack(rng *rand.Rand) haystack {
	return haystack{
		code:  strconv.Itoa(1000 + rng.IntN(9000)),
		depth: 0.1 + 0.8*rng.Float64(),
	}
}

// prompt returns the user message with n filler sentences.
func (h haystack) prompt(n int) string {
	var b strings.Builder
	b.WriteString("Read the following notes carefully. One of them contains a secret access code.\n\n")
	at := int(h.depth*float64(n) + 0.5)
	for i := 0; i <= n; i++ {
		if i == at {
			b.WriteString("Important: the secret access code is " + h.code + ". Remember it. ")
		}
		if i < n {
			b.WriteString(fillerSentences[i%len(fillerSentences)])
			b.WriteByte(' ')
		}
	}
	b.WriteString("\n\nWhat is the secret access code mentioned in the notes above? Answer with the four-digit code only.")
	return b.String()
}

// tokenCounter counts the server-side prompt tokens of a chat prompt,
// through POST /tokenize when the server has it, else by probing
// usage.prompt_tokens with a max_tokens=1 completion.
type tokenCounter struct {
	c       *client
	model   string
	probing bool // /tokenize is missing; probe completions instead
	calls   int
}

func (t *tokenCounter) count(ctx context.Context, prompt string) (int, error) {
	if t.calls >= maxCountProbes {
		return 0, fmt.Errorf("long context: gave up after %d token-count requests", t.calls)
	}
	t.calls++
	msgs := []message{{Role: "user", Content: prompt}}
	if !t.probing {
		n, err := t.c.tokenize(ctx, t.model, msgs)
		var he *HTTPError
		if errors.As(err, &he) && (he.StatusCode == http.StatusNotFound || he.StatusCode == http.StatusMethodNotAllowed) {
			t.probing = true
		} else if err != nil {
			return 0, fmt.Errorf("long context: count tokens: %w", err)
		} else {
			return n, nil
		}
	}
	res, err := t.c.chat(ctx, chatRequest{
		Model: t.model, Messages: msgs, MaxTokens: 1, ChatTemplateKwargs: noThinking(),
	})
	if err != nil {
		return 0, fmt.Errorf("long context: count tokens by probing: %w", err)
	}
	if res.parsed.Usage == nil || res.parsed.Usage.PromptTokens <= 0 {
		return 0, errors.New("long context: count tokens by probing: response has no usage.prompt_tokens")
	}
	return res.parsed.Usage.PromptTokens, nil
}

// fitFiller returns the largest number of filler sentences whose prompt
// counts at most target tokens, and that count. It measures the cost of the
// fixed text and of a block of filler, estimates the answer, then brackets
// and bisects it.
func fitFiller(ctx context.Context, h haystack, target int, count func(context.Context, string) (int, error)) (n, tokens int, err error) {
	counts := map[int]int{}
	at := func(n int) (int, error) {
		if c, ok := counts[n]; ok {
			return c, nil
		}
		c, err := count(ctx, h.prompt(n))
		if err != nil {
			return 0, err
		}
		counts[n] = c
		return c, nil
	}
	base, err := at(0)
	if err != nil {
		return 0, 0, err
	}
	if base > target {
		return 0, 0, fmt.Errorf("long context: target of %d tokens is below the %d tokens of the bare question", target, base)
	}
	const block = 64
	cb, err := at(block)
	if err != nil {
		return 0, 0, err
	}
	if cb <= base {
		return 0, 0, fmt.Errorf("long context: filler does not add tokens (%d with none, %d with %d sentences)", base, cb, block)
	}
	est := int(float64(target-base) * block / float64(cb-base))
	step := max(2, est/64)
	// Bracket: lo fits, hi does not.
	lo, hi := 0, -1
	if c, err := at(est); err != nil {
		return 0, 0, err
	} else if c <= target {
		lo = est
		for hi < 0 {
			c, err := at(lo + step)
			if err != nil {
				return 0, 0, err
			}
			if c > target {
				hi = lo + step
			} else {
				lo += step
				step *= 2
			}
		}
	} else {
		hi = est
		for {
			next := max(0, hi-step)
			c, err := at(next)
			if err != nil {
				return 0, 0, err
			}
			if c <= target {
				lo = next
				break
			}
			hi = next
			step *= 2
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		c, err := at(mid)
		if err != nil {
			return 0, 0, err
		}
		if c <= target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, counts[lo], nil
}

// runLongContext prepares the haystack prompt just under target tokens and
// asks for the code.
func runLongContext(ctx context.Context, c *client, model string, target int, rng *rand.Rand) (LongContextResult, error) {
	res := LongContextResult{ID: LongContextID, Response: nullJSON()}
	h := newHaystack(rng)
	counter := &tokenCounter{c: c, model: model}
	start := time.Now()
	n, tokens, err := fitFiller(ctx, h, target, counter.count)
	if err != nil {
		res.Seconds = time.Since(start).Seconds()
		return res, err
	}
	res.PreparedPromptTokens = tokens
	out, err := c.chat(ctx, chatRequest{
		Model:              model,
		Messages:           []message{{Role: "user", Content: h.prompt(n)}},
		MaxTokens:          longContextMaxTokens,
		Temperature:        0,
		ChatTemplateKwargs: noThinking(),
	})
	res.Seconds = out.seconds
	if out.raw != nil {
		res.Response = out.raw
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w", LongContextID, err)
	}
	res.Pass = strings.Contains(out.parsed.content(), h.code)
	return res, nil
}
