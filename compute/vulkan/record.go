//go:build cgo

package vulkan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	vk "github.com/vulkan-go/vulkan"
)

// numBindings is the number of storage buffer bindings every pipeline's
// descriptor set has; shaders use a prefix or subset of them.
const numBindings = 8

// pushBytes is the push constant range every pipeline declares.
const pushBytes = 128

// recorder owns the command buffers work is recorded into and the
// descriptor sets their dispatches use. A step is recorded into a frame's
// command buffer; after submitEvery dispatches that buffer is submitted and
// recording goes on in the next frame's, so the device starts on the first
// part of a step while the host records the rest. Flush submits what is
// left and waits for every frame.
type recorder struct {
	pool      vk.CommandPool
	frames    [numFrames]frame
	cur       *frame           // the frame being recorded (valid while recording)
	next      int              // the frame the next begin records into
	cmd       vk.CommandBuffer // cur's command buffer
	recording bool             // cmd is between begin and submit
	recorded  int              // dispatches in cmd

	setLayout  vk.DescriptorSetLayout
	pipeLayout vk.PipelineLayout

	dev    vk.Device
	fast   *fastPath
	prof   *profiler // nil unless Options.Profile
	onIdle func()    // recycles what completed work used

	// submitEvery is the number of dispatches after which a command buffer
	// is submitted while recording continues; 0 records each step whole
	// (profiling does, since its timestamps belong to one submission).
	submitEvery int

	// Arguments of the dispatch being recorded, kept here because they go
	// to C by pointer (locals would escape to the heap on every dispatch).
	handles, sizes [numBindings]uint64
	push           [pushBytes / 4]uint32

	// epoch counts the barriers recorded; a buffer's reads and writes hold
	// the byte ranges work since the latest barrier reads and writes, so an
	// operation that conflicts with that work (reads what it writes, or
	// writes what it reads or writes) gets a barrier first and independent
	// operations run without one between them.
	epoch       uint64
	barriers    int // recorded since the recorder was made (tests)
	dispatches  int // likewise
	submissions int // likewise
}

// frame is one command buffer with the fence of its submission and the
// descriptor pools its dispatches allocate from.
type frame struct {
	cmd       vk.CommandBuffer
	fence     vk.Fence
	inflight  bool // submitted and not yet waited for
	descPools []vk.DescriptorPool
	descPool  int // index of the pool being allocated from
}

// numFrames is the number of command buffers that can be in flight.
const numFrames = 3

// defaultSubmitEvery is how many dispatches a command buffer holds before
// it is submitted mid-step: a decode step of the 9B model records about
// 600, so the device starts after the first tenth.
const defaultSubmitEvery = 64

const setsPerPool = 1024

func (rc *recorder) init(b *Backend) error {
	rc.dev = b.dev
	rc.fast = &b.fast
	rc.submitEvery = defaultSubmitEvery
	rc.onIdle = func() {
		b.releasePending()
		if b.ring != nil {
			b.ring.off = 0
		}
	}
	var pool vk.CommandPool
	pinfo := vk.CommandPoolCreateInfo{
		SType:            vk.StructureTypeCommandPoolCreateInfo,
		Flags:            vk.CommandPoolCreateFlags(vk.CommandPoolCreateResetCommandBufferBit),
		QueueFamilyIndex: b.qfam,
	}
	if err := vkErr("vkCreateCommandPool", vk.CreateCommandPool(b.dev, &pinfo, nil, &pool)); err != nil {
		return err
	}
	rc.pool = pool
	cmds := make([]vk.CommandBuffer, numFrames)
	ainfo := vk.CommandBufferAllocateInfo{
		SType:              vk.StructureTypeCommandBufferAllocateInfo,
		CommandPool:        rc.pool,
		Level:              vk.CommandBufferLevelPrimary,
		CommandBufferCount: numFrames,
	}
	if err := vkErr("vkAllocateCommandBuffers", vk.AllocateCommandBuffers(b.dev, &ainfo, cmds)); err != nil {
		return err
	}
	for i := range rc.frames {
		f := &rc.frames[i]
		f.cmd = cmds[i]
		var fence vk.Fence
		if err := vkErr("vkCreateFence", vk.CreateFence(b.dev, &vk.FenceCreateInfo{SType: vk.StructureTypeFenceCreateInfo}, nil, &fence)); err != nil {
			return err
		}
		f.fence = fence
		if err := f.addPool(&b.fast, b.dev); err != nil {
			return err
		}
	}

	sl, pl, err := b.fast.createLayouts(b.dev, numBindings, pushBytes)
	if err != nil {
		return err
	}
	rc.setLayout = sl
	rc.pipeLayout = pl
	return nil
}

func (f *frame) addPool(fp *fastPath, dev vk.Device) error {
	p, err := fp.createPool(dev, setsPerPool, setsPerPool*numBindings)
	if err != nil {
		return err
	}
	f.descPools = append(f.descPools, p)
	return nil
}

// busy reports whether recorded or submitted work may still use resources.
func (rc *recorder) busy() bool {
	if rc.recording {
		return true
	}
	for i := range rc.frames {
		if rc.frames[i].inflight {
			return true
		}
	}
	return false
}

