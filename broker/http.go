package broker

import (
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves the operational endpoints: Prometheus metrics, a
// liveness probe, a readiness probe and, with HTTPPprof, Go's profiles. It is served from the start of
// Start, so that probes get an answer during a slow start-up; ready means
// started and with a metadata controller known, i.e. the broker accepts
// connections, can create topics and answer Metadata.
func (b *Broker) httpHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", b.bearer(promhttp.HandlerFor(g, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /readyz", b.bearer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !b.ready.Load() {
			http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
			return
		}
		if b.meta.ControllerID() < 0 {
			http.Error(w, "not ready: no metadata controller", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})))
	if b.cfg.HTTPPprof {
		mux.Handle("GET /debug/pprof/", b.bearer(http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", b.bearer(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", b.bearer(http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", b.bearer(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", b.bearer(http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

// bearer requires Config.HTTPBearerToken, when set, as the request's
// bearer token (RFC 6750), compared in constant time; a request without
// it is answered 401.
func (b *Broker) bearer(h http.Handler) http.Handler {
	want := b.cfg.HTTPBearerToken
	if want == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const prefix = "Bearer "
		got := r.Header.Get("Authorization")
		if len(got) < len(prefix) || !strings.EqualFold(got[:len(prefix)], prefix) ||
			subtle.ConstantTimeCompare([]byte(got[len(prefix):]), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="strata"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
