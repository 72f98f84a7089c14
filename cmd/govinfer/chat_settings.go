package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/sample"
)

// chatOptions are what a chat session asks of the model and how it shows
// the answers; flags set them, /set and /think change them.
type chatOptions struct {
	params llm.Params
	// system is the system message ("" for none).
	system string
	// think turns the model's reasoning on or off; nil keeps the chat
	// template's default.
	think *bool
	// hideThinking keeps the reasoning off the terminal; showThinking
	// sends it to standard error in one-shot mode.
	hideThinking, showThinking bool
	// verbose prints prompt and answer speed after each answer.
	verbose bool
}

// chatSetting is one value /set changes and a flag sets.
type chatSetting struct {
	name, help string
	// set parses v into o; "default" restores the checkpoint's value.
	set func(o *chatOptions, v string) error
	// show returns the value in effect; d are the checkpoint's defaults.
	show func(o *chatOptions, d llm.Defaults) string
}

// chatSettings lists the settings in the order /set shows them.
func chatSettings() []chatSetting {
	return []chatSetting{
		floatSetting("temperature", "sampling temperature, 0 is greedy (default: the checkpoint's generation_config.json, else 1)",
			func(p *llm.Params) **float64 { return &p.Temperature }, func(d llm.Defaults) *float64 { return d.Temperature }, 1,
			func(v float64) error { return sample.Params{Temperature: v}.Validate() }),
		floatSetting("top_p", "keep the most likely tokens whose probabilities sum to P (default: the checkpoint's, else 1)",
			func(p *llm.Params) **float64 { return &p.TopP }, func(d llm.Defaults) *float64 { return d.TopP }, 1,
			func(v float64) error { return sample.Params{TopP: v}.Validate() }),
		{
			name: "top_k", help: "keep the K most likely tokens, -1 for all (default: the checkpoint's, else all)",
			set: func(o *chatOptions, v string) error {
				if v == "default" {
					o.params.TopK = nil
					return nil
				}
				k, err := strconv.Atoi(v)
				if err != nil || k < -1 || k == 0 {
					return fmt.Errorf("top_k must be -1 (all tokens) or a positive integer, got %q", v)
				}
				o.params.TopK = &k
				return nil
			},
			show: func(o *chatOptions, d llm.Defaults) string {
				switch {
				case o.params.TopK != nil:
					return strconv.Itoa(*o.params.TopK)
				case d.TopK != nil:
					return strconv.Itoa(*d.TopK) + " (checkpoint default)"
				}
				return "-1 (all tokens)"
			},
		},
		floatSetting("min_p", "drop tokens less likely than P times the most likely one (default: the checkpoint's, else 0)",
			func(p *llm.Params) **float64 { return &p.MinP }, func(d llm.Defaults) *float64 { return d.MinP }, 0,
			func(v float64) error { return sample.Params{MinP: v}.Validate() }),
		floatSetting("repetition_penalty", "divide the logits of tokens already seen, 1 is off (default: the checkpoint's, else 1)",
			func(p *llm.Params) **float64 { return &p.RepetitionPenalty }, func(d llm.Defaults) *float64 { return d.RepetitionPenalty }, 1,
			func(v float64) error {
				if v == 0 {
					return errors.New("repetition_penalty must be a finite number > 0, got 0")
				}
				return sample.Params{RepetitionPenalty: v}.Validate()
			}),
		penaltySetting("presence_penalty", "subtract from the logits of tokens the answer has used, in [-2, 2] (default 0)",
			func(p *llm.Params) *float64 { return &p.PresencePenalty }),
		penaltySetting("frequency_penalty", "subtract from a token's logit once per use in the answer, in [-2, 2] (default 0)",
			func(p *llm.Params) *float64 { return &p.FrequencyPenalty }),
		{
			name: "seed", help: "random seed: the same seed, settings and conversation give the same answer (default: a new one per answer)",
			set: func(o *chatOptions, v string) error {
				if v == "default" {
					o.params.Seed = nil
					return nil
				}
				s, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return fmt.Errorf("seed must be a non-negative integer, got %q", v)
				}
				o.params.Seed = &s
				return nil
			},
			show: func(o *chatOptions, _ llm.Defaults) string {
				if o.params.Seed == nil {
					return "random"
				}
				return strconv.FormatUint(*o.params.Seed, 10)
			},
		},
		{
			name: "max_tokens", help: "most tokens of an answer, reasoning included (default 0: up to the context's end)",
			set: func(o *chatOptions, v string) error {
				if v == "default" {
					v = "0"
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return fmt.Errorf("max_tokens must be a non-negative integer, got %q", v)
				}
				o.params.MaxTokens = n
				return nil
			},
			show: func(o *chatOptions, _ llm.Defaults) string {
				if o.params.MaxTokens == 0 {
					return "0 (up to the context's end)"
				}
				return strconv.Itoa(o.params.MaxTokens)
			},
		},
		{
			name: "system", help: "the system message (default: none); /set takes the rest of the line",
			set: func(o *chatOptions, v string) error {
				if v == "default" {
					v = ""
				}
				o.system = v
				return nil
			},
			show: func(o *chatOptions, _ llm.Defaults) string {
				if o.system == "" {
					return "(none)"
				}
				return strconv.Quote(o.system)
			},
		},
		{
			name: "verbose", help: "print prompt and answer tokens per second after each answer: on or off",
			set: func(o *chatOptions, v string) error {
				b, err := parseOnOff(v)
				if err != nil {
					return fmt.Errorf("verbose: %w", err)
				}
				o.verbose = b
				return nil
			},
			show: func(o *chatOptions, _ llm.Defaults) string { return onOff(o.verbose) },
		},
	}
}

