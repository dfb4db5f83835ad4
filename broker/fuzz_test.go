package broker

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzDecodeRequest feeds arbitrary frame bodies to the request decoder:
// it must never panic, and whatever it accepts must re-encode and decode
// to the same request (the valid prefix re-parses the same).
func FuzzDecodeRequest(f *testing.F) {
	for _, req := range []kmsg.Request{
		kmsg.NewPtrApiVersionsRequest(),
		kmsg.NewPtrMetadataRequest(),
		func() kmsg.Request {
			r := kmsg.NewPtrProduceRequest()
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "t"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = rawBatch(-1, -1, -1, 1, "v")
			rt.Partitions = append(rt.Partitions, rp)
			r.Topics = append(r.Topics, rt)
			return r
		}(),
		kmsg.NewPtrFetchRequest(),
		kmsg.NewPtrListOffsetsRequest(),
		kmsg.NewPtrCreateTopicsRequest(),
	} {
		a := apis[req.Key()]
		for _, v := range []int16{a.min, a.max} {
			req.SetVersion(v)
			f.Add(encodeRequest(req, 1))
		}
	}
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body, nil)
		if err != nil || !supported(req.kreq.Key(), req.kreq.GetVersion()) {
			return
		}
		again, err := decodeRequest(encodeRequest(req.kreq, req.corr), nil)
		if err != nil {
			t.Fatalf("re-encoded %s v%d does not decode: %v", kmsg.NameForKey(req.kreq.Key()), req.kreq.GetVersion(), err)
		}
		if string(encodeRequest(again.kreq, again.corr)) != string(encodeRequest(req.kreq, req.corr)) {
			t.Fatalf("%s v%d: decode is not stable", kmsg.NameForKey(req.kreq.Key()), req.kreq.GetVersion())
		}
	})
}

// encodeRequest builds a frame body (no length prefix) as a client would.
func encodeRequest(req kmsg.Request, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0xffff)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}
