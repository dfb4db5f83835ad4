// Package format owns the bucket format of tiered storage: the object keys,
// the segment object (a closed segment's log, indexes and producer state in
// one object, located by a fixed-size footer) and the per-partition
// manifest. It holds pure codecs: nothing here talks to an object store, so
// the uploader, the remote reader, the compactor and the inspection tools
// all agree on the bytes by construction.
//
// The format is specified in docs/bucket-format.md, precisely enough for a
// third party to read a topic out of a bucket without this code; the code
// follows that document. Every decoder takes untrusted bytes and returns an
// error, never panics, on anything malformed.
package format
