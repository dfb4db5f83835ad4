package archive

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultFormat is kcat's output without -f: each value on a line.
const DefaultFormat = `%s\n`

// Formatter renders records as kcat's -f format strings do, so that a
// format prints from the bucket byte for byte what kcat prints from a
// broker:
//
//	%t topic        %p partition    %o offset       %T timestamp (Unix ms)
//	%k key          %K key size (-1 for a null key)
//	%s value        %S value size (-1 for a null value)
//	%h headers, name=value separated by commas (a null value prints NULL)
//	%% a percent sign
//
// and in the text between directives the escapes \n, \t, \r, \\ and
// \xHH (a byte in hex); a backslash before any other character stands for
// that character. A null or empty key or value prints nothing.
type Formatter struct {
	parts []fmtPart
}

type fmtPart struct {
	verb byte   // 0 for literal text
	text []byte // literal text, escapes resolved
}

// ParseFormat parses a format string; an unknown directive or a format
// ending in a lone % is an error naming it.
func ParseFormat(s string) (*Formatter, error) {
	f := &Formatter{}
	var lit []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '%':
			if i+1 == len(s) {
				return nil, fmt.Errorf("format %q ends with a lone %%", s)
			}
			i++
			switch v := s[i]; v {
			case '%':
				lit = append(lit, '%')
			case 't', 'p', 'o', 'T', 'k', 'K', 's', 'S', 'h':
				if len(lit) > 0 {
					f.parts = append(f.parts, fmtPart{text: lit})
					lit = nil
				}
				f.parts = append(f.parts, fmtPart{verb: v})
			default:
				return nil, fmt.Errorf("format %q: unknown directive %%%c (known: %%t %%p %%o %%T %%k %%K %%s %%S %%h %%%%)", s, v)
			}
		case '\\':
			if i+1 == len(s) {
				lit = append(lit, '\\')
				continue
			}
			i++
			switch e := s[i]; e {
			case 'n':
				lit = append(lit, '\n')
			case 't':
				lit = append(lit, '\t')
			case 'r':
				lit = append(lit, '\r')
			case 'x':
				j := i + 1
				for j < len(s) && j < i+3 && isHex(s[j]) {
					j++
				}
				if j == i+1 {
					return nil, fmt.Errorf(`format %q: \x needs hex digits`, s)
				}
				v, _ := strconv.ParseUint(s[i+1:j], 16, 8)
				lit = append(lit, byte(v))
				i = j - 1
			default:
				lit = append(lit, e)
			}
		default:
			lit = append(lit, c)
		}
	}
	if len(lit) > 0 {
		f.parts = append(f.parts, fmtPart{text: lit})
	}
	return f, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Append appends r rendered to dst.
