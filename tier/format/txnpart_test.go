package format

import (
	"bytes"
	"errors"
	"hash/crc32"
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

// `tier verify` (VerifyObject) checks the txn index part's entries, not
// only its CRC: a part a buggy writer sealed with a good CRC but a marker
// outside the object is corrupt.
func TestVerifyObjectChecksTxnEntries(t *testing.T) {
	p, _ := testParts()
	p.TxnIndex = nil
	obj, f, _ := writeObject(t, p)
	bad := txnIndex([4]int64{7, 150, 250, 251}) // marker past [100, 199]
	f.TxnIndex.Len, f.TxnIndex.CRC = int64(len(bad)), crc32.Checksum(bad, castagnoli)
	var buf bytes.Buffer
	buf.Write(obj[:f.TxnIndex.Offset])
	buf.Write(bad)
	buf.Write(appendFooter(nil, f))
	seg := f.Segment("k", crc32.Checksum(buf.Bytes(), castagnoli))
	if err := seg.VerifyObject(bytes.NewReader(buf.Bytes())); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a txn index entry outside the object verified: %v", err)
	}
}
