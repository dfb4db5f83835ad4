package broker

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"syscall"
	"time"

	"strata/segment"
)

// zeroCopy sends the record bytes of a fetch response straight from the
// segment files with sendfile(2): they never enter the broker's memory,
// so a consumer reading from the page cache costs the broker little more
// than the response's framing. Only plaintext TCP connections have one;
// a TLS connection encrypts every byte and copies.
//
// The response is encoded by kmsg as any other, with a marker in place
// of each sent range's records: the writer cuts the encoding at the
// markers, writes the framing through the connection's buffer and the
// ranges with sendfile, and fixes the lengths (the frame's and each
// record set's) for the range's real size.
type zeroCopy struct {
	rc syscall.RawConn
	nc net.Conn
	// nonce starts every marker of this connection; 12 random bytes and a
	// range's index make a marker no encoded field holds by chance.
	nonce [12]byte
	// ranges are the current response's, in marker order; released once
	// it is written.
	ranges []segment.FileRange
}

// markerLen is the size of the placeholder for a range's records.
const markerLen = 16

// newZeroCopy returns nc's sender, nil when nc cannot sendfile.
func newZeroCopy(nc net.Conn) *zeroCopy {
	tc, ok := nc.(*net.TCPConn)
	if !ok || !segment.ZeroCopy {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	z := &zeroCopy{rc: rc, nc: nc}
	rand.Read(z.nonce[:])
	return z
}

// enabled reports whether fetches on this connection may answer with
// file ranges.
func (z *zeroCopy) enabled() bool { return z != nil }

// add takes r for the current response and returns the marker to encode
// in its place.
func (z *zeroCopy) add(r segment.FileRange) []byte {
	m := z.marker(len(z.ranges))
	z.ranges = append(z.ranges, r)
	return m
}

// pending reports whether the response being written has ranges.
func (z *zeroCopy) pending() bool { return z != nil && len(z.ranges) > 0 }

// total is the size of the current response's ranges.
func (z *zeroCopy) total() int {
	n := 0
	if z != nil {
		for i := range z.ranges {
			n += z.ranges[i].Len()
		}
	}
	return n
}

// release lets the current response's ranges go.
func (z *zeroCopy) release() {
	if z == nil {
		return
	}
	for i := range z.ranges {
		z.ranges[i].Release()
	}
	z.ranges = z.ranges[:0]
}

// write sends out, a whole encoded response frame holding the markers of
// z's ranges, with each marker (and the length before it) replaced by
// the range's length and bytes. flexible says how kmsg wrote a record
// set's length: a uvarint of length+1 (compact bytes) or an int32.
func (z *zeroCopy) write(c *conn, out []byte, flexible bool) error {
	prefix := 4
	if flexible {
		prefix = uvarintLen(markerLen + 1)
	}
	// Find every marker first: the frame's length must be right before
	// its first byte goes out.
	at := make([]int, len(z.ranges))
	from := 4
	size := len(out) - 4
	for i := range z.ranges {
		m := bytes.Index(out[from:], z.marker(i))
		if m < 0 {
			return fmt.Errorf("fetch response: the marker of file range %d is missing", i)
		}
		at[i] = from + m
		from = at[i] + markerLen
		n := z.ranges[i].Len()
		size += lengthLen(n, flexible) + n - prefix - markerLen
	}
	binary.BigEndian.PutUint32(out, uint32(size))
	from = 0
	var lenBuf [binary.MaxVarintLen64]byte
	for i := range z.ranges {
		r := &z.ranges[i]
		if _, err := c.w.Write(out[from : at[i]-prefix]); err != nil {
			return err
		}
		if _, err := c.w.Write(appendLength(lenBuf[:0], r.Len(), flexible)); err != nil {
			return err
		}
		if err := c.w.Flush(); err != nil {
			return err
		}
		z.nc.SetWriteDeadline(time.Now().Add(c.b.cfg.ConnectionsMaxIdle))
		n, err := r.SendTo(z.rc)
		c.b.metrics.zeroCopyOut.Add(float64(n))
		if err != nil {
			// Part of the frame is out: the connection cannot go on.
			return fmt.Errorf("send records of a fetch response: %w", err)
		}
		from = at[i] + markerLen
	}
	c.b.metrics.bytesOut.Add(float64(size + 4))
	_, err := c.w.Write(out[from:])
	return err
}

// marker is range i's marker.
func (z *zeroCopy) marker(i int) []byte {
	var m [markerLen]byte
	copy(m[:], z.nonce[:])
	binary.BigEndian.PutUint32(m[len(z.nonce):], uint32(i))
	return m[:]
}

// lengthLen is the size of a record set's length of n bytes.
func lengthLen(n int, flexible bool) int {
	if flexible {
		return uvarintLen(uint64(n) + 1)
	}
	return 4
}

// appendLength appends a record set's length of n bytes as kmsg writes
// it: compact (uvarint n+1) in flexible versions, else an int32.
func appendLength(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return binary.AppendUvarint(dst, uint64(n)+1)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
