package segment

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// maxDecompressed bounds what one batch may decompress to, so a small
// hostile batch cannot make validation allocate without limit. Producers
// cap batches at far less (batch.size).
const maxDecompressed = 256 << 20

// maxPooledBuf keeps a rare huge batch from pinning its buffer in the pool.
const maxPooledBuf = 4 << 20

// maxZstdWindow refuses zstd frames whose window (the history a decoder
// must hold) is larger: producers' levels up to 20 stay below it, and a
// hostile frame cannot make each decoder allocate hundreds of MB.
const maxZstdWindow = 32 << 20

// maxSnappyRatio bounds how far a snappy block may expand: the densest
// snappy op turns 3 bytes into 64, so a larger claimed length is not
// snappy a producer wrote (S2's repeat codes can claim far more).
const maxSnappyRatio = 22

var errTooLarge = errors.New("decompressed batch exceeds the limit")

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func putBuf(p *[]byte) {
	if cap(*p) <= maxPooledBuf {
		*p = (*p)[:0]
		bufPool.Put(p)
	}
}

type gzipDecoder struct {
	r   gzip.Reader
	src bytes.Reader
}

type lz4Decoder struct {
	r   *lz4.Reader
	src bytes.Reader
}

var (
	gzipPool = sync.Pool{New: func() any { return new(gzipDecoder) }}
	lz4Pool  = sync.Pool{New: func() any { return &lz4Decoder{r: lz4.NewReader(nil)} }}
	// zstdDec is safe for concurrent DecodeAll; it keeps its own pool of
	// decoding state.
	zstdDec = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(maxDecompressed))
	})
)

// zstdStream is a streaming zstd decoder with the source it reads. With
// concurrency 1 it runs in the caller's goroutine, so a pooled one holds no
// goroutine of its own.
type zstdStream struct {
	d   *zstd.Decoder
	src bytes.Reader
}

var (
	zstdStreamPool = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecodeBuffersBelow(0))
		if err != nil {
			return err
		}
		return &zstdStream{d: d}
	}}
	bufioPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}
)

// openStream returns a reader of the decompression of src, and a function
// that gives its resources back once the caller is done reading. Nothing
// is decompressed ahead of what is read, so a reader that stops early
// bounds the work.
func openStream(codec int, src []byte) (*bufio.Reader, func(), error) {
	var r io.Reader
	var done func()
	switch codec {
	case codecGzip:
		d := gzipPool.Get().(*gzipDecoder)
		d.src.Reset(src)
		if err := d.r.Reset(&d.src); err != nil {
			gzipPool.Put(d)
			return nil, nil, err
		}
		r, done = &d.r, func() { d.src.Reset(nil); gzipPool.Put(d) }
	case codecLz4:
		d := lz4Pool.Get().(*lz4Decoder)
		d.src.Reset(src)
		d.r.Reset(&d.src)
		r, done = d.r, func() { d.src.Reset(nil); lz4Pool.Put(d) }
	case codecZstd:
		got := zstdStreamPool.Get()
		d, ok := got.(*zstdStream)
		if !ok {
			return nil, nil, fmt.Errorf("zstd decoder: %v", got)
		}
		d.src.Reset(src)
		if err := d.d.Reset(&d.src); err != nil {
			zstdStreamPool.Put(d)
			return nil, nil, err
		}
		r, done = d.d, func() { d.src.Reset(nil); zstdStreamPool.Put(d) }
	default:
		return nil, nil, fmt.Errorf("codec %d does not stream", codec)
	}
	br := bufioPool.Get().(*bufio.Reader)
	br.Reset(r)
	return br, func() { br.Reset(nil); bufioPool.Put(br); done() }, nil
}

