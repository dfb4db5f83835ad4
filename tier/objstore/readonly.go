package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrReadOnly refuses a write to a store opened read-only: a read
// replica's view of another cluster's bucket, or the bucket `strata
// bucket` reads; neither may ever change it. It is final, never retryable.
var ErrReadOnly = errors.New("objstore: the store is read-only")

type readOnlyStore struct{ inner Store }

// ReadOnly returns s with every write (Put, Create, Delete) refused with
// ErrReadOnly before it reaches s; reads and listings pass through, so
// read-only credentials are all its user needs.
func ReadOnly(s Store) Store { return readOnlyStore{s} }

func (r readOnlyStore) String() string { return fmt.Sprintf("%v (read-only)", r.inner) }

func (r readOnlyStore) Put(_ context.Context, key string, _ io.ReaderAt, _ int64) error {
	return fmt.Errorf("put %q: %w", key, ErrReadOnly)
}

func (r readOnlyStore) Create(_ context.Context, key string, _ io.ReaderAt, _ int64) error {
	return fmt.Errorf("create %q: %w", key, ErrReadOnly)
}

func (r readOnlyStore) Delete(_ context.Context, key string) error {
	return fmt.Errorf("delete %q: %w", key, ErrReadOnly)
}

func (r readOnlyStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return r.inner.GetRange(ctx, key, off, n)
}

func (r readOnlyStore) Stat(ctx context.Context, key string) (Attrs, error) {
	return r.inner.Stat(ctx, key)
}

func (r readOnlyStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return r.inner.List(ctx, prefix, fn)
}

func (r readOnlyStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	return ListAfter(ctx, r.inner, prefix, startAfter, fn)
}

// OpenDirReadOnly opens the directory store at root read-only. Unlike
// NewDir it creates nothing and cleans nothing (another cluster's writer
// owns the directory and its staging files): a root that does not exist
// is an error.
func OpenDirReadOnly(root string) (Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: dir store %q: %w", root, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("objstore: no bucket directory %s", abs)
	case err != nil:
		return nil, fmt.Errorf("objstore: dir store: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("objstore: %s is not a directory", abs)
	}
	return ReadOnly(&dirStore{root: abs}), nil
}

// Location is where a store named by a URI is (ParseURI): a directory, or
// an S3 bucket with the settings the URI carries. Credentials never come
// from a URI.
type Location struct {
	// Dir is the directory of a directory store; empty for S3.
	Dir string
	// S3 holds the bucket, prefix and, when the URI gives them, the
	// endpoint, region and addressing style; the caller adds credentials
	// and fills what the URI left out from its own settings. Nil for a
	// directory.
	S3 *S3Config
	// Endpoint, Region and PathStyle say which of those the URI set.
	Endpoint, Region, PathStyle bool
}

// ParseURI parses a store URI:
//
//	file:///abs/dir  (or dir:///abs/dir): a directory store
//	s3://bucket[/prefix][?endpoint=URL&region=R&path_style=true|false]
//
// A relative directory is refused: the URI is stored with a topic and
// read by every node of a cluster, whose working directories differ.
func ParseURI(s string) (Location, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Location{}, fmt.Errorf("store URI %q: %v", s, err)
	}
	switch u.Scheme {
	case "file", "dir":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("store URI %q: want %s:///absolute/dir (three slashes)", s, u.Scheme)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return Location{}, fmt.Errorf("store URI %q: the directory must be absolute (%s:///path/to/bucket)", s, u.Scheme)
		}
		if u.RawQuery != "" {
			return Location{}, fmt.Errorf("store URI %q: a directory store takes no options", s)
		}
		return Location{Dir: filepath.Clean(u.Path)}, nil
	case "s3":
		if u.Host == "" {
			return Location{}, fmt.Errorf("store URI %q: no bucket (s3://bucket[/prefix])", s)
		}
		loc := Location{S3: &S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}}
		for k, vs := range u.Query() {
			v := vs[len(vs)-1]
			switch k {
			case "endpoint":
				loc.S3.Endpoint, loc.Endpoint = v, true
			case "region":
				loc.S3.Region, loc.Region = v, true
			case "path_style":
				b, err := strconv.ParseBool(v)
				if err != nil {
					return Location{}, fmt.Errorf("store URI %q: path_style=%q: want true or false", s, v)
				}
				loc.S3.PathStyle, loc.PathStyle = b, true
			default:
				return Location{}, fmt.Errorf("store URI %q: unknown option %q (endpoint, region, path_style)", s, k)
			}
		}
		if loc.Endpoint {
			if err := (S3Config{Bucket: "b", Endpoint: loc.S3.Endpoint}).validate(); err != nil {
				return Location{}, fmt.Errorf("store URI %q: %v", s, err)
			}
		}
		return loc, nil
	case "":
		return Location{}, fmt.Errorf("store URI %q: no scheme (file:///dir or s3://bucket/prefix)", s)
	}
	return Location{}, fmt.Errorf("store URI %q: unknown scheme %q (file:///dir or s3://bucket/prefix)", s, u.Scheme)
}
