package segment

import (
	"errors"
	"testing"
	"time"
)

func TestCompactedLogRefusesRecordsWithoutKeys(t *testing.T) {
	for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLz4, codecZstd} {
		for _, tc := range []struct {
			name         string
			keysRequired bool
			key          string
			wantErr      bool
		}{
			{"keyed record, keys required", true, "k", false},
			{"null key, keys required", true, "", true},
			{"null key, keys not required", false, "", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l := mustOpen(t, t.TempDir(), Config{KeysRequired: tc.keysRequired})
				defer l.Close()
				b := encodeBatch(t, batchSpec{codec: codec, firstTs: time.Now().UnixMilli(), values: values(3, 20, 1), keyPrefix: tc.key})
				_, err := l.Append(b, 0)
				if tc.wantErr {
					if !errors.Is(err, ErrInvalidRecord) {
						t.Fatalf("codec %d: %v, want ErrInvalidRecord", codec, err)
					}
					if l.EndOffset() != 0 {
						t.Fatalf("codec %d: refused batch moved the log end to %d", codec, l.EndOffset())
					}
					return
				}
				if err != nil {
					t.Fatalf("codec %d: %v", codec, err)
				}
			})
		}
	}
}