// begin starts recording if not already, into the next frame once its
// earlier submission has completed.
func (rc *recorder) begin(b *Backend) error {
	if rc.recording {
		return nil
	}
	f := &rc.frames[rc.next]
	if f.inflight {
		if err := rc.waitFrame(nil, f); err != nil {
			return err
		}
	}
	if err := rc.fast.begin(f.cmd); err != nil {
		return err
	}
	rc.cur, rc.cmd = f, f.cmd
	rc.next = (rc.next + 1) % numFrames
	rc.recording = true
	rc.recorded = 0
	if rc.prof != nil {
		rc.prof.begin(rc.cmd)
	}
	// Order this command buffer after everything submitted before it.
	rc.fullBarrier()
	return nil
}

// submit ends the command buffer being recorded and submits it, with a
// final barrier that makes its writes visible to the host when toHost.
func (rc *recorder) submit(b *Backend, toHost bool) error {
	if !rc.recording {
		return nil
	}
	if toHost {
		rc.fast.hostBarrier(rc.cmd)
	}
	rc.recording = false
	if err := vkErr("vkEndCommandBuffer", vk.EndCommandBuffer(rc.cmd)); err != nil {
		return err
	}
	if err := rc.fast.submit(b.queue, rc.cmd, rc.cur.fence); err != nil {
		return err
	}
	rc.cur.inflight = true
	rc.submissions++
	return nil
}

// fullBarrier makes every earlier shader and transfer write visible to
// every later shader and transfer access, and waits for earlier reads
// before later writes.
func (rc *recorder) fullBarrier() {
	rc.fast.barrier(rc.cmd)
	rc.epoch++
	rc.barriers++
}

// conflicts reports whether reading (or, with write, writing) the range s
// of r conflicts with work recorded since the latest barrier.
func (rc *recorder) conflicts(r *rawBuf, s span, write bool) bool {
	if s.hi == 0 {
		s = span{0, r.size}
	}
	return r.writes.overlaps(rc.epoch, s) || (write && r.reads.overlaps(rc.epoch, s))
}

// access notes that the next operation reads or writes the range s of r.
func (rc *recorder) access(r *rawBuf, s span, write bool) {
	if s.hi == 0 {
		s = span{0, r.size}
	}
	if write {
		r.writes.add(rc.epoch, s)
	} else {
		r.reads.add(rc.epoch, s)
	}
}

// transfer records the barrier a copy from the range ss of src to the
// range ds of dst (src nil for a fill) needs before it and notes its
// accesses.
func (rc *recorder) transfer(src *rawBuf, ss span, dst *rawBuf, ds span) {
	if (src != nil && rc.conflicts(src, ss, false)) || rc.conflicts(dst, ds, true) {
		rc.fullBarrier()
	}
	if src != nil {
		rc.access(src, ss, false)
	}
	rc.access(dst, ds, true)
}

// done ends an operation: with profiling, a barrier and the timestamp
// that closes it, so each operation's time is its own.
func (rc *recorder) done(name string) {
	if rc.prof != nil {
		rc.fullBarrier()
		rc.prof.mark(rc.cmd, name)
	}
}

// wait blocks until every submitted command buffer completes (or ctx
// ends, leaving work in flight), then recycles what that work used.
func (rc *recorder) wait(ctx context.Context) error {
	waited := false
	for k := 0; k < numFrames; k++ {
		// Oldest first: the frames after the next one to record.
		f := &rc.frames[(rc.next+k)%numFrames]
		if f.inflight {
			waited = true
			if err := rc.waitFrame(ctx, f); err != nil {
				return err
			}
		}
	}
	if waited && !rc.recording && rc.onIdle != nil {
		rc.onIdle()
	}
	return nil
}

