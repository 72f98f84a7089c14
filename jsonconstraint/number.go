package jsonconstraint

import (
	"math/big"
	"strings"
)

// boundDigits is the most digits, integer and fraction together, of a
// number whose schema bounds it (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum). Such numbers are written without an exponent, so
// every prefix has an exact decimal value and the automaton can tell
// whether some continuation of it lands in range.
const boundDigits = 18

// numRule holds a schema's numeric bounds; nil bounds are open.
type numRule struct {
	lo, hi     *big.Rat
	loEx, hiEx bool
}

// contains reports whether v is within the bounds.
func (r *numRule) contains(v *big.Rat) bool {
	if r.lo != nil {
		if c := v.Cmp(r.lo); c < 0 || c == 0 && r.loEx {
			return false
		}
	}
	if r.hi != nil {
		if c := v.Cmp(r.hi); c > 0 || c == 0 && r.hiEx {
			return false
		}
	}
	return true
}

// numPrefix is a bounded number read so far: its sign, its digits as one
// integer (mant), how many of them are integer and fraction digits, and
// the number lexer's sub-state (numMinus when only a sign was read,
// numStart when nothing was).
type numPrefix struct {
	sub        uint8
	neg        bool
	mant       uint64
	idig, fdig int
}

// numStart is the sub-state of a number not started yet (for the
// smallest value of a schema).
const numStart uint8 = 255

// value returns the prefix's exact value.
func (p numPrefix) value() *big.Rat {
	v := new(big.Rat).SetFrac(new(big.Int).SetUint64(p.mant), pow10(p.fdig))
	if p.neg {
		v.Neg(v)
	}
	return v
}

// ends reports whether the number may end after p: it is complete and in
// range.
func (r *numRule) ends(p numPrefix) bool {
	switch p.sub {
	case numZero, numInt, numFrac:
		return r.contains(p.value())
	}
	return false
}

// absRange is the range of absolute values that a sign allows.
type absRange struct {
	a, b       *big.Rat // nil: open
	aEx, bEx   bool
	impossible bool
}

func (r *numRule) absRange(neg bool) absRange {
	if !neg {
		return absRange{a: r.lo, b: r.hi, aEx: r.loEx, bEx: r.hiEx}
	}
	var out absRange
	if r.hi != nil {
		out.a, out.aEx = new(big.Rat).Neg(r.hi), r.hiEx
	}
	if r.lo != nil {
		out.b, out.bEx = new(big.Rat).Neg(r.lo), r.loEx
	}
	return out
}

// grid is an arithmetic progression of values x0 + m*step, m in [0, count).
type grid struct {
	x0, step *big.Rat
	count    *big.Int
	// build writes the digits that reach the value of index m (for
	// completions; nil in feasibility grids).
	build func(m *big.Int) string
}

var bigOne = big.NewInt(1)

// pow10s caches the powers of ten the number logic uses.
var pow10s = func() []*big.Int {
	p := make([]*big.Int, 2*boundDigits+4)
	p[0] = big.NewInt(1)
	for i := 1; i < len(p); i++ {
		p[i] = new(big.Int).Mul(p[i-1], big.NewInt(10))
	}
	return p
}()

// pow10 returns 10^n; callers must not modify it.
func pow10(n int) *big.Int { return pow10s[n] }

func ratInt(x *big.Int) *big.Rat { return new(big.Rat).SetInt(x) }

// invPow10 returns 10^-n.
func invPow10(n int) *big.Rat { return new(big.Rat).SetFrac(bigOne, pow10(n)) }

// floorRat returns the largest integer at most q.
func floorRat(q *big.Rat) *big.Int {
	return new(big.Int).Div(q.Num(), q.Denom()) // Euclidean: floor for a positive divisor
}

