package asm

import (
	"testing"
)

// TestFeaturesAnd checks that intersecting feature sets keeps the
// implications between capabilities.
func TestFeaturesAnd(t *testing.T) {
	all := Features{AVX2: true, AVX512: true, AVX512BF16: true, AVX512VNNI: true, AMXBF16: true, AVXVNNI: true, NEON: true, DotProd: true}
	for _, c := range []struct {
		f, want Features
	}{
		{Features{AVXVNNI: true}, Features{}},
		{Features{AVX2: true, AVXVNNI: true}, Features{AVX2: true, AVXVNNI: true}},
		{Features{AVX512: true, AVXVNNI: true}, Features{}},
		{Features{AVX2: true, AVX512: true, AVX512VNNI: true, AVXVNNI: true}, Features{AVX2: true, AVX512: true, AVX512VNNI: true, AVXVNNI: true}},
		{Features{AVX2: true, AVX512VNNI: true}, Features{AVX2: true}},
		{Features{DotProd: true}, Features{}},
	} {
		if got := c.f.and(all); got != c.want {
			t.Errorf("%+v: %+v, want %+v", c.f, got, c.want)
		}
	}
}

// TestAVXVNNISet checks the kernel set forced to AVX2 and AVX-VNNI: where
// the CPU has AVX-VNNI its name says so and it packs every packed type;
// elsewhere it is the AVX2 set. The sets with AVX512_VNNI do not report
// AVX-VNNI, whose kernels they do not use.
func TestAVXVNNISet(t *testing.T) {
	k := New(Features{AVX2: true, AVXVNNI: true})
	d := DetectFeatures()
	switch {
	case d.AVX2 && d.AVXVNNI:
		if k.Name() != "avx2-avxvnni" || !k.Features().AVXVNNI {
			t.Errorf("forced AVX2+AVXVNNI: %s %+v", k.Name(), k.Features())
		}
		for _, qt := range packedTypes {
			if !k.PacksQ(qt) {
				t.Errorf("%s does not pack %v", k.Name(), qt)
			}
		}
	case d.AVX2:
		if k.Name() != "avx2" || k.Features().AVXVNNI {
			t.Errorf("forced AVX2+AVXVNNI without AVX-VNNI: %s %+v", k.Name(), k.Features())
		}
	}
	if v := New(Features{AVX2: true, AVX512: true, AVX512VNNI: true, AVXVNNI: true}); v.Features().AVX512VNNI && v.Features().AVXVNNI {
		t.Errorf("%s reports AVX-VNNI beside AVX512_VNNI", v.Name())
	}
	if testing.Verbose() {
		t.Logf("detected %+v: %s", d, k.Name())
	}
}
