package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// VersityInstall is the command that installs the second S3 server the
// compatibility tests run against; .ci/run runs it.
const VersityInstall = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// EnvVersity names a versitygw binary to use instead of the one found on
// PATH or in $(go env GOPATH)/bin.
const EnvVersity = "STRATA_VERSITYGW"

// findVersity returns the path of a versitygw binary, or "" when there is
// none: STRATA_VERSITYGW, then PATH, then where `go install` puts it.
func findVersity() string {
	if p := os.Getenv(EnvVersity); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		for _, d := range filepath.SplitList(gopath) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// TestVersity starts versitygw (github.com/versity/versitygw, Apache-2.0),
// an S3 server independent of the in-process one, as a process of its own
// with a POSIX backend in a temporary directory, and returns how to reach
// it; the process is killed when t ends. Unlike the in-process server it
// checks request signatures. t is skipped, with the command that installs
// it, when no versitygw binary is found.
//
// It exists so that S3 compatibility is not judged by one fake server: the
// objstore acceptance suite and a tiering end-to-end test run against both.
func TestVersity(t testing.TB) *S3 {
	t.Helper()
	bin := findVersity()
	if bin == "" {
		t.Skipf("versitygw not found on PATH or in GOPATH/bin (or %s); install it with: %s", EnvVersity, VersityInstall)
	}
	const bucket = "strata-test"
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &S3{Region: devRegion, Bucket: bucket, AccessKey: "strata-versity", SecretKey: "strata-versity-secret"}

	// versitygw takes its port on the command line, so pick a free one and
	// retry if another process takes it first.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "--port", addr, "--quiet", "posix", root)
		cmd.Env = append(os.Environ(),
			"ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey, "VGW_REGION="+s.Region)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("start versitygw: %v", err)
		}
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		if err := waitListening(addr, exited, &waitErr, 20*time.Second); err != nil {
			cancel()
			<-exited
			lastErr = fmt.Errorf("%w; output: %s", err, strings.TrimSpace(out.String()))
			continue
		}
		t.Cleanup(func() {
			cancel()
			<-exited
		})
		s.Endpoint = "http://" + addr
		return s
	}
	t.Fatalf("versitygw did not start: %v", lastErr)
	return nil
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until addr accepts connections, the process exits,
// or d passes.
func waitListening(addr string, exited <-chan struct{}, waitErr *error, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("versitygw exited before listening on %s: %v", addr, *waitErr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("versitygw did not listen on " + addr + " within " + d.String())
		}
	}
}
