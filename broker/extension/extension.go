// Package extension defines Strata's own requests: operations no Kafka
// API covers (restoring a cluster from its bucket), carried in the Kafka
// protocol so that there is still one protocol, one listener and one
// connection model. Each is an API key above every key Kafka uses
// (32000 on), advertised in ApiVersions like any other, and framed as a
// non-flexible Kafka request: the usual header, then a body of one
// length-prefixed JSON document (Kafka's BYTES). Request and response
// implement kmsg.Request and kmsg.Response, so any franz-go client sends
// them with kgo.Client.Request, given ClientVersions as kgo.MaxVersions
// (kgo refuses keys its versions do not list).
//
// JSON keeps the bodies readable and lets them grow: unknown fields are
// ignored, and a field added later is absent, not misread, on an older
// peer. Version 0 is the only version of each key so far.
package extension

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// RestoreKey is the API key of StrataRestore.
const RestoreKey int16 = 32000

// MaxBodyBytes bounds a body's JSON: a plan of 100,000 partitions is some
// 15 MB.
const MaxBodyBytes = 64 << 20

// names are the extension keys' names, for logs and metrics.
var names = map[int16]string{RestoreKey: "StrataRestore"}

// NameForKey names an extension key, or returns "" for any other key.
func NameForKey(key int16) string { return names[key] }

// RequestForKey returns an empty request of an extension key, or nil for
// any other key.
func RequestForKey(key int16) kmsg.Request {
	switch key {
	case RestoreKey:
		return new(RestoreRequest)
	}
	return nil
}

// ClientVersions are the versions a client that sends extension requests
// gives kgo.MaxVersions: Kafka's stable versions and the extension keys.
func ClientVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(RestoreKey, 0)
	return v
}

var errBody = errors.New("extension: malformed body")

// appendBody appends v's JSON as Kafka BYTES.
func appendBody(dst []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are marshalled
		// here, which cannot fail; should one, the peer reads an empty
		// body rather than the process crashing.
		j = []byte("{}")
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(j)))
	return append(dst, j...)
}

// readBody decodes src, exactly one BYTES field, into v.
func readBody(src []byte, v any) error {
	if len(src) < 4 {
		return fmt.Errorf("%w: %d bytes", errBody, len(src))
	}
	n := int32(binary.BigEndian.Uint32(src))
	if n < 0 || n > MaxBodyBytes || int(n) != len(src)-4 {
		return fmt.Errorf("%w: a body of %d bytes in %d", errBody, n, len(src)-4)
	}
	if err := json.Unmarshal(src[4:], v); err != nil {
		return fmt.Errorf("%w: %v", errBody, err)
	}
	return nil
}
