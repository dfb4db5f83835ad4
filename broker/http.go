package broker

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves the operational endpoints: Prometheus metrics, a
// liveness probe and a readiness probe. It is served from the start of
// Start, so that probes get an answer during a slow start-up; ready means
// started and with a metadata controller known, i.e. the broker accepts
// connections, can create topics and answer Metadata.
func (b *Broker) httpHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !b.ready.Load() {
			http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
			return
		}
		if b.meta.ControllerID() < 0 {
			http.Error(w, "not ready: no metadata controller", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	return mux
}
