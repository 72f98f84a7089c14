package main

import (
	"fmt"
	"runtime"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
)

// backendOptions selects and configures a compute backend.
type backendOptions struct {
	name    string // "cpu" or "vulkan"
	threads int    // CPU worker goroutines; 0 = all cores
	device  int    // Vulkan device index; -1 = best
}

// backendNames lists the values --backend accepts.
const backendNames = "cpu"

// newBackend creates the backend named in o.
func newBackend(o backendOptions) (compute.Backend, error) {
	switch o.name {
	case "cpu", "":
		return cpu.New(cpu.Options{Threads: o.threads}), nil
	}
	return nil, fmt.Errorf("unknown backend %q (want one of: %s)", o.name, backendNames)
}

// runtimeThreads is the default number of CPU worker threads.
func runtimeThreads() int { return runtime.NumCPU() }
