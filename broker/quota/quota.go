package quota

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"strata/meta"
)

// Kind is one of the quotas a client is measured against.
type Kind int

const (
	Produce Kind = iota // producer_byte_rate
	Fetch               // consumer_byte_rate
	Request             // request_percentage
	numKinds
)

// Key is the quota key that sets k's limit.
func (k Kind) Key() string {
	switch k {
	case Produce:
		return meta.QuotaProducerByteRate
	case Fetch:
		return meta.QuotaConsumerByteRate
	default:
		return meta.QuotaRequestPercentage
	}
}

func (k Kind) String() string {
	switch k {
	case Produce:
		return "produce"
	case Fetch:
		return "fetch"
	default:
		return "request"
	}
}

// Table is where the configured quotas are looked up. *meta.State is
// one; the manager reads it on every call, so a quota changed in the
// metadata applies to the next request.
type Table interface {
	// ClientQuota returns the value of key set on entity e, if any.
	ClientQuota(e meta.QuotaEntity, key string) (float64, bool)
	// HasClientQuotas reports whether any entity has any quota.
	HasClientQuotas() bool
}

// Config sets a Manager's windows, clock and metrics. Zero fields take
// Kafka's defaults.
type Config struct {
	// Samples is the number of windows a rate is measured over
	// (quota.window.num, 11).
	Samples int
	// Window is each window's length (quota.window.size.seconds, 1 s).
	Window time.Duration
	// Idle is how long a measurement nobody records into is kept (Kafka
	// expires quota sensors after an hour).
	Idle time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Registerer takes the manager's metrics; none when nil.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.Samples < 2 {
		c.Samples = 11
	}
	if c.Window <= 0 {
		c.Window = time.Second
	}
	if c.Idle <= 0 {
		c.Idle = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Manager measures clients against their quotas. It is safe for
// concurrent use.
type Manager struct {
	cfg Config

	mu struct {
		sync.Mutex
		// sensors holds a measurement per quota kind and sharing key.
		sensors   map[sensorKey]*bucket
		lastSweep time.Time
	}

	// Metrics, labelled by the configured entity that applied (a name,
	// <default>, or empty when the entity has no such component), so
	// that their number is bounded by the quotas configured, not by the
	// clients connected.
	recorded  *prometheus.CounterVec // quota, user, client_id
	throttled *prometheus.CounterVec // quota, user, client_id
}

// New returns a manager.
func New(cfg Config) *Manager {
	cfg.setDefaults()
	m := &Manager{cfg: cfg}
	m.mu.sensors = map[sensorKey]*bucket{}
	f := promauto.With(cfg.Registerer)
	m.recorded = f.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_quota_recorded_total",
		Help: "What clients under a quota used, by quota (produce and fetch: bytes; request: seconds of handling) and the quota entity that applied; rate() is the byte rate.",
	}, []string{"quota", "user", "client_id"})
	m.throttled = f.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_quota_throttle_seconds_total",
		Help: "Throttle time given to clients over their quota, by quota and the quota entity that applied.",
	}, []string{"quota", "user", "client_id"})
	return m
}

// sensorKey names who shares a measurement: the user, the client id, or
// both, as the entity that applied says.
type sensorKey struct {
	kind           Kind
	user, clientID string
	byUser, byID   bool
}

// User returns the user name of a principal ("User:alice" is alice), the
// name a user quota entity is matched against.
func User(principal string) string {
	if _, name, ok := strings.Cut(principal, ":"); ok {
		return name
	}
	return principal
}

// resolve finds the quota of kind k that applies to (user, clientID), in
// Kafka's order (see the package comment). ok is false when none does.
func resolve(t Table, k Kind, user, clientID string) (key sensorKey, applied meta.QuotaEntity, limit float64, ok bool) {
	u, c, du, dc := meta.QuotaNamed(user), meta.QuotaNamed(clientID), meta.QuotaDefault(), meta.QuotaDefault()
	both := sensorKey{kind: k, user: user, clientID: clientID, byUser: true, byID: true}
	userOnly := sensorKey{kind: k, user: user, byUser: true}
	idOnly := sensorKey{kind: k, clientID: clientID, byID: true}
	for _, o := range [...]struct {
		e   meta.QuotaEntity
		key sensorKey
	}{
		{meta.QuotaEntity{User: u, ClientID: c}, both},
		{meta.QuotaEntity{User: u, ClientID: dc}, both},
		{meta.QuotaEntity{User: u}, userOnly},
		{meta.QuotaEntity{User: du, ClientID: c}, both},
		{meta.QuotaEntity{User: du, ClientID: dc}, both},
		{meta.QuotaEntity{User: du}, userOnly},
		{meta.QuotaEntity{ClientID: c}, idOnly},
		{meta.QuotaEntity{ClientID: dc}, idOnly},
	} {
		if v, found := t.ClientQuota(o.e, k.Key()); found {
			return o.key, o.e, v, true
		}
	}
	return sensorKey{}, meta.QuotaEntity{}, 0, false
}