// decompress returns the decompressed records in a pooled buffer, which the
// caller hands back with putBuf when done with out.
func decompress(codec int, src []byte) (pooled *[]byte, out []byte, err error) {
	pooled = bufPool.Get().(*[]byte)
	dst := (*pooled)[:0]
	switch codec {
	case codecGzip:
		d := gzipPool.Get().(*gzipDecoder)
		defer gzipPool.Put(d)
		d.src.Reset(src)
		if err = d.r.Reset(&d.src); err == nil {
			dst, err = readBounded(dst, &d.r)
		}
	case codecLz4:
		d := lz4Pool.Get().(*lz4Decoder)
		defer lz4Pool.Put(d)
		d.src.Reset(src)
		d.r.Reset(&d.src)
		dst, err = readBounded(dst, d.r)
	case codecSnappy:
		dst, err = decodeSnappy(dst, src)
	case codecZstd:
		var d *zstd.Decoder
		if d, err = zstdDec(); err == nil {
			dst, err = d.DecodeAll(src, dst)
		}
	default:
		err = fmt.Errorf("unknown codec %d", codec)
	}
	if cap(dst) > cap(*pooled) {
		*pooled = dst[:0] // keep the grown buffer for reuse
	}
	if err != nil {
		putBuf(pooled)
		return nil, nil, err
	}
	return pooled, dst, nil
}

// decompressSnappy is decompress for snappy with output bounded by limit.
func decompressSnappy(src []byte, limit int64) (pooled *[]byte, out []byte, err error) {
	pooled = bufPool.Get().(*[]byte)
	dst, err := decodeSnappyLimit((*pooled)[:0], src, limit)
	if cap(dst) > cap(*pooled) {
		*pooled = dst[:0]
	}
	if err != nil {
		putBuf(pooled)
		return nil, nil, err
	}
	return pooled, dst, nil
}

// readBounded appends all of r to dst, failing past maxDecompressed.
func readBounded(dst []byte, r io.Reader) ([]byte, error) {
	for empty := 0; ; {
		if len(dst) == cap(dst) {
			if len(dst) >= maxDecompressed {
				return dst, errTooLarge
			}
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if n > 0 || err != nil {
			empty = 0
		} else if empty++; empty > 100 {
			return dst, io.ErrNoProgress
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// xerialMagic starts the snappy framing the Java producer writes.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decodeSnappy decodes either a raw snappy block or Kafka's xerial framing
// (16-byte header, then chunks of a 4-byte length and a raw block), as
// franz-go and the Java client accept both.
func decodeSnappy(dst, src []byte) ([]byte, error) {
	return decodeSnappyLimit(dst, src, maxDecompressed)
}

// decodeSnappyLimit is decodeSnappy failing with errTooLarge before
// allocating for output beyond limit bytes.
func decodeSnappyLimit(dst, src []byte, limit int64) ([]byte, error) {
	if len(src) <= 16 || !bytes.HasPrefix(src, xerialMagic) {
		return decodeSnappyBlock(dst, src, limit)
	}
	for src = src[16:]; len(src) > 0; {
		if len(src) < 4 {
			return dst, errors.New("malformed xerial framing")
		}
		n := binary.BigEndian.Uint32(src)
		src = src[4:]
		if uint64(n) > uint64(len(src)) {
			return dst, errors.New("malformed xerial framing")
		}
		var err error
		if dst, err = decodeSnappyBlock(dst, src[:n], limit); err != nil {
			return dst, err
		}
		src = src[n:]
	}
	return dst, nil
}

// decodeSnappyBlock appends the decoding of one raw snappy block to dst,
// as long as dst stays within limit bytes.
func decodeSnappyBlock(dst, src []byte, limit int64) ([]byte, error) {
	l, err := s2.DecodedLen(src)
	if err != nil {
		return dst, err
	}
	if int64(l) > int64(len(src))*maxSnappyRatio+64 {
		return dst, fmt.Errorf("block of %d bytes claims to expand to %d, beyond what snappy can", len(src), l)
	}
	if int64(len(dst))+int64(l) > min(limit, maxDecompressed) {
		return dst, errTooLarge
	}
	if cap(dst)-len(dst) < l {
		grown := make([]byte, len(dst), len(dst)+l)
		copy(grown, dst)
		dst = grown
	}
	out, err := s2.Decode(dst[len(dst):len(dst)+l], src)
	if err != nil {
		return dst, err
	}
	return dst[:len(dst)+len(out)], nil
}
