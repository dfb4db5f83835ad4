package objstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// tmpDir is where the directory store stages puts before renaming them into
// place. It sits inside root so that rename stays on one filesystem, and keys
// may not start with it.
const tmpDir = ".objstore-tmp"

// staleTmpAge is how old a staged file must be before NewDir removes it: a
// crash leaves them behind, but another process sharing root may be writing
// a fresh one right now.
const staleTmpAge = time.Hour

// maxSegmentLen is the longest file name most filesystems accept.
const maxSegmentLen = 255

// dirStore keeps each object as a file at root/<key>, key segments mapping to
// subdirectories, so the tree looks like the bucket it stands in for.
type dirStore struct {
	root string
}

var _ Store = (*dirStore)(nil)

// NewDir returns a Store that keeps objects as files under root, creating
// root if needed. Puts are atomic and durable: the bytes go to a staged file
// that is fsynced, renamed over the key and the directory fsynced, so a crash
// leaves either the old object or the new one.
func NewDir(root string) (Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: dir store %q: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, tmpDir), 0o755); err != nil {
		return nil, fmt.Errorf("objstore: dir store: %w", err)
	}
	d := &dirStore{root: abs}
	d.removeStaleTmp()
	return d, nil
}

func (d *dirStore) String() string { return "dir:" + d.root }

func (d *dirStore) removeStaleTmp() {
	ents, err := os.ReadDir(filepath.Join(d.root, tmpDir))
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTmpAge {
			_ = os.Remove(filepath.Join(d.root, tmpDir, e.Name()))
		}
	}
}

func (d *dirStore) path(key string) (string, error) {
	if err := validateKey(key); err != nil {
		return "", err
	}
	if key == tmpDir || strings.HasPrefix(key, tmpDir+"/") {
		return "", fmt.Errorf("%w %q: %s is reserved by the directory store", ErrInvalidKey, key, tmpDir)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > maxSegmentLen {
			return "", fmt.Errorf("%w %q: segment longer than %d bytes", ErrInvalidKey, key, maxSegmentLen)
		}
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

func (d *dirStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return d.write(ctx, "put", key, r, size, os.Rename)
}

// Create links the staged file to the key's name: link(2), unlike
// rename(2), fails when the name exists, so the check and the write are
// one atomic step even between processes sharing the directory. The
// directory store therefore needs a filesystem with hard links.
func (d *dirStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return d.write(ctx, "create", key, r, size, os.Link)
}

// write stages the object, then places it under key with place (rename to
// replace, link to create).
func (d *dirStore) write(ctx context.Context, op, key string, r io.ReaderAt, size int64, place func(tmp, dst string) error) error {
	if err := ctxErr(ctx, op, key); err != nil {
		return err
	}
	dst, err := d.path(key)
	if err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("objstore: %s %q: negative size %d", op, key, size)
	}
	tmp, err := d.stage(ctx, key, r, size)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // no-op once renamed; drops the staged name once linked

	// A concurrent Delete may prune the parent directory between MkdirAll
	// and Rename; a bounded retry absorbs that race.
	for attempt := 0; ; attempt++ {
		created, err := d.mkdirs(filepath.Dir(dst))
		if err == nil {
			err = place(tmp, dst)
		}
		if err == nil {
			if err := syncDirs(created); err != nil {
				return fmt.Errorf("objstore: %s %q: %w", op, key, err)
			}
			return nil
		}
		if op == "create" && errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("objstore: %s %q: %w", op, key, ErrExists)
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 10 {
			return fmt.Errorf("objstore: %s %q: %w", op, key, err)
		}
	}
}

// stage writes the object to a new file in tmpDir and fsyncs it.
func (d *dirStore) stage(ctx context.Context, key string, r io.ReaderAt, size int64) (string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := filepath.Join(d.root, tmpDir, hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("objstore: put %q: %w", key, err)
	}
	n, err := io.Copy(f, ctxReader{ctx, io.NewSectionReader(r, 0, size)})
	if err == nil && n != size {
		err = fmt.Errorf("body has %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		if cerr := ctxErr(ctx, "put", key); cerr != nil {
			return "", cerr
		}
		return "", fmt.Errorf("objstore: put %q: %w", key, err)
	}
	return name, nil
}

// mkdirs creates dir and any missing parents below root, returning the
// directories whose entries changed (the parents of what it created, and dir
// itself) so the caller can fsync them after the rename.
func (d *dirStore) mkdirs(dir string) ([]string, error) {
	var missing []string
	for p := dir; p != d.root; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sync := []string{dir}
	for _, p := range missing {
		sync = append(sync, filepath.Dir(p))
	}
	return sync, nil
}

func syncDirs(dirs []string) error {
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *dirStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := ctxErr(ctx, "get", key); err != nil {
		return nil, err
	}
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	if err := validateRange(key, off); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, d.notFound("get", key, err)
	}
	info, err := f.Stat()
	if err == nil && info.IsDir() {
		err = fs.ErrNotExist
	}
	if err != nil {
		f.Close()
		return nil, d.notFound("get", key, err)
	}
	n, err = checkRange(key, off, n, info.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	// The open file keeps the inode alive, so an overwrite or delete that
	// races this read cannot change the bytes it returns.
	return &fileReader{ctxReader{ctx, io.NewSectionReader(f, off, n)}, f}, nil
}

type fileReader struct {
	io.Reader
	f *os.File
}

func (r *fileReader) Close() error { return r.f.Close() }

func (d *dirStore) notFound(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("objstore: %s %q: %w", op, key, ErrNotFound)
	}
	return fmt.Errorf("objstore: %s %q: %w", op, key, err)
}

