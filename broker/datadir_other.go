//go:build !unix

package broker

// lockDataDir does nothing where flock(2) does not exist; Badger's own
// lock on the metadata still stops a second broker, in its own words.
func lockDataDir(string) (func() error, error) { return func() error { return nil }, nil }
