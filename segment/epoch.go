package segment

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// epochEntry says that leader epoch `epoch` wrote its first batch at
// offset `start`.
type epochEntry struct {
	epoch int32
	start int64
}

// encodeEpochs renders Kafka's leader-epoch-checkpoint text format.
func encodeEpochs(es []epochEntry) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(es))
	for _, e := range es {
		fmt.Fprintf(&b, "%d %d\n", e.epoch, e.start)
	}
	return b.Bytes()
}

func decodeEpochs(data []byte) ([]epochEntry, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	if v, ok := line(); !ok || v != "0" {
		return nil, fmt.Errorf("unsupported leader-epoch-checkpoint version %q", v)
	}
	c, ok := line()
	n, err := strconv.Atoi(c)
	if !ok || err != nil || n < 0 {
		return nil, fmt.Errorf("bad leader-epoch-checkpoint entry count %q", c)
	}
	es := make([]epochEntry, 0, min(n, 1024))
	for i := range n {
		l, ok := line()
		fields := strings.Fields(l)
		if !ok || len(fields) != 2 {
			return nil, fmt.Errorf("bad leader-epoch-checkpoint entry %d: %q", i, l)
		}
		ep, err1 := strconv.ParseInt(fields[0], 10, 32)
		st, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil || ep < 0 || st < 0 {
			return nil, fmt.Errorf("bad leader-epoch-checkpoint entry %d: %q", i, l)
		}
		e := epochEntry{int32(ep), st}
		if k := len(es); k > 0 && (e.epoch <= es[k-1].epoch || e.start < es[k-1].start) {
			return nil, fmt.Errorf("leader-epoch-checkpoint entry %d is out of order", i)
		}
		es = append(es, e)
	}
	return es, nil
}

// truncateEpochsFromEnd drops entries that start at or after leo: no batch
// of theirs is left.
func truncateEpochsFromEnd(es []epochEntry, leo int64) []epochEntry {
	i := len(es)
	for i > 0 && es[i-1].start >= leo {
		i--
	}
	return es[:i]
}

// truncateEpochsFromStart drops entries wholly below the log start offset
// and moves the last of them up to it, as Kafka's truncateFromStart does.
func truncateEpochsFromStart(es []epochEntry, start int64) []epochEntry {
	i := 0
	for i+1 < len(es) && es[i+1].start <= start {
		i++
	}
	out := append([]epochEntry(nil), es[i:]...)
	if len(out) > 0 && out[0].start < start {
		out[0].start = start
	}
	return out
}

// endOffsetForEpoch answers OffsetForLeaderEpoch as a Kafka leader does
// (LeaderEpochFileCache.endOffsetFor, KIP-101, KIP-279): the largest known
// epoch <= requested and the start offset of the epoch after it, the log
// end offset for the latest epoch; for an epoch below every known one,
// the requested epoch and the first start offset; (-1, -1) for -1 or with
// no history.
//
// A Kafka leader records its own epoch at its log end offset when it is
// elected, so its history never ends below an epoch a follower can ask
// about. Here an epoch enters the history with its first batch; an epoch
// above every recorded one is answered as that election entry would
// answer it: the log end offset and the latest recorded epoch. Callers
// fence requests from epochs above the partition's current one first.
func endOffsetForEpoch(es []epochEntry, requested int32, leo int64) (int64, int32) {
	if requested < 0 || len(es) == 0 {
		return -1, -1
	}
	if latest := es[len(es)-1].epoch; latest <= requested {
		return leo, latest
	}
	// higher: first entry with epoch > requested.
	h := 0
	for h < len(es) && es[h].epoch <= requested {
		h++
	}
	if h == 0 {
		return es[0].start, requested // below every known epoch
	}
	return es[h].start, es[h-1].epoch
}
