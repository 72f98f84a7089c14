//go:build cgo

package vulkan

import (
	"fmt"

	vk "github.com/vulkan-go/vulkan"

	"github.com/govinfer/govinfer/shaders"
)

// pipeKey names a compute pipeline: a shader and its specialisation
// constants 0..3 (constant 0 is the workgroup size where a shader takes it).
type pipeKey struct {
	name string
	spec [4]uint32
}

// pipelines builds compute pipelines on first use and keeps them.
type pipelines struct {
	modules map[string]vk.ShaderModule
	binds   map[string]shaders.Bindings // each module's storage buffers
	pipes   map[pipeKey]vk.Pipeline
}

func (p *pipelines) init(*Backend) error {
	p.modules = map[string]vk.ShaderModule{}
	p.binds = map[string]shaders.Bindings{}
	p.pipes = map[pipeKey]vk.Pipeline{}
	return nil
}

func (p *pipelines) module(b *Backend, name string) (vk.ShaderModule, error) {
	if m, ok := p.modules[name]; ok {
		return m, nil
	}
	code, err := shaders.Code(name)
	if err != nil {
		return vk.NullShaderModule, fmt.Errorf("vulkan: %w", err)
	}
	if len(code) == 0 {
		return vk.NullShaderModule, fmt.Errorf("vulkan: shader %s is empty", name)
	}
	binds, err := shaders.Reflect(code)
	if err != nil {
		return vk.NullShaderModule, fmt.Errorf("vulkan: shader %s: %w", name, err)
	}
	m, res := b.fast.createModule(b, code)
	if err := vkErr("vkCreateShaderModule "+name, res); err != nil {
		return vk.NullShaderModule, err
	}
	p.modules[name] = m
	p.binds[name] = binds
	return m, nil
}

// get returns the pipeline for a shader with the given specialisation
// constants (missing ones are zero), and the shader's storage buffers.
func (p *pipelines) get(b *Backend, name string, spec []uint32) (vk.Pipeline, shaders.Bindings, error) {
	var key pipeKey
	key.name = name
	copy(key.spec[:], spec)
	if pl, ok := p.pipes[key]; ok {
		return pl, p.binds[name], nil
	}
	m, err := p.module(b, name)
	if err != nil {
		return vk.NullPipeline, shaders.Bindings{}, err
	}
	// A copy goes to C, so that key (looked up on every dispatch) stays
	// on the stack.
	spec2 := key.spec
	pl, res := b.fast.createPipeline(b, m, spec2[:])
	if err := vkErr(fmt.Sprintf("vkCreateComputePipelines %s %v", name, key.spec), res); err != nil {
		return vk.NullPipeline, shaders.Bindings{}, err
	}
	p.pipes[key] = pl
	return pl, p.binds[name], nil
}

func (p *pipelines) destroy(b *Backend) {
	for _, pl := range p.pipes {
		vk.DestroyPipeline(b.dev, pl, nil)
	}
	for _, m := range p.modules {
		vk.DestroyShaderModule(b.dev, m, nil)
	}
	p.pipes, p.modules = nil, nil
}
