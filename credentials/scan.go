package credentials

// needle is one string the scanner looks for: a binding's sentinel or its
// real secret.
type needle struct {
	text   string
	b      int // index into Set.bindings
	secret bool
}

// scanner finds every needle in a string in one pass. A bitmap of the
// needles' first two bytes filters positions, so a header with no sentinel
// costs about one table test per byte whatever the number of credentials
// (strings.Index per needle would cost one pass per needle).
type scanner struct {
	bits    [1 << 16 / 64]uint64
	heads   map[uint16][]int32 // first two bytes → needle indexes
	needles []needle
	minLen  int
}

func newScanner(bs []*Binding) scanner {
	sc := scanner{heads: map[uint16][]int32{}}
	for i, b := range bs {
		for _, n := range [2]needle{{text: b.Sentinel, b: i}, {text: b.secret, b: i, secret: true}} {
			// Load guarantees at least minRandom letters and digits, so
			// every needle has two bytes.
			k := uint16(n.text[0])<<8 | uint16(n.text[1])
			sc.bits[k>>6] |= 1 << (k & 63)
			sc.heads[k] = append(sc.heads[k], int32(len(sc.needles)))
			sc.needles = append(sc.needles, n)
			if sc.minLen == 0 || len(n.text) < sc.minLen {
				sc.minLen = len(n.text)
			}
		}
	}
	return sc
}

// find calls yield with each occurrence of a needle in s and its offset,
// in order of position, until yield returns false. It is generic so that a
// peeked body is scanned without copying it into a string.
func find[T string | []byte](sc *scanner, s T, yield func(n *needle, at int) bool) {
	if len(sc.needles) == 0 || len(s) < sc.minLen {
		return
	}
	last := len(s) - sc.minLen
	for i := 0; i <= last; i++ {
		k := uint16(s[i])<<8 | uint16(s[i+1])
		if sc.bits[k>>6]&(1<<(k&63)) == 0 {
			continue
		}
		for _, j := range sc.heads[k] {
			n := &sc.needles[j]
			if len(s)-i >= len(n.text) && string(s[i:i+len(n.text)]) == n.text && !yield(n, i) {
				return
			}
		}
	}
}