// hit returns the least index m of g whose value lies in r, if any.
func (r absRange) hit(g grid) (*big.Int, bool) {
	if r.impossible {
		return nil, false
	}
	lo := new(big.Int)
	if r.a != nil {
		q := new(big.Rat).Sub(r.a, g.x0)
		q.Quo(q, g.step)
		c := new(big.Int).Neg(floorRat(new(big.Rat).Neg(q))) // ceil
		if r.aEx && q.IsInt() {
			c.Add(c, bigOne)
		}
		if c.Sign() > 0 {
			lo = c
		}
	}
	hi := new(big.Int).Sub(g.count, bigOne)
	if r.b != nil {
		q := new(big.Rat).Sub(r.b, g.x0)
		q.Quo(q, g.step)
		f := floorRat(q)
		if r.bEx && q.IsInt() {
			f.Sub(f, bigOne)
		}
		if f.Cmp(hi) < 0 {
			hi = f
		}
	}
	if lo.Cmp(hi) > 0 {
		return nil, false
	}
	return lo, true
}

// reachable returns grids that together hold every value some
// continuation of p can end with.
func reachable(p numPrefix, intOnly bool) []grid {
	const t = boundDigits
	zero := func() grid {
		if intOnly {
			return grid{x0: new(big.Rat), step: new(big.Rat).SetInt64(1), count: big.NewInt(1)}
		}
		return grid{x0: new(big.Rat), step: invPow10(t - 1), count: pow10(t - 1)}
	}
	var gs []grid
	switch p.sub {
	case numStart, numMinus:
		gs = append(gs, zero())
		for i := 1; i <= t; i++ {
			nine := new(big.Int).Mul(big.NewInt(9), pow10(i-1))
			if intOnly {
				gs = append(gs, grid{x0: ratInt(pow10(i - 1)), step: new(big.Rat).SetInt64(1), count: nine})
			} else {
				gs = append(gs, grid{x0: ratInt(pow10(i - 1)), step: invPow10(t - i), count: nine.Mul(nine, pow10(t-i))})
			}
		}
	case numZero:
		gs = append(gs, zero())
	case numInt:
		d := new(big.Int).SetUint64(p.mant)
		for j := 0; j <= t-p.idig; j++ {
			x0 := ratInt(new(big.Int).Mul(d, pow10(j)))
			if intOnly {
				gs = append(gs, grid{x0: x0, step: new(big.Rat).SetInt64(1), count: pow10(j)})
			} else {
				gs = append(gs, grid{x0: x0, step: invPow10(t - p.idig - j), count: pow10(t - p.idig)})
			}
		}
	case numDot:
		if r := t - p.idig; r >= 1 {
			gs = append(gs, grid{x0: ratInt(new(big.Int).SetUint64(p.mant)), step: invPow10(r), count: pow10(r)})
		}
	case numFrac:
		x0 := new(big.Rat).SetFrac(new(big.Int).SetUint64(p.mant), pow10(p.fdig))
		gs = append(gs, grid{x0: x0, step: invPow10(t - p.idig), count: pow10(t - p.idig - p.fdig)})
	}
	return gs
}

// feasible reports whether some continuation of p is a number in range.
func (r *numRule) feasible(p numPrefix, intOnly bool) bool {
	if p.sub == numStart {
		return r.feasible(numPrefix{sub: numMinus}, intOnly) || r.feasible(numPrefix{sub: numMinus, neg: true}, intOnly)
	}
	ar := r.absRange(p.neg)
	for _, g := range reachable(p, intOnly) {
		if _, ok := ar.hit(g); ok {
			return true
		}
	}
	return false
}

// pad writes m with exactly n digits.
func pad(m *big.Int, n int) string {
	if n == 0 {
		return ""
	}
	s := m.String()
	return strings.Repeat("0", n-len(s)) + s
}

