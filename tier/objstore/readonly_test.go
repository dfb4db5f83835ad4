package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"strata/tier/objstore"
)

// A read-only store reads what is there and refuses every write without
// passing it on: the object is unchanged and nothing new appears.
func TestReadOnlyRefusesWrites(t *testing.T) {
	ctx := context.Background()
	dir, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Put(ctx, "a/b", bytes.NewReader([]byte("kept")), 4); err != nil {
		t.Fatal(err)
	}
	ro := objstore.ReadOnly(dir)
	for name, write := range map[string]func() error{
		"put":    func() error { return ro.Put(ctx, "a/b", bytes.NewReader([]byte("gone")), 4) },
		"create": func() error { return ro.Create(ctx, "a/c", bytes.NewReader([]byte("new")), 3) },
		"delete": func() error { return ro.Delete(ctx, "a/b") },
	} {
		if err := write(); !errors.Is(err, objstore.ErrReadOnly) {
			t.Errorf("%s: %v, want ErrReadOnly", name, err)
		}
	}
	rc, err := ro.GetRange(ctx, "a/b", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "kept" {
		t.Fatalf("object reads %q after refused writes, want %q", got, "kept")
	}
	var keys []string
	if err := objstore.ListAfter(ctx, ro, "a/", "", func(a objstore.Attrs) error { keys = append(keys, a.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "a/b" {
		t.Fatalf("listing %v, want [a/b]", keys)
	}
}