// waitFrame blocks until f's submission completes, then resets its
// descriptor pools and collects its timestamps.
func (rc *recorder) waitFrame(ctx context.Context, f *frame) error {
	for {
		r := vk.WaitForFences(rc.dev, 1, []vk.Fence{f.fence}, vk.True, uint64(50*time.Millisecond))
		if r == vk.Success {
			break
		}
		if r != vk.Timeout {
			f.inflight = false
			return vkErr("vkWaitForFences", r)
		}
		if ctx != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	f.inflight = false
	if err := vkErr("vkResetFences", vk.ResetFences(rc.dev, 1, []vk.Fence{f.fence})); err != nil {
		return err
	}
	for _, p := range f.descPools {
		vk.ResetDescriptorPool(rc.dev, p, 0)
	}
	f.descPool = 0
	if rc.prof != nil {
		if err := rc.prof.collect(rc.dev); err != nil {
			return err
		}
	}
	return nil
}

func (rc *recorder) destroy(b *Backend) {
	for i := range rc.frames {
		f := &rc.frames[i]
		for _, p := range f.descPools {
			vk.DestroyDescriptorPool(b.dev, p, nil)
		}
		f.descPools = nil
		if f.fence != vk.NullFence {
			vk.DestroyFence(b.dev, f.fence, nil)
		}
	}
	if rc.pipeLayout != vk.NullPipelineLayout {
		vk.DestroyPipelineLayout(b.dev, rc.pipeLayout, nil)
	}
	if rc.setLayout != vk.NullDescriptorSetLayout {
		vk.DestroyDescriptorSetLayout(b.dev, rc.setLayout, nil)
	}
	if rc.pool != vk.NullCommandPool {
		vk.DestroyCommandPool(b.dev, rc.pool, nil)
	}
}

// flush submits the recorded work and waits for everything submitted.
func (b *Backend) flush(ctx context.Context) error {
	if err := b.rec.submit(b, true); err != nil {
		return err
	}
	return b.rec.wait(ctx)
}

// report returns and clears the first error raised since the last report,
// including validation messages.
func (b *Backend) report() error {
	err := b.err
	b.err = nil
	b.msgMu.Lock()
	msgs := b.msgs
	b.msgs = nil
	b.msgMu.Unlock()
	if len(msgs) > 0 {
		err = errors.Join(err, fmt.Errorf("vulkan: validation layer reported %d problem(s): %s", len(msgs), strings.Join(msgs, " | ")))
	}
	return err
}

// fail records the first error of a step; it surfaces at the next Sync,
// Download or Argmax.
func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// failf records a formatted error.
func (b *Backend) failf(format string, args ...any) {
	b.fail(fmt.Errorf("vulkan: "+format, args...))
}

// dispatch records one compute dispatch with the given buffers bound to
// bindings 0.. (nil leaves a binding on a dummy buffer), push constants and
// group counts, preceded by a barrier where it reads or writes a buffer
// that work since the latest barrier writes, or writes one that work reads
// (the shader's SPIR-V says which bindings it writes).
func (b *Backend) dispatch(name string, spec []uint32, bufs []*rawBuf, push []uint32, gx, gy, gz uint32) {
	b.dispatchSpans(name, spec, bufs, nil, push, gx, gy, gz)
}

// dispatchSpans is dispatch where the shader accesses only spans[i] of
// bufs[i] (a zero or missing span: all of it), so operations on disjoint
// ranges of one buffer (the rows of different sequences) need no barrier
// between them.
func (b *Backend) dispatchSpans(name string, spec []uint32, bufs []*rawBuf, spans []span, push []uint32, gx, gy, gz uint32) {
	if b.err != nil {
		return
	}
	if gx == 0 || gy == 0 || gz == 0 {
		return
	}
	lim := b.props.Limits.MaxComputeWorkGroupCount
	if gx > lim[0] || gy > lim[1] || gz > lim[2] {
		b.failf("%s: dispatch of %d×%d×%d groups exceeds the device limit %v", name, gx, gy, gz, lim)
		return
	}
	pipe, binds, err := b.pipes.get(b, name, spec)
	if err != nil {
		b.fail(err)
		return
	}
	if err := b.rec.begin(b); err != nil {
		b.fail(err)
		return
	}
	if len(push)*4 > pushBytes {
		b.failf("%s: %d bytes of push constants", name, len(push)*4)
		return
	}
	rc := &b.rec
	handles, sizes := &rc.handles, &rc.sizes
	// The buffers the shader accesses, with their ranges. The dummy stands
	// in for bindings a shader does not touch in this dispatch (attention's
	// partials without a split): never a hazard.
	var tracked [numBindings]*rawBuf
	var ranges [numBindings]span
	copy(ranges[:], spans)
	hazard := false
	for i := range handles {
		r := b.dummy
		if i < len(bufs) && bufs[i] != nil {
			r = bufs[i]
		}
		handles[i], sizes[i] = handle64(r.buf), r.size
		if binds.Used&(1<<i) != 0 && r != b.dummy {
			tracked[i] = r
			hazard = hazard || rc.conflicts(r, ranges[i], binds.Written&(1<<i) != 0)
		}
	}
	if hazard {
		rc.fullBarrier()
	}
	for i, r := range tracked {
		if r != nil {
			rc.access(r, ranges[i], binds.Written&(1<<i) != 0)
		}
	}
	f := rc.cur
	for {
		res := b.fast.dispatch(b, f.descPools[f.descPool], pipe, handles, sizes, rc.push[:copy(rc.push[:], push)], gx, gy, gz)
		if res == vk.Success {
			break
		}
		if res != vk.ErrorOutOfPoolMemory && res != vk.ErrorFragmentedPool {
			b.fail(vkErr("vkAllocateDescriptorSets", res))
			return
		}
		f.descPool++
		if f.descPool == len(f.descPools) {
			if err := f.addPool(&b.fast, b.dev); err != nil {
				b.fail(err)
				return
			}
		}
	}
	rc.dispatches++
	rc.recorded++
	rc.done(name)
	if rc.submitEvery > 0 && rc.prof == nil && rc.recorded >= rc.submitEvery {
		// Let the device start on this part while the rest is recorded.
		if err := rc.submit(b, false); err != nil {
			b.fail(err)
		}
	}
}

// grid spreads groups over x and y so neither exceeds 65535.
func grid(groups int) (uint32, uint32) {
	if groups <= 65535 {
		return uint32(groups), 1
	}
	return 65535, uint32((groups + 65534) / 65535)
}