// Applies returns the entity whose quota of kind k applies to (user,
// clientID) and its value; ok is false when none does.
func Applies(t Table, k Kind, user, clientID string) (entity meta.QuotaEntity, limit float64, ok bool) {
	_, entity, limit, ok = resolve(t, k, user, clientID)
	return entity, limit, ok
}

// Record adds value (bytes, or for Request seconds of handling) to the
// measurement of (user, clientID) under the quota of kind k that applies
// to them, and returns how long to throttle the client: zero within the
// quota or without one. A throttled Fetch is taken back out again: the
// broker answers it without records (Kafka's unrecord), so what it would
// have carried does not count.
func (m *Manager) Record(t Table, k Kind, user, clientID string, value float64) time.Duration {
	if !t.HasClientQuotas() {
		return 0
	}
	key, applied, limit, ok := resolve(t, k, user, clientID)
	if !ok {
		return 0
	}
	amount := value
	if k == Request {
		amount = value * 100 // seconds of handling as percent-seconds of one handler
	}
	now := m.cfg.Now()
	m.mu.Lock()
	b := m.bucketLocked(key, limit, now)
	var throttle time.Duration
	if debt := b.take(&m.cfg, limit, amount, now); debt > 0 {
		throttle = min(time.Duration(debt/limit*float64(time.Second)), m.maxThrottle(k))
		if k == Fetch {
			b.take(&m.cfg, limit, -amount, now)
		}
	}
	m.mu.Unlock()

	labels := []string{k.String(), label(applied.User), label(applied.ClientID)}
	if throttle > 0 {
		m.throttled.WithLabelValues(labels...).Add(throttle.Seconds())
	}
	if throttle == 0 || k != Fetch {
		m.recorded.WithLabelValues(labels...).Add(value)
	}
	return throttle
}

// MaxInWindow returns the most a measurement of kind k for (user,
// clientID) may take in one go: the quota over Samples-1 windows, what
// Kafka caps a consumer's fetch at, so that one response cannot put a
// consumer deeper in debt than the measurement spans. ok is false
// without a quota.
func (m *Manager) MaxInWindow(t Table, k Kind, user, clientID string) (limit float64, ok bool) {
	if !t.HasClientQuotas() {
		return 0, false
	}
	_, _, q, ok := resolve(t, k, user, clientID)
	if !ok {
		return 0, false
	}
	return q * float64(m.cfg.Samples-1) * m.cfg.Window.Seconds(), true
}

// maxThrottle bounds a throttle: one window for the request quota, as
// Kafka does; all the windows for byte rates.
func (m *Manager) maxThrottle(k Kind) time.Duration {
	if k == Request {
		return m.cfg.Window
	}
	return time.Duration(m.cfg.Samples) * m.cfg.Window
}

func label(n meta.QuotaName) string {
	if !n.Set {
		return ""
	}
	return n.String()
}

// bucketLocked returns key's measurement, making it if needed, and now
// and then drops the measurements nobody recorded into for cfg.Idle.
func (m *Manager) bucketLocked(key sensorKey, quota float64, now time.Time) *bucket {
	if now.Sub(m.mu.lastSweep) > m.cfg.Idle/4 {
		m.mu.lastSweep = now
		for k, b := range m.mu.sensors {
			if now.Sub(b.last) > m.cfg.Idle {
				delete(m.mu.sensors, k)
			}
		}
	}
	b, ok := m.mu.sensors[key]
	if !ok {
		b = newBucket(&m.cfg, quota, now)
		m.mu.sensors[key] = b
	}
	return b
}

// sensors reports how many measurements the manager holds (tests).
func (m *Manager) sensors() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.sensors)
}