// exact returns the grids of continuations of p that append exactly l
// bytes, each with the digits that reach its values.
func exact(p numPrefix, intOnly bool, l int) []grid {
	const t = boundDigits
	var gs []grid
	fracs := func(f int) bool { return f == 0 || !intOnly }
	switch p.sub {
	case numStart, numMinus:
		if l == 1 {
			gs = append(gs, grid{x0: new(big.Rat), step: new(big.Rat).SetInt64(1), count: big.NewInt(1), build: func(*big.Int) string { return "0" }})
		}
		if f := l - 2; f >= 1 && 1+f <= t && !intOnly {
			gs = append(gs, grid{x0: new(big.Rat), step: invPow10(f), count: pow10(f), build: func(m *big.Int) string { return "0." + pad(m, f) }})
		}
		for i := 1; i <= t && i <= l; i++ {
			f := 0
			if l > i {
				f = l - i - 1
				if f < 1 {
					continue
				}
			}
			if i+f > t || !fracs(f) {
				continue
			}
			count := new(big.Int).Mul(big.NewInt(9), pow10(i-1))
			count.Mul(count, pow10(f))
			gs = append(gs, grid{x0: ratInt(pow10(i - 1)), step: invPow10(f), count: count, build: func(m *big.Int) string {
				q, rem := new(big.Int).QuoRem(m, pow10(f), new(big.Int))
				s := q.Add(q, pow10(i-1)).String()
				if f > 0 {
					s += "." + pad(rem, f)
				}
				return s
			}})
		}
	case numZero:
		if l == 0 {
			gs = append(gs, grid{x0: new(big.Rat), step: new(big.Rat).SetInt64(1), count: big.NewInt(1), build: func(*big.Int) string { return "" }})
		}
		if f := l - 1; f >= 1 && 1+f <= t && !intOnly {
			gs = append(gs, grid{x0: new(big.Rat), step: invPow10(f), count: pow10(f), build: func(m *big.Int) string { return "." + pad(m, f) }})
		}
	case numInt:
		d := new(big.Int).SetUint64(p.mant)
		for j := 0; j <= l; j++ {
			f := 0
			if l > j {
				f = l - j - 1
				if f < 1 {
					continue
				}
			}
			if p.idig+j+f > t || !fracs(f) {
				continue
			}
			x0 := ratInt(new(big.Int).Mul(d, pow10(j)))
			gs = append(gs, grid{x0: x0, step: invPow10(f), count: new(big.Int).Mul(pow10(j), pow10(f)), build: func(m *big.Int) string {
				q, rem := new(big.Int).QuoRem(m, pow10(f), new(big.Int))
				s := pad(q, j)
				if f > 0 {
					s += "." + pad(rem, f)
				}
				return s
			}})
		}
	case numDot:
		if f := l; f >= 1 && p.idig+f <= t {
			gs = append(gs, grid{x0: ratInt(new(big.Int).SetUint64(p.mant)), step: invPow10(f), count: pow10(f), build: func(m *big.Int) string { return pad(m, f) }})
		}
	case numFrac:
		if f := l; p.idig+p.fdig+f <= t {
			x0 := new(big.Rat).SetFrac(new(big.Int).SetUint64(p.mant), pow10(p.fdig))
			gs = append(gs, grid{x0: x0, step: invPow10(p.fdig + f), count: pow10(f), build: func(m *big.Int) string { return pad(m, f) }})
		}
	}
	return gs
}

// complete returns the shortest bytes that make p a number in range (the
// least such value among the shortest), or false if none does.
func (r *numRule) complete(p numPrefix, intOnly bool) (string, bool) {
	for l := 0; l <= 2*boundDigits+2; l++ {
		if p.sub == numStart {
			if s, ok := r.completeLen(numPrefix{sub: numMinus}, intOnly, l); ok {
				return s, true
			}
			if s, ok := r.completeLen(numPrefix{sub: numMinus, neg: true}, intOnly, l-1); ok {
				return "-" + s, true
			}
			continue
		}
		if s, ok := r.completeLen(p, intOnly, l); ok {
			return s, true
		}
	}
	return "", false
}

func (r *numRule) completeLen(p numPrefix, intOnly bool, l int) (string, bool) {
	if l < 0 {
		return "", false
	}
	ar := r.absRange(p.neg)
	for _, g := range exact(p, intOnly, l) {
		if m, ok := ar.hit(g); ok {
			return g.build(m), true
		}
	}
	return "", false
}