func (f *Formatter) Append(dst []byte, r *kgo.Record) []byte {
	for _, p := range f.parts {
		switch p.verb {
		case 0:
			dst = append(dst, p.text...)
		case 't':
			dst = append(dst, r.Topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'T':
			dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
		case 'k':
			dst = append(dst, r.Key...)
		case 'K':
			dst = strconv.AppendInt(dst, size(r.Key), 10)
		case 's':
			dst = append(dst, r.Value...)
		case 'S':
			dst = strconv.AppendInt(dst, size(r.Value), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				dst = append(dst, '=')
				if h.Value == nil {
					dst = append(dst, "NULL"...)
				} else {
					dst = append(dst, h.Value...)
				}
			}
		}
	}
	return dst
}

// size is a key's or value's size, -1 for null, as kcat prints it.
func size(b []byte) int64 {
	if b == nil {
		return -1
	}
	return int64(len(b))
}

// JSONRecord is the object --format json and export print per record,
// one per line. Keys, values and header values are strings: the bytes
// themselves when they are valid UTF-8, else their standard base64 with
// the matching *_encoding field set to "base64". A null key or value is
// null. Timestamps are Unix milliseconds.
type JSONRecord struct {
	Topic         string       `json:"topic"`
	Partition     int32        `json:"partition"`
	Offset        int64        `json:"offset"`
	Timestamp     int64        `json:"timestamp"`
	Key           *string      `json:"key"`
	KeyEncoding   string       `json:"key_encoding,omitempty"`
	Value         *string      `json:"value"`
	ValueEncoding string       `json:"value_encoding,omitempty"`
	Headers       []JSONHeader `json:"headers"`
}

// JSONHeader is one record header in a JSONRecord.
type JSONHeader struct {
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ValueEncoding string  `json:"value_encoding,omitempty"`
}

// Base64 is the value of an *_encoding field for bytes that are not
// UTF-8.
const Base64 = "base64"

// encodeBytes returns b as a JSON string and its encoding ("" for UTF-8).
func encodeBytes(b []byte) (*string, string) {
	if b == nil {
		return nil, ""
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, Base64
}

// DecodeBytes turns a JSONRecord's string and encoding back into bytes.
func DecodeBytes(s *string, encoding string) ([]byte, error) {
	switch {
	case s == nil:
		return nil, nil
	case encoding == Base64:
		return base64.StdEncoding.DecodeString(*s)
	case encoding == "":
		return []byte(*s), nil
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}

// NewJSONRecord returns r as a JSONRecord.
func NewJSONRecord(r *kgo.Record) JSONRecord {
	j := JSONRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(),
		Headers: make([]JSONHeader, len(r.Headers))}
	j.Key, j.KeyEncoding = encodeBytes(r.Key)
	j.Value, j.ValueEncoding = encodeBytes(r.Value)
	for i, h := range r.Headers {
		j.Headers[i].Key = strings.ToValidUTF8(h.Key, "\uFFFD")
		j.Headers[i].Value, j.Headers[i].ValueEncoding = encodeBytes(h.Value)
	}
	return j
}

// AppendJSON appends r as one line of JSON (a JSONRecord, its fields in
// that order, and '\n') to dst. It writes what encoding/json would, by
// hand: an export spends most of its CPU here.
func AppendJSON(dst []byte, r *kgo.Record) []byte {
	dst = append(dst, `{"topic":`...)
	dst = appendJSONString(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
	dst = appendJSONBytes(dst, "key", r.Key)
	dst = appendJSONBytes(dst, "value", r.Value)
	dst = append(dst, `,"headers":[`...)
	for i, h := range r.Headers {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":`...)
		dst = appendJSONString(dst, strings.ToValidUTF8(h.Key, "\uFFFD"))
		dst = appendJSONBytes(dst, "value", h.Value)
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// appendJSONBytes appends ,"name":<b as a string or null> and, for bytes
// that are not UTF-8, ,"name_encoding":"base64".
func appendJSONBytes(dst []byte, name string, b []byte) []byte {
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":`...)
	switch {
	case b == nil:
		return append(dst, "null"...)
	case utf8.Valid(b):
		return appendJSONString(dst, b)
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	dst = append(dst, `","`...)
	dst = append(dst, name...)
	return append(dst, `_encoding":"base64"`...)
}

// appendJSONString appends s, valid UTF-8, as a JSON string. It is
// generic so that a value's bytes are escaped where they lie, not first
// copied into a string.
func appendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start, i := 0, 0
	for i < len(s) {
		// Eight bytes at a time while none needs escaping: the common
		// case, text.
		if len(s)-i >= 8 {
			w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			if !needsEscape(w) {
				i += 8
				continue
			}
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// needsEscape reports whether any of the eight bytes of w is below 0x20,
// a quote or a backslash (the tests of "Bit Twiddling Hacks", exact for
// whether any byte matches).
func needsEscape(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	less := (w - 0x20*ones) &^ w
	quote := w ^ '"'*ones
	quote = (quote - ones) &^ quote
	bslash := w ^ '\\'*ones
	bslash = (bslash - ones) &^ bslash
	return (less|quote|bslash)&highs != 0
}
