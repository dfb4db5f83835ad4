package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/localstack"
)

// minioListen stands in front of an S3 server and adds what MinIO has and
// it lacks: ListenBucketNotification (GET /<bucket>?events=...), a
// stream of one JSON line per object created under the request's prefix,
// as MinIO writes them. Everything else passes through.
type minioListen struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	subs  map[chan string]string // key channel -> prefix
}

func newMinIOListen(t *testing.T, upstream string) *httptest.Server {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	m := &minioListen{proxy: httputil.NewSingleHostReverseProxy(u), subs: map[chan string]string{}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return srv
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (m *minioListen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Query().Has("events") {
		m.listen(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	m.proxy.ServeHTTP(sw, r)
	if r.Method != http.MethodPut || sw.status != http.StatusOK || r.URL.Query().Has("uploadId") {
		return
	}
	// Path style: /<bucket>/<key>.
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
	if len(parts) != 2 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ch, prefix := range m.subs {
		if strings.HasPrefix(parts[1], prefix) {
			select {
			case ch <- parts[1]:
			default: // a slow listener loses events, as MinIO's may
			}
		}
	}
}

func (m *minioListen) listen(w http.ResponseWriter, r *http.Request) {
	ch := make(chan string, 1024)
	m.mu.Lock()
	m.subs[ch] = r.URL.Query().Get("prefix")
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}()
	suffix := r.URL.Query().Get("suffix")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case key := <-ch:
			if !strings.HasSuffix(key, suffix) {
				continue
			}
			ev := map[string]any{"Records": []any{map[string]any{
				"eventName": "s3:ObjectCreated:Put",
				"s3":        map[string]any{"object": map[string]any{"key": url.QueryEscape(key)}},
			}}}
			if enc.Encode(ev) != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

// TestReadReplicaNotifications: with read_replica.notifications on and a
// poll interval of an hour, a read replica of a MinIO source shows new
// records within seconds of their upload (the source's bucket
// notifications make it poll); against an S3 server without them, the
// replica says so and follows by polling. The MinIO here is a stand-in
// (minioListen) that speaks MinIO's notification protocol in front of the
// in-process S3; TestReadReplicaMinIONotifications runs the first half
// against a real MinIO.
func TestReadReplicaNotifications(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes and waits for uploads")
	}
	s3 := localstack.TestS3(t)
	if _, external := localstack.FromEnv(); external {
		t.Skip("STRATA_S3_ENDPOINT is set: TestReadReplicaMinIONotifications covers a real MinIO")
	}
	stand := newMinIOListen(t, s3.Endpoint)
	notificationsScenario(t, s3, stand.URL, s3.Endpoint)
}

// TestReadReplicaMinIONotifications is TestReadReplicaNotifications
// against the MinIO that STRATA_S3_ENDPOINT names.
func TestReadReplicaMinIONotifications(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes and waits for uploads")
	}
	if os.Getenv(localstack.EnvEndpoint) == "" {
		t.Skip("needs a MinIO: set STRATA_S3_ENDPOINT, STRATA_S3_BUCKET, STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY (e.g. `minio server` on http://127.0.0.1:9000)")
	}
	s3 := localstack.TestS3(t)
	resp, err := http.Head(s3.Endpoint + "/minio/health/live")
	if err != nil || !strings.Contains(strings.ToLower(resp.Header.Get("Server")), "minio") {
		t.Skipf("STRATA_S3_ENDPOINT=%s is not a MinIO (no Server: MinIO on /minio/health/live): bucket notifications are MinIO's", s3.Endpoint)
	}
	resp.Body.Close()
	notificationsScenario(t, s3, s3.Endpoint, "")
}

// notificationsScenario: a source node tiering to s3 through endpoint,
// and a replica polling hourly with notifications on; with plain (an
// endpoint of the same bucket without notifications) a second replica
// that falls back to polling.
func notificationsScenario(t *testing.T, s3 *localstack.S3, endpoint, plain string) {
	prefix := strings.TrimPrefix(s3.Prefix+"/notified", "/")
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	if s3.SecretKey != "strata-dev-secret" {
		keys = []string{"STRATA_S3_ACCESS_KEY=" + s3.AccessKey, "STRATA_S3_SECRET_KEY=" + s3.SecretKey}
	}
	s3Flags := []string{"--s3-endpoint", endpoint, "--s3-bucket", s3.Bucket, "--s3-prefix", prefix, "--s3-region", s3.Region}
	src := startNode(t, keys, append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--tier-upload-interval", "100ms", "--tier-idle-upload", "200ms"}, s3Flags...)...)
	rep := startNode(t, keys, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--read-replica-poll-interval", "1h", "--read-replica-notifications", "--read-replica-allowed-endpoints", endpoint)
	mustCreate(t, src.bootstrap, "notified", 1, map[string]*string{"segment.bytes": kmsg.StringPtr("4096")})
	produceN(t, src.bootstrap, "notified", 0, 30)
	srcEnv := append([]string{"STRATA_BOOTSTRAP=" + src.bootstrap}, keys...)
	waitRemoteEnd := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			rows := waitTiered(t, srcEnv, "notified", s3Flags...)
			if len(rows) == 1 && rows[0].RemoteEnd != nil && *rows[0].RemoteEnd == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the source did not upload up to %d: %+v", want, rows)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRemoteEnd(30)
	uri := func(ep string) string {
		return "s3://" + s3.Bucket + "/" + prefix + "?endpoint=" + url.QueryEscape(ep) + "&path_style=true"
	}
	cliOK(t, []string{"STRATA_BOOTSTRAP=" + rep.bootstrap}, "topic", "create", "notified", "--read-replica-of", uri(endpoint))
	var fallback *node
	if plain != "" {
		fallback = startNode(t, keys, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
			"--read-replica-poll-interval", "200ms", "--read-replica-notifications", "--read-replica-allowed-endpoints", plain)
		cliOK(t, []string{"STRATA_BOOTSTRAP=" + fallback.bootstrap}, "topic", "create", "notified", "--read-replica-of", uri(plain))
	}
	end := func(n *node) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := kadm.NewClient(newClient(t, n.bootstrap)).ListEndOffsets(ctx, "notified")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup("notified", 0)
		return o.Offset
	}
	if e := end(rep); e != 30 {
		t.Fatalf("the replica ends at %d after its creation, want 30", e)
	}

	// New records: the hourly poll is far off; the notification of the
	// new manifest brings them.
	produceN(t, src.bootstrap, "notified", 30, 20)
	waitRemoteEnd(50)
	uploaded := time.Now()
	for end(rep) != 50 {
		if time.Since(uploaded) > 10*time.Second {
			t.Fatalf("the replica still ends at %d 10 s after the source uploaded to 50: no notification came\n%s", end(rep), rep.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("upload to visibility by notification: %s (the test sees the upload by polling `strata tier status`)", time.Since(uploaded).Round(time.Millisecond))
	if !strings.Contains(rep.stderr.String(), "following the source by bucket notifications") {
		t.Errorf("the replica's log does not say it follows the source by notifications:\n%s", rep.stderr.String())
	}
	if fallback == nil {
		return
	}
	// The store without notifications: polled, and the log says why.
	for end(fallback) != 50 {
		if time.Since(uploaded) > 10*time.Second {
			t.Fatalf("the replica of the store without notifications ends at %d, want 50", end(fallback))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(fallback.stderr.String(), "bucket notifications of the source failed") {
		t.Errorf("the replica of a store without notifications does not say it polls alone:\n%s", fallback.stderr.String())
	}
}
