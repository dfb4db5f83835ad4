package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"strata/tier/objstore"
)

// A read replica reads another cluster's bucket and must never change it:
// every write through ReadOnly fails, every read passes.
func TestReadOnlyRefusesWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rw, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Put(ctx, "a/b", bytes.NewReader([]byte("hello")), 5); err != nil {
		t.Fatal(err)
	}
	ro, err := objstore.OpenDirReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Put(ctx, "a/c", bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrReadOnly) {
		t.Errorf("Put: %v, want ErrReadOnly", err)
	}
	if err := ro.Create(ctx, "a/c", bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrReadOnly) {
		t.Errorf("Create: %v, want ErrReadOnly", err)
	}
	if err := ro.Delete(ctx, "a/b"); !errors.Is(err, objstore.ErrReadOnly) {
		t.Errorf("Delete: %v, want ErrReadOnly", err)
	}
	rc, err := ro.GetRange(ctx, "a/b", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("read %q", b)
	}
	var keys []string
	if err := ro.List(ctx, "a/", func(a objstore.Attrs) error { keys = append(keys, a.Key); return nil }); err != nil || len(keys) != 1 {
		t.Errorf("List: %v %v", keys, err)
	}
	if _, err := objstore.OpenDirReadOnly(filepath.Join(dir, "missing")); err == nil {
		t.Error("OpenDirReadOnly of a missing directory worked")
	}
}

func TestParseURI(t *testing.T) {
	for _, c := range []struct {
		uri     string
		dir     string
		bucket  string
		prefix  string
		endp    string
		wantErr bool
	}{
		{uri: "file:///var/bucket", dir: "/var/bucket"},
		{uri: "dir:///var/bucket/", dir: "/var/bucket"},
		{uri: "s3://events", bucket: "events"},
		{uri: "s3://events/prod/a?endpoint=http://127.0.0.1:9000&path_style=true", bucket: "events", prefix: "prod/a", endp: "http://127.0.0.1:9000"},
		{uri: "file://relative/dir", wantErr: true},
		{uri: "file:relative", wantErr: true},
		{uri: "/var/bucket", wantErr: true},
		{uri: "gs://b", wantErr: true},
		{uri: "s3://", wantErr: true},
		{uri: "s3://b?endpoint=ftp://x", wantErr: true},
		{uri: "s3://b?color=red", wantErr: true},
	} {
		loc, err := objstore.ParseURI(c.uri)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: err %v, want error %t", c.uri, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if loc.Dir != c.dir {
			t.Errorf("%s: dir %q, want %q", c.uri, loc.Dir, c.dir)
		}
		if c.bucket != "" && (loc.S3 == nil || loc.S3.Bucket != c.bucket || loc.S3.Prefix != c.prefix || loc.S3.Endpoint != c.endp) {
			t.Errorf("%s: %+v", c.uri, loc.S3)
		}
	}
}
