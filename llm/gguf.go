package llm

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/govinfer/govinfer/gguf"
)

// ggufSampling maps GGUF's general.sampling.* keys (llama.cpp's converter
// writes them from generation_config.json) to the defaults they set.
var ggufSampling = []struct {
	key string
	set func(d *Defaults, v float64)
}{
	{"general.sampling.temp", func(d *Defaults, v float64) { d.Temperature = &v }},
	{"general.sampling.top_k", func(d *Defaults, v float64) { k := int(v); d.TopK = &k }},
	{"general.sampling.top_p", func(d *Defaults, v float64) { d.TopP = &v }},
	{"general.sampling.min_p", func(d *Defaults, v float64) { d.MinP = &v }},
	{"general.sampling.penalty_repeat", func(d *Defaults, v float64) { d.RepetitionPenalty = &v }},
}

// ggufDefaults reads the sampling defaults of the GGUF model at path; ok
// is false when path is not a GGUF model.
func ggufDefaults(path string) (d Defaults, ok bool, err error) {
	file, ok, err := gguf.Locate(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !ok {
		return d, false, nil
	}
	if err != nil {
		return d, false, err
	}
	f, err := gguf.Open(file)
	if err != nil {
		return d, false, err
	}
	defer f.Close()
	md := f.Metadata()
	for _, s := range ggufSampling {
		if !md.Has(s.key) {
			continue
		}
		v, err := md.Float(s.key)
		if err != nil {
			return d, false, fmt.Errorf("sampling defaults: %w", err)
		}
		s.set(&d, v)
	}
	return d, true, nil
}
