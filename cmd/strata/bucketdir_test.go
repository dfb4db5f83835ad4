package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBucketDir: with --bucket-dir the directory store lives where the
// operator says, outside the data directory (so nodes on one machine can
// share it, issue 11), the bootstrap line names it, the uploads land
// there and not in <data-dir>/bucket, and the tier verbs read it back with
// the same flag.
func TestBucketDir(t *testing.T) {
	dataDir, bucket := t.TempDir(), filepath.Join(t.TempDir(), "shared-bucket")
	n, line := startProcess(t, nil, "dev", "--data-dir", dataDir, "--bucket-dir", bucket,
		"--listen", "127.0.0.1:0", "--http-listen", "off", "--tier-upload-interval", "100ms")
	n.readBootstrap(t, line)
	if !strings.Contains(line, "bucket "+bucket) {
		t.Errorf("bootstrap line does not name the bucket directory: %q", line)
	}
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	mustCreate(t, n.bootstrap, "shared", 1, smallSegments)
	produceN(t, n.bootstrap, "shared", 0, 30)
	waitTiered(t, env, "shared", "--bucket-dir", bucket)

	if out := cliOK(t, env, "tier", "ls", "shared", "0", "--bucket-dir", bucket); !strings.Contains(out, "remote log start 0") {
		t.Errorf("tier ls --bucket-dir:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "bucket")); err == nil {
		t.Errorf("%s/bucket exists: the node tiered into its data dir too", dataDir)
	}
	n.stop(t)
}

// TestBucketDirWithS3Bucket: naming both a directory and an S3 bucket for
// the cold tier is refused at once, in one line, as a command-line error.
func TestBucketDirWithS3Bucket(t *testing.T) {
	for _, verb := range []string{"dev", "serve"} {
		code, stdout, stderr := runCLI(t, nil, verb, "--data-dir", t.TempDir(), "--bucket-dir", "/tmp/b", "--s3-bucket", "events")
		if code != 2 || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q", verb, code, stdout)
		}
		assertOneLineError(t, stderr, "tier.bucket_dir", "s3.bucket", "not both", "strata "+verb+" --help")
	}
}

// TestLocalstackRefusesBucketDir: localstack's cold tier is its own S3
// bucket, so --bucket-dir is a usage error, found before anything starts.
func TestLocalstackRefusesBucketDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, stdout, stderr := runCLI(t, nil, "localstack", "--bucket-dir", filepath.Join(t.TempDir(), "b"), "--data-dir", dir,
		"--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--http-listen", "off")
	if code != 2 || stdout != "" {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	assertOneLineError(t, stderr, "--bucket-dir", "S3 bucket", "strata localstack --help")
	if _, err := os.Stat(dir); err == nil {
		t.Error("data dir created for a command line that is refused")
	}
}
