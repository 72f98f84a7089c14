package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/govinfer/govinfer/randmodel"
	"github.com/govinfer/govinfer/safetensors"
)

// refModel is an independent float64 implementation of the Qwen3.5 text
// model, written as plainly as possible from the spec: whole prompt at once,
// recurrent delta rule, no caches. It checks the engine on checkpoints that
// have no goldens (other shapes, head ratios, schedules, seeds).
type refModel struct {
	c  *Config
	ck *safetensors.Checkpoint
	p  string // text prefix
}

func (r *refModel) w(t testing.TB, name string) []float64 {
	t.Helper()
	ten, err := r.ck.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ten.ToFloat32()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// linear returns x[T, in] · W[out, in]ᵀ.
func linear(x [][]float64, w []float64, out int) [][]float64 {
	y := make([][]float64, len(x))
	for t, row := range x {
		in := len(row)
		y[t] = make([]float64, out)
		for o := 0; o < out; o++ {
			var s float64
			for i, v := range row {
				s += w[o*in+i] * v
			}
			y[t][o] = s
		}
	}
	return y
}

func rmsnorm(x, w []float64, eps float64, onePlus bool) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		g := w[i]
		if onePlus {
			g += 1
		}
		y[i] = v * inv * g
	}
	return y
}

func sigm(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// forward returns the logits of every position of prompt.
func (r *refModel) forward(t testing.TB, prompt []int) [][]float64 {
	c, p := r.c, r.p
	h := c.HiddenSize
	emb := r.w(t, p+"embed_tokens.weight")
	x := make([][]float64, len(prompt))
	for i, id := range prompt {
		x[i] = append([]float64(nil), emb[id*h:(id+1)*h]...)
	}
	T := len(prompt)
	for l := 0; l < c.NumLayers; l++ {
		lp := fmt.Sprintf("%slayers.%d.", p, l)
		in := r.w(t, lp+"input_layernorm.weight")
		xn := make([][]float64, T)
		for i := range x {
			xn[i] = rmsnorm(x[i], in, c.RMSNormEps, true)
		}
		var mix [][]float64
		if c.LayerTypes[l] == LinearAttention {
			mix = r.deltaNet(t, lp, xn)
		} else {
			mix = r.attention(t, lp, xn)
		}
		for i := range x {
			for j := range x[i] {
				x[i][j] += mix[i][j]
			}
		}
		post := r.w(t, lp+"post_attention_layernorm.weight")
		for i := range x {
			xn[i] = rmsnorm(x[i], post, c.RMSNormEps, true)
		}
		gate := linear(xn, r.w(t, lp+"mlp.gate_proj.weight"), c.IntermediateSize)
		up := linear(xn, r.w(t, lp+"mlp.up_proj.weight"), c.IntermediateSize)
		for i := range gate {
			for j := range gate[i] {
				gate[i][j] = gate[i][j] * sigm(gate[i][j]) * up[i][j]
			}
		}
		down := linear(gate, r.w(t, lp+"mlp.down_proj.weight"), h)
		for i := range x {
			for j := range x[i] {
				x[i][j] += down[i][j]
			}
		}
	}
	norm := r.w(t, p+"norm.weight")
	for i := range x {
		x[i] = rmsnorm(x[i], norm, c.RMSNormEps, true)
	}
	head := emb
	if !c.TieWordEmbeddings {
		head = r.w(t, "lm_head.weight")
	}
	return linear(x, head, c.VocabSize)
}

func (r *refModel) deltaNet(t testing.TB, lp string, xn [][]float64) [][]float64 {
	c := r.c
	nk, nv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel
	conv := c.ConvDim()
	T := len(xn)
	qkv := linear(xn, r.w(t, lp+"linear_attn.in_proj_qkv.weight"), conv)
	z := linear(xn, r.w(t, lp+"linear_attn.in_proj_z.weight"), nv*dv)
	b := linear(xn, r.w(t, lp+"linear_attn.in_proj_b.weight"), nv)
	a := linear(xn, r.w(t, lp+"linear_attn.in_proj_a.weight"), nv)
	cw := r.w(t, lp+"linear_attn.conv1d.weight")
	aLog := r.w(t, lp+"linear_attn.A_log")
	dtBias := r.w(t, lp+"linear_attn.dt_bias")
	gnorm := r.w(t, lp+"linear_attn.norm.weight")
	// Causal depthwise conv + SiLU.
	act := make([][]float64, T)
	for i := 0; i < T; i++ {
		act[i] = make([]float64, conv)
		for ch := 0; ch < conv; ch++ {
			var s float64
			for j := 0; j < K; j++ {
				if src := i - (K - 1) + j; src >= 0 {
					s += cw[ch*K+j] * qkv[src][ch]
				}
			}
			act[i][ch] = s * sigm(s)
		}
	}
	l2 := func(v []float64) []float64 {
		var ss float64
		for _, e := range v {
			ss += e * e
		}
		inv := 1 / math.Sqrt(ss+1e-6)
		out := make([]float64, len(v))
		for i, e := range v {
			out[i] = e * inv
		}
		return out
	}
	out := make([][]float64, T)
	for i := range out {
		out[i] = make([]float64, nv*dv)
	}
	for hv := 0; hv < nv; hv++ {
		hk := hv / (nv / nk)
		S := make([]float64, dk*dv)
		for i := 0; i < T; i++ {
			q := l2(act[i][hk*dk : (hk+1)*dk])
			k := l2(act[i][nk*dk+hk*dk : nk*dk+(hk+1)*dk])
			v := act[i][2*nk*dk+hv*dv : 2*nk*dk+(hv+1)*dv]
			sp := a[i][hv] + dtBias[hv]
			if sp <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			decay := math.Exp(-math.Exp(aLog[hv]) * sp)
			beta := sigm(b[i][hv])
			for e := range S {
				S[e] *= decay
			}
			for j := 0; j < dv; j++ {
				var pred float64
				for r := 0; r < dk; r++ {
					pred += S[r*dv+j] * k[r]
				}
				u := beta * (v[j] - pred)
				for r := 0; r < dk; r++ {
					S[r*dv+j] += k[r] * u
				}
			}
			o := make([]float64, dv)
			for j := 0; j < dv; j++ {
				for r := 0; r < dk; r++ {
					o[j] += S[r*dv+j] * q[r] / math.Sqrt(float64(dk))
				}
			}
			o = rmsnorm(o, gnorm, c.RMSNormEps, false)
			for j := range o {
				zz := z[i][hv*dv+j]
				out[i][hv*dv+j] = o[j] * zz * sigm(zz)
			}
		}
	}
	return linear(out, r.w(t, lp+"linear_attn.out_proj.weight"), c.HiddenSize)
}

func (r *refModel) attention(t testing.TB, lp string, xn [][]float64) [][]float64 {
	c := r.c
	nh, nkv, hd := c.NumHeads, c.NumKVHeads, c.HeadDim
	T := len(xn)
	qg := linear(xn, r.w(t, lp+"self_attn.q_proj.weight"), 2*nh*hd)
	k := linear(xn, r.w(t, lp+"self_attn.k_proj.weight"), nkv*hd)
	v := linear(xn, r.w(t, lp+"self_attn.v_proj.weight"), nkv*hd)
	qn, kn := r.w(t, lp+"self_attn.q_norm.weight"), r.w(t, lp+"self_attn.k_norm.weight")
	rd := c.RotaryDim()
	rope := func(x []float64, pos int) {
		for i := 0; i < rd/2; i++ {
			ang := float64(pos) * math.Pow(c.RopeTheta, -float64(2*i)/float64(rd))
			a, b := x[i], x[i+rd/2]
			x[i] = a*math.Cos(ang) - b*math.Sin(ang)
			x[i+rd/2] = b*math.Cos(ang) + a*math.Sin(ang)
		}
	}
	qs := make([][][]float64, T)
	ks := make([][][]float64, T)
	for i := 0; i < T; i++ {
		qs[i] = make([][]float64, nh)
		for hh := 0; hh < nh; hh++ {
			qs[i][hh] = rmsnorm(qg[i][hh*2*hd:hh*2*hd+hd], qn, c.RMSNormEps, true)
			rope(qs[i][hh], i)
		}
		ks[i] = make([][]float64, nkv)
		for hh := 0; hh < nkv; hh++ {
			ks[i][hh] = rmsnorm(k[i][hh*hd:(hh+1)*hd], kn, c.RMSNormEps, true)
			rope(ks[i][hh], i)
		}
	}
	out := make([][]float64, T)
	for i := 0; i < T; i++ {
		out[i] = make([]float64, nh*hd)
		for hh := 0; hh < nh; hh++ {
			kv := hh / (nh / nkv)
			scores := make([]float64, i+1)
			maxS := math.Inf(-1)
			for s := 0; s <= i; s++ {
				for d := 0; d < hd; d++ {
					scores[s] += qs[i][hh][d] * ks[s][kv][d]
				}
				scores[s] /= math.Sqrt(float64(hd))
				maxS = math.Max(maxS, scores[s])
			}
			var sum float64
			for s := range scores {
				scores[s] = math.Exp(scores[s] - maxS)
				sum += scores[s]
			}
			for s := range scores {
				for d := 0; d < hd; d++ {
					out[i][hh*hd+d] += scores[s] / sum * v[s][kv*hd+d]
				}
			}
			for d := 0; d < hd; d++ {
				out[i][hh*hd+d] *= sigm(qg[i][hh*2*hd+hd+d])
			}
		}
	}
	return linear(out, r.w(t, lp+"self_attn.o_proj.weight"), c.HiddenSize)
}

// compareWithReference runs the engine (one block, and blocks of 5) and the
// float64 reference on a prompt and compares the logits of every position.
func compareWithReference(t *testing.T, dir string, prompt []int) {
	m, err := Open(dir, withCPU(t, Options{MaxStepTokens: 32}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	prefix, err := detectPrefix(ck)
	if err != nil {
		t.Fatal(err)
	}
	ref := (&refModel{c: m.Config(), ck: ck, p: prefix}).forward(t, prompt)
	var want []float32
	for _, row := range ref {
		for _, v := range row {
			want = append(want, float32(v))
		}
	}
	for _, block := range []int{0, 5} {
		seq, got := prefill(t, m, prompt, block, true)
		seq.Close()
		// The spec's logits tolerance, the same as for the goldens.
		checkClose(t, fmt.Sprintf("all logits, blocks of %d", block), got, want, 1e-4)
	}
}

// TestReferenceAgreesWithGolden validates the float64 reference itself on
// the tiny golden: it must agree with the golden to float64 accuracy.
func TestReferenceAgreesWithGolden(t *testing.T) {
	gm := loadGolden(t, "tiny", Options{})
	ck, err := safetensors.OpenCheckpoint(gm.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c := gm.g.Cases[2] // len17, with all_logits
	ref := (&refModel{c: gm.m.Config(), ck: ck, p: textPrefixes[0]}).forward(t, c.Prompt)
	var got []float32
	for _, row := range ref {
		for _, v := range row {
			got = append(got, float32(v))
		}
	}
	// float32 rounding of the stored values is the only difference.
	checkClose(t, "reference all_logits", got, gm.floats(t, c.AllLogits.Tensor), 1e-6)
}

// TestOtherCheckpoints generates checkpoints unlike the goldens' (other head
// ratios, dk != dv, other schedules, seeds, tied and untied) and checks the
// engine against the float64 reference on each.
func TestOtherCheckpoints(t *testing.T) {
	base, err := randmodel.LookupShape("tiny")
	if err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		edit func(s *randmodel.Shape)
	}{
		{"nv/nk=3 dk!=dv", func(s *randmodel.Shape) {
			s.LinearKeyHeads, s.LinearValueHeads, s.LinearKeyHeadDim, s.LinearValueHeadDim = 2, 6, 24, 8
		}},
		{"nv=nk untied", func(s *randmodel.Shape) {
			s.LinearKeyHeads, s.LinearValueHeads, s.Tied, s.Layers = 3, 3, false, 5
		}},
		{"attention first, gqa 4", func(s *randmodel.Shape) {
			s.Schedule = []string{FullAttention, LinearAttention, FullAttention}
			s.Layers, s.Heads, s.KVHeads, s.HeadDim = 3, 8, 2, 16
		}},
	}
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			s := base
			v.edit(&s)
			dir := filepath.Join(t.TempDir(), "ck")
			if err := randmodel.Write(dir, s, randmodel.Options{Seed: uint64(100 + i)}); err != nil {
				t.Fatal(err)
			}
			prompt := make([]int, 23)
			for j := range prompt {
				prompt[j] = (j*37 + i*11) % s.Vocab
			}
			compareWithReference(t, dir, prompt)
		})
	}
}
