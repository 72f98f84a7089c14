//go:build !amd64 || noasm

package machine

// Without assembly (another architecture, or the noasm tag) the probes are
// the scalar Go loops: their figures are what Go code reaches, not the
// machine's vector peak, and their names say so.

func readProbes() []readProbe    { return []readProbe{goReadProbe} }
func fmaProbes() []computeProbe  { return []computeProbe{goFMAProbe} }
func bf16Probes() []computeProbe { return nil }
func int8Probes() []computeProbe { return nil }

func amxProbes() []computeProbe { return nil }
