package model

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/govinfer/govinfer/compute"
)

// Open loads the checkpoint at path: a directory of config.json and
// safetensors weights, or a qwen35 GGUF file (a .gguf file, any part of a
// split one, or a directory holding one and no config.json). It is
// OpenContext without a context.
func Open(path string, o Options) (*Model, error) {
	return OpenContext(context.Background(), path, o)
}

// OpenContext is Open, with two things a start needs:
//
//   - it stops when ctx is done before the weights are loaded: between
//     weights, and within a weight being packed every few MiB. The error
//     wraps ctx's, and what was loaded is released.
//   - on a backend that packs weights into layouts of its own
//     (compute.Packer: the CPU backend's tile layout of bf16 matrices,
//     its interleaved blocks of quantized ones), the packed weights of a
//     checkpoint of a GiB or more are kept in a file beside it, or under
//     the user cache directory where its folder is read-only, which the
//     next start maps instead of packing again: that start reads the
//     weights at the speed of the file, as one that keeps the stored
//     layout does. PackCacheEnv moves the files, or turns them off. A load
//     that quantizes (Options.Quantize) packs in memory, as before.
//
// Options.Progress is also called every second that one weight takes to
// pack (the lm_head of the 9B, 2 GB, is one), with the counts of the
// weights before it, so that a printer of progress can show a start that
// takes a while is alive.
func OpenContext(ctx context.Context, path string, o Options) (*Model, error) {
	l := &loader{ctx: ctx, progress: o.Progress}
	if o.Progress != nil {
		o.Progress = l.report
	}
	o.load = l
	m, err := open(path, o)
	if err != nil {
		l.close()
		return nil, err
	}
	if l.cache != nil {
		l.cache.finish()
		m.file = closers{m.file, l}
	}
	return m, nil
}

// loader is the state of one OpenContext: its context, and the cache of
// the weights its backend packs.
type loader struct {
	ctx   context.Context
	cache *packCache

	mu       sync.Mutex
	progress func(Progress) // Options.Progress, or nil
	last     Progress       // the last weight loaded's
}

// report is Options.Progress as loadWeights calls it; the first report
// after the cache file is started says where it goes.
func (l *loader) report(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = p
	if c := l.cache; c != nil && c.note != "" {
		p.Note = strings.TrimPrefix(p.Note+"; "+c.note, "; ")
		c.note = ""
	}
	l.progress(p)
}

// heartbeatEvery is how often heartbeat calls Options.Progress.
var heartbeatEvery = time.Second

// heartbeat calls Options.Progress, with the counts of the last weight
// loaded and the name of the one being packed, every heartbeatEvery until
// the function it returns is called.
func (l *loader) heartbeat(name string) (stop func()) {
	if l.progress == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(heartbeatEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				l.mu.Lock()
				if p := l.last; p.TotalTensors > 0 { // (before the first weight, the counts are unknown)
					p.Name, p.DType, p.Note = name, "", ""
					l.progress(p)
				}
				l.mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// backend returns the backend loadWeights hands src's weights to: be,
// seen through l when there is a loader (l is nil under New and NewGGUF).
func (l *loader) backend(be compute.Backend, src source, mix string) compute.Backend {
	if l == nil {
		return be
	}
	if _, ok := be.(compute.Packer); ok && mix == "" && l.cache == nil {
		l.cache = newPackCache(src)
	}
	return &loadingBackend{Backend: be, l: l}
}

// close releases the cache's maps: the weights read from them must no
// longer be used.
func (l *loader) close() error {
	if l.cache == nil {
		return nil
	}
	return l.cache.close()
}

// Close implements io.Closer for Model.Close.
func (l *loader) Close() error { return l.close() }

// loadingBackend is a backend as loadWeights sees it: it stops with the
// load's context, and packs weights itself where the backend would
// (compute.Packer), into the cache file or from it.
type loadingBackend struct {
	compute.Backend
	l *loader
}

// LoadWeight implements compute.Backend.
func (b *loadingBackend) LoadWeight(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	ctx := b.l.ctx
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, ok := b.Backend.(compute.Packer)
	if !ok {
		return b.Backend.LoadWeight(name, dt, rows, cols, data)
	}
	layout, size := p.Packing(dt, rows, cols)
	if layout == "" {
		return b.Backend.LoadWeight(name, dt, rows, cols, data)
	}
	if c := b.l.cache; c != nil {
		e := newPackEntry(name, dt, rows, cols, layout, size, data)
		// The parts of one tensor (a MoE layer's experts) load under its
		// name, in order.
		e.Part = c.parts[name]
		c.parts[name]++
		if packed, ok := c.get(e); ok {
			return p.LoadPacked(name, dt, rows, cols, packed)
		}
		if packed, err := c.alloc(e); err == nil {
			return b.pack(p, name, dt, rows, cols, data, packed)
		}
	}
	return b.pack(p, name, dt, rows, cols, data, make([]byte, size))
}

// pack packs data into packed and loads the weight from it.
func (b *loadingBackend) pack(p compute.Packer, name string, dt compute.DType, rows, cols int, data, packed []byte) (compute.Weight, error) {
	stop := b.l.heartbeat(name)
	err := p.Pack(b.l.ctx, packed, dt, rows, cols, data)
	stop()
	if err != nil {
		return nil, err
	}
	return p.LoadPacked(name, dt, rows, cols, packed)
}

// LoadTable implements compute.TableLoader: the backend's, or its
// LoadWeight where it has none (as loadWeights would call).
func (b *loadingBackend) LoadTable(name string, dt compute.DType, rows, cols int, data []byte) (compute.Weight, error) {
	if err := b.l.ctx.Err(); err != nil {
		return nil, err
	}
	if tl, ok := b.Backend.(compute.TableLoader); ok {
		return tl.LoadTable(name, dt, rows, cols, data)
	}
	return b.Backend.LoadWeight(name, dt, rows, cols, data)
}

// closers closes each of its closers that is not nil.
type closers []io.Closer

func (cs closers) Close() error {
	var err error
	for _, c := range cs {
		if c != nil {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}
