package broker

import (
	"io"
	"net/http"
	"testing"
)

// /debug/pprof/ is served only with HTTPPprof, and behind the bearer
// token like /metrics.
func TestHTTPPprof(t *testing.T) {
	get := func(b *Broker, path, token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+b.HTTPAddr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	off := testBroker(t, "", func(c *Config) { c.HTTPListen = "127.0.0.1:0" })
	if code := get(off, "/debug/pprof/goroutine?debug=1", ""); code != http.StatusNotFound {
		t.Errorf("pprof off: /debug/pprof/goroutine answered %d, want 404", code)
	}
	on := testBroker(t, "", func(c *Config) {
		c.HTTPListen, c.HTTPPprof, c.HTTPBearerToken = "127.0.0.1:0", true, "s3cret"
	})
	if code := get(on, "/debug/pprof/goroutine?debug=1", ""); code != http.StatusUnauthorized {
		t.Errorf("pprof on, no token: %d, want 401", code)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if code := get(on, path, "s3cret"); code != http.StatusOK {
			t.Errorf("pprof on, with the token: %s answered %d, want 200", path, code)
		}
	}
}
