package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/booty-dev/booty/pkg/api"
)

// Bounds of what one machine may send.
const (
	// MaxLogLineBytes bounds one agent log line; longer ones are cut.
	MaxLogLineBytes = 4096
	// DefaultReportRate is the sustained reports (log lines count one
	// each) per second one machine may send; DefaultReportBurst the burst.
	DefaultReportRate  = 200
	DefaultReportBurst = 4000
	// maxBuckets bounds the limiter's memory; it only holds authenticated
	// machines, and idle buckets are dropped when it is full.
	maxBuckets = 100_000
)

// bucket is one machine's token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter is a token bucket per MAC.
type limiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	buckets map[string]*bucket
}

// take removes n tokens from mac's bucket; false (and how long until they
// are there) when it has fewer.
func (l *limiter) take(mac string, n int, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b := l.buckets[mac]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			for k, v := range l.buckets {
				if now.Sub(v.last) > time.Duration(l.burst/l.rate*float64(time.Second)) {
					delete(l.buckets, k)
				}
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[mac] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if float64(n) > b.tokens {
		return false, time.Duration((float64(n) - b.tokens) / l.rate * float64(time.Second))
	}
	b.tokens -= float64(n)
	return true, 0
}

// allow charges n to mac's report budget, answering 429 with Retry-After
// when it is spent.
func (s *Server) allow(w http.ResponseWriter, mac string, n int) bool {
	ok, wait := s.limit.take(mac, max(n, 1), s.opts.Now())
	if ok {
		return true
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	writeError(w, http.StatusTooManyRequests, "machine %s sends reports faster than %d per second; retry later", mac, int(s.limit.rate))
	return false
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// handleHealth accepts the agent's health-check results and prints the
// failed and warning ones.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	a, ok := s.authorizeAgent(w, r)
	if !ok {
		return
	}
	if !s.allow(w, a.mac, 1) {
		return
	}
	var rep api.HealthReport
	if !s.decodeBody(w, r, &rep, "HealthReport") {
		return
	}
	for _, c := range rep.Checks {
		if c.Status != "pass" {
			s.println("%s health %s %s: %s", a.mac, clean(c.Name), clean(c.Status), clean(truncate(c.Message, MaxLogLineBytes)))
		}
	}
	writeJSON(w, http.StatusOK, okBody)
}
