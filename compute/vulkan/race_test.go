//go:build race

package vulkan

// raceEnabled reports a -race build, where the runtime allocates for its
// own bookkeeping and allocation counts mean nothing.
const raceEnabled = true
