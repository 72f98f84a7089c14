//go:build cgo

package vulkan

import (
	"fmt"
	"sort"
	"time"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"
)

// profileCap is the number of timestamps one submission records; work
// past it in the same submission is counted as "unprofiled".
const profileCap = 8192

// profiler times every operation of a submission with device timestamps:
// one at the start of the command buffer and one after each operation's
// barrier, so consecutive differences are the operations' times (the
// barriers serialise them).
type profiler struct {
	pool   vk.QueryPool
	period float64  // nanoseconds per timestamp tick
	mask   uint64   // valid timestamp bits
	names  []string // the operation that ended at timestamp i+1
	over   int      // operations past profileCap in this submission
	totals map[string]*ProfileEntry
}

// init creates the query pool, or returns an error where the queue cannot
// write timestamps.
func (p *profiler) init(b *Backend, validBits uint32) error {
	if validBits == 0 || b.props.Limits.TimestampPeriod <= 0 {
		return fmt.Errorf("vulkan: profiling needs timestamps, which the compute queue of %s does not write", vk.ToString(b.props.DeviceName[:]))
	}
	info := vk.QueryPoolCreateInfo{SType: vk.StructureTypeQueryPoolCreateInfo, QueryType: vk.QueryTypeTimestamp, QueryCount: profileCap}
	var pool vk.QueryPool
	if err := vkErr("vkCreateQueryPool", vk.CreateQueryPool(b.dev, &info, nil, &pool)); err != nil {
		return err
	}
	p.pool = pool
	p.period = float64(b.props.Limits.TimestampPeriod)
	p.mask = ^uint64(0)
	if validBits < 64 {
		p.mask = 1<<validBits - 1
	}
	p.totals = map[string]*ProfileEntry{}
	return nil
}

// begin resets the queries and writes the first timestamp into a command
// buffer being begun.
func (p *profiler) begin(cmd vk.CommandBuffer) {
	vk.CmdResetQueryPool(cmd, p.pool, 0, profileCap)
	vk.CmdWriteTimestamp(cmd, vk.PipelineStageBottomOfPipeBit, p.pool, 0)
	p.names = p.names[:0]
	p.over = 0
}

// mark writes the timestamp that ends operation name.
func (p *profiler) mark(cmd vk.CommandBuffer, name string) {
	if len(p.names)+1 >= profileCap {
		p.over++
		return
	}
	p.names = append(p.names, name)
	vk.CmdWriteTimestamp(cmd, vk.PipelineStageBottomOfPipeBit, p.pool, uint32(len(p.names)))
}

// collect reads the timestamps of a completed submission into the totals.
func (p *profiler) collect(dev vk.Device) error {
	n := len(p.names) + 1
	if n < 2 {
		return nil
	}
	ts := make([]uint64, n)
	r := vk.GetQueryPoolResults(dev, p.pool, 0, uint32(n), uint(8*n), unsafe.Pointer(&ts[0]), 8,
		vk.QueryResultFlags(vk.QueryResult64Bit|vk.QueryResultWaitBit))
	if err := vkErr("vkGetQueryPoolResults", r); err != nil {
		return err
	}
	for i, name := range p.names {
		e := p.totals[name]
		if e == nil {
			e = &ProfileEntry{Op: name}
			p.totals[name] = e
		}
		e.Count++
		e.Time += time.Duration(float64((ts[i+1]-ts[i])&p.mask) * p.period)
	}
	if p.over > 0 {
		e := p.totals["unprofiled"]
		if e == nil {
			e = &ProfileEntry{Op: "unprofiled"}
			p.totals["unprofiled"] = e
		}
		e.Count += p.over
	}
	p.names = p.names[:0]
	return nil
}

func (p *profiler) destroy(b *Backend) {
	if p.pool != vk.NullQueryPool {
		vk.DestroyQueryPool(b.dev, p.pool, nil)
		p.pool = vk.NullQueryPool
	}
}

// Profile returns the device time of each kind of operation since the
// backend opened or ResetProfile, largest first, or nil unless
// Options.Profile is set. Work still recorded or in flight is not counted
// until Sync, Download or Argmax returns.
func (b *Backend) Profile() []ProfileEntry {
	if b.prof == nil {
		return nil
	}
	out := make([]ProfileEntry, 0, len(b.prof.totals))
	for _, e := range b.prof.totals {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Time != out[j].Time {
			return out[i].Time > out[j].Time
		}
		return out[i].Op < out[j].Op
	})
	return out
}

// ResetProfile clears the totals Profile returns.
func (b *Backend) ResetProfile() {
	if b.prof != nil {
		clear(b.prof.totals)
	}
}

// Stats returns the counts of dispatches, barriers and submissions
// recorded since the backend opened.
func (b *Backend) Stats() Stats {
	return Stats{Dispatches: b.rec.dispatches, Barriers: b.rec.barriers, Submissions: b.rec.submissions}
}
