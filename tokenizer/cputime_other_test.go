//go:build !unix

package tokenizer

import (
	"testing"
	"time"
)

// processCPU is not available here; benchmarks then report 0 CPU time.
func processCPU(testing.TB) time.Duration { return 0 }