func (d *dirStore) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := ctxErr(ctx, "stat", key); err != nil {
		return Attrs{}, err
	}
	p, err := d.path(key)
	if err != nil {
		return Attrs{}, err
	}
	info, err := os.Stat(p)
	if err == nil && info.IsDir() {
		err = fs.ErrNotExist
	}
	if err != nil {
		return Attrs{}, d.notFound("stat", key, err)
	}
	return Attrs{Key: key, Size: info.Size(), LastModified: info.ModTime()}, nil
}

func (d *dirStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return d.ListAfter(ctx, prefix, "", fn)
}

// ListAfter skips the keys up to startAfter before it stats anything, and
// the directories wholly below it: a listing of what is newer costs a
// directory read, not a stat per object kept.
func (d *dirStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	if err := ctxErr(ctx, "list", prefix); err != nil {
		return err
	}
	// Start at the deepest directory the prefix names in full.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i+1]
	}
	return d.walk(ctx, start, prefix, startAfter, fn)
}

// walk visits dir (a key prefix ending in '/', or "" for root) in key order.
// Sorting a directory's entries by name, with a subdirectory sorting as
// name+"/", makes depth-first order equal byte order of the full keys: every
// key under "a/" sorts after "a-c" and before "a0", as S3 lists them.
func (d *dirStore) walk(ctx context.Context, dir, prefix, after string, fn func(Attrs) error) error {
	ents, err := os.ReadDir(filepath.Join(d.root, filepath.FromSlash(dir)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // nothing under this prefix (or a racing delete pruned it)
		}
		return fmt.Errorf("objstore: list %q: %w", prefix, err)
	}
	type entry struct {
		key   string
		isDir bool
	}
	list := make([]entry, 0, len(ents))
	for _, e := range ents {
		if dir == "" && e.Name() == tmpDir {
			continue
		}
		k := dir + e.Name()
		if e.IsDir() {
			k += "/"
		}
		list = append(list, entry{k, e.IsDir()})
	}
	slices.SortFunc(list, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	for _, e := range list {
		if err := ctxErr(ctx, "list", prefix); err != nil {
			return err
		}
		if e.isDir {
			// Every key under e.key sorts below after unless after
			// is under it too.
			if e.key < after && !strings.HasPrefix(after, e.key) {
				continue
			}
			if strings.HasPrefix(e.key, prefix) || strings.HasPrefix(prefix, e.key) {
				if err := d.walk(ctx, e.key, prefix, after, fn); err != nil {
					return err
				}
			}
			continue
		}
		if !strings.HasPrefix(e.key, prefix) || e.key <= after {
			continue
		}
		info, err := os.Stat(filepath.Join(d.root, filepath.FromSlash(e.key)))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since ReadDir
			}
			return fmt.Errorf("objstore: list %q: %w", prefix, err)
		}
		if err := fn(Attrs{Key: e.key, Size: info.Size(), LastModified: info.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

func (d *dirStore) Delete(ctx context.Context, key string) error {
	if err := ctxErr(ctx, "delete", key); err != nil {
		return err
	}
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if info, err := os.Lstat(p); err == nil && info.IsDir() {
		return nil // a prefix of other keys, not an object
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("objstore: delete %q: %w", key, err)
	}
	// Prune now-empty parents so that List does not walk dead directories
	// and the key space stays free for a later object named like them.
	// Remove fails on a non-empty directory, which ends the pruning.
	for p = filepath.Dir(p); p != d.root; p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			break
		}
	}
	return nil
}
