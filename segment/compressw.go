package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression for batches compaction rewrites: a rewritten batch goes out
// with the codec its producer chose, in a form every Kafka client reads.

// xerialBlockSize is the chunk size of the Java client's snappy framing.
const xerialBlockSize = 32 << 10

// appendWriter is an io.Writer appending to a slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

type gzipEncoder struct {
	w   *gzip.Writer
	out appendWriter
}

type lz4Encoder struct {
	w   *lz4.Writer
	out appendWriter
}

var (
	gzipEncPool = sync.Pool{New: func() any {
		e := new(gzipEncoder)
		e.w = gzip.NewWriter(&e.out)
		return e
	}}
	lz4EncPool = sync.Pool{New: func() any {
		e := new(lz4Encoder)
		e.w = lz4.NewWriter(&e.out)
		return e
	}}
	// A zstd encoder with concurrency 1 encodes in the caller's
	// goroutine and starts none of its own, so pooling one leaks nothing.
	// The window matches what clients write, keeping each pooled
	// encoder's memory small.
	zstdEncPool = sync.Pool{New: func() any {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(64<<10),
			zstd.WithZeroFrames(true))
		if err != nil {
			return err
		}
		return e
	}}
)

// isXerial reports whether src, the records of a batch with codec, are
// snappy in the Java client's xerial framing, which a rewrite keeps.
func isXerial(codec int, src []byte) bool {
	return codec == codecSnappy && len(src) > 16 && bytes.HasPrefix(src, xerialMagic)
}

// streamEncoder is a pooled compressor that writes a whole frame per
// Reset..Close (gzip, lz4).
type streamEncoder interface {
	Reset(w io.Writer)
	io.WriteCloser
}

// appendStream appends src compressed by w to dst, through out.
func appendStream(dst []byte, w streamEncoder, out *appendWriter, src []byte) ([]byte, error) {
	out.b = dst
	w.Reset(out)
	_, err := w.Write(src)
	if err == nil {
		err = w.Close()
	}
	dst, out.b = out.b, nil
	return dst, err
}

// appendCompressed appends src compressed with codec to dst. xerial
// selects the Java client's snappy framing over a raw snappy block.
func appendCompressed(dst []byte, codec int, src []byte, xerial bool) ([]byte, error) {
	switch codec {
	case codecNone:
		return append(dst, src...), nil
	case codecGzip:
		e := gzipEncPool.Get().(*gzipEncoder)
		defer gzipEncPool.Put(e)
		return appendStream(dst, e.w, &e.out, src)
	case codecSnappy:
		if !xerial {
			return appendSnappyBlock(dst, src), nil
		}
		// Header: magic, version 1, minimum compatible version 1.
		dst = append(dst, xerialMagic...)
		dst = binary.BigEndian.AppendUint32(dst, 1)
		dst = binary.BigEndian.AppendUint32(dst, 1)
		for len(src) > 0 {
			n := min(len(src), xerialBlockSize)
			at := len(dst)
			dst = appendSnappyBlock(append(dst, 0, 0, 0, 0), src[:n])
			binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
			src = src[n:]
		}
		return dst, nil
	case codecLz4:
		e := lz4EncPool.Get().(*lz4Encoder)
		defer lz4EncPool.Put(e)
		return appendStream(dst, e.w, &e.out, src)
	case codecZstd:
		got := zstdEncPool.Get()
		e, ok := got.(*zstd.Encoder)
		if !ok {
			return dst, fmt.Errorf("zstd encoder: %v", got)
		}
		defer zstdEncPool.Put(e)
		return e.EncodeAll(src, dst), nil
	}
	return dst, fmt.Errorf("unknown compression codec %d", codec)
}

// appendSnappyBlock appends src as one raw snappy block.
func appendSnappyBlock(dst, src []byte) []byte {
	n := s2.MaxEncodedLen(len(src))
	at := len(dst)
	dst = slices.Grow(dst, n)[:at+n]
	enc := s2.EncodeSnappy(dst[at:], src)
	return dst[:at+len(enc)]
}