// floatSetting is a sampling parameter that overrides a checkpoint default
// (builtin where the checkpoint has none); check validates a value.
func floatSetting(name, help string, field func(*llm.Params) **float64, def func(llm.Defaults) *float64, builtin float64,
	check func(float64) error) chatSetting {
	return chatSetting{
		name: name, help: help,
		set: func(o *chatOptions, v string) error {
			if v == "default" {
				*field(&o.params) = nil
				return nil
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%s must be a number, got %q", name, v)
			}
			if err := check(f); err != nil {
				return err
			}
			*field(&o.params) = &f
			return nil
		},
		show: func(o *chatOptions, d llm.Defaults) string {
			if p := *field(&o.params); p != nil {
				return strconv.FormatFloat(*p, 'g', -1, 64)
			}
			if p := def(d); p != nil {
				return strconv.FormatFloat(*p, 'g', -1, 64) + " (checkpoint default)"
			}
			return strconv.FormatFloat(builtin, 'g', -1, 64)
		},
	}
}

// penaltySetting is presence_penalty or frequency_penalty: in [-2, 2], 0 by
// default.
func penaltySetting(name, help string, field func(*llm.Params) *float64) chatSetting {
	return chatSetting{
		name: name, help: help,
		set: func(o *chatOptions, v string) error {
			if v == "default" {
				v = "0"
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%s must be a number, got %q", name, v)
			}
			if err := (sample.Params{PresencePenalty: f}).Validate(); err != nil {
				return fmt.Errorf("%s must be in [-2, 2], got %v", name, v)
			}
			*field(&o.params) = f
			return nil
		},
		show: func(o *chatOptions, _ llm.Defaults) string {
			return strconv.FormatFloat(*field(&o.params), 'g', -1, 64)
		},
	}
}

// lookupSetting finds a setting by name; dashes count as underscores.
func lookupSetting(name string) (chatSetting, bool) {
	name = strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, s := range chatSettings() {
		if s.name == name {
			return s, true
		}
	}
	return chatSetting{}, false
}

// settingNames lists the settings' names.
func settingNames() string {
	var names []string
	for _, s := range chatSettings() {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

// parseOnOff reads on/off (and true/false, yes/no, 1/0).
func parseOnOff(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "on", "true", "yes", "1":
		return true, nil
	case "off", "false", "no", "0":
		return false, nil
	}
	return false, errors.New("want on or off, got " + strconv.Quote(v))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
