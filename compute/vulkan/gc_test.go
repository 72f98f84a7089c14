//go:build cgo

package vulkan

import (
	"context"
	"os"
	"runtime"
	"testing"

	vk "github.com/vulkan-go/vulkan"
)

// collectAlways keeps the garbage collector running until the test ends,
// so that any finalizer that frees memory a Vulkan call still uses runs
// during that call.
func collectAlways(t *testing.T) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var sink [][]byte
		for {
			select {
			case <-stop:
				return
			default:
			}
			sink = append(sink, make([]byte, 1<<10))
			if len(sink) == 256 {
				sink = nil
				runtime.GC()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

// TestCallsUnderGC makes the Vulkan calls that take structs or arrays while
// the collector runs without pause. vulkan-go frees its C copies of such
// arguments from finalizers that can run during the call: layer names
// freed under vkEnumerateInstanceLayerProperties corrupted the C heap
// within a few iterations here ("free(): invalid next size", then
// SIGABRT). This package makes those calls in C (instance.c, fast.c).
func TestCallsUnderGC(t *testing.T) {
	gipa, err := loaderOnce()
	if err != nil {
		if os.Getenv("GOVINFER_REQUIRE_VULKAN") == "1" {
			t.Fatalf("GOVINFER_REQUIRE_VULKAN=1 but no Vulkan loader: %v", err)
		}
		t.Skip(err)
	}
	validation := layerInstalled()
	collectAlways(t)
	for i := range 40 {
		if layerAvailable(gipa, "VK_LAYER_GOVINFER_no_such_layer") {
			t.Fatal("layerAvailable reports a layer that does not exist")
		}
		inst, err := createInstance(gipa, validation && i%2 == 0)
		if err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		vk.DestroyInstance(inst, nil)
	}

	ctx := context.Background()
	const n = 4096
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	got := make([]float32, n)
	for i := range 3 {
		b := newTestBackend(t, Options{})
		// The upload ring and the readback buffer are made on first use
		// and kept: make them before counting.
		w, err := b.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(w, 0, src); err != nil {
			t.Fatal(err)
		}
		if err := b.Download(ctx, got, w, 0); err != nil {
			t.Fatal(err)
		}
		b.Free(w)
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		free := b.FreeMemory()
		x, err := b.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Upload(x, 0, src); err != nil {
			t.Fatal(err)
		}
		// Many small submissions: each begins, copies and submits.
		for range 50 {
			b.Copy(y, 0, x, 0, n)
			b.Add(y, x, n)
			if err := b.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Download(ctx, got, y, 0); err != nil {
			t.Fatal(err)
		}
		for j, v := range got {
			if v != 2*src[j] {
				t.Fatalf("backend %d: y[%d] = %v, want %v", i, j, v, 2*src[j])
			}
		}
		// Buffers count against the heap while they live, and not after.
		if f := b.FreeMemory(); f >= free {
			t.Errorf("backend %d: %d bytes free with two buffers, %d before", i, f, free)
		}
		b.Free(x)
		b.Free(y)
		if err := b.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if f := b.FreeMemory(); f != free {
			t.Errorf("backend %d: %d bytes free after freeing the buffers, %d before", i, f, free)
		}
		b.Close()
	}
}
