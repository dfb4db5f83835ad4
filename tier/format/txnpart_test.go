package format

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// A manifest entry for a version 2 object carries its txn index part as
// "txnIndex" after "producerSnapshot"; one for a version 1 object has no
// such field, and both decode to what was encoded. The JSON is strict
// inside the part too.
func TestManifestTxnIndexField(t *testing.T) {
	m := testManifest(t)
	v2 := seg(301, 310, 5000, 2)
	v2.TxnIndex = OptionalPart{Part{150, 68, 9}, true}
	v2.Size = v2.ObjectSize()
	m, err := m.With(v2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"txnIndex"`); n != 1 ||
		!strings.Contains(string(b), `"producerSnapshot":{"offset":140,"length":10,"crc32c":4},"txnIndex":{"offset":150,"length":68,"crc32c":9}}`) {
		t.Fatalf("%d txnIndex fields in\n%s", n, b)
	}
	if v2.Size != 150+68+FooterSize || m.Segments[0].Size != 150+FooterSizeV1 {
		t.Fatalf("object sizes %d and %d", v2.Size, m.Segments[0].Size)
	}
	got, err := DecodeManifest(b)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded %+v, %v\nwant %+v", got, err, m)
	}
	for _, bad := range []string{
		`"txnIndex":{"offset":150,"length":68,"crc32c":9,"extra":1}`,
		`"txnIndex":null`,
		`"txnIndex":{"offset":151,"length":68,"crc32c":9}`,
		`"txnIndex":{"offset":150,"length":67,"crc32c":9}`,
	} {
		body := bytes.Replace(b[:len(b)-trailerSize], []byte(`"txnIndex":{"offset":150,"length":68,"crc32c":9}`), []byte(bad), 1)
		if _, err := DecodeManifest(withCRC(string(body))); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}
