package archive

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// Every string, whatever bytes needing an escape it holds and wherever
// (the encoder skips eight bytes at a time), decodes back to itself.
func TestJSONStringEscapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "z", " ", "~", "\x7f", "\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "é", "€", "😀", "<", "/"}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(40) {
			if rng.IntN(4) == 0 {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			} else {
				b.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		s := b.String()
		for _, enc := range [][]byte{appendJSONString(nil, s), appendJSONString(nil, []byte(s))} {
			var got string
			if err := json.Unmarshal(enc, &got); err != nil || got != s {
				t.Fatalf("%q encodes to %s, which decodes to %q (%v)", s, enc, got, err)
			}
		}
	}
}

// needsEscape agrees with a byte by byte check.
func TestNeedsEscape(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []byte{0, 0x1f, 0x20, 0x21, '"', '\\', 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a'}
	for range 100000 {
		var w uint64
		want := false
		for k := range 8 {
			c := byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				c = special[rng.IntN(len(special))]
			}
			want = want || c < 0x20 || c == '"' || c == '\\'
			w |= uint64(c) << (8 * k)
		}
		if got := needsEscape(w); got != want {
			t.Fatalf("needsEscape(%#016x) = %v, want %v", w, got, want)
		}
	}
}
