package main

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// recorder keeps every request's latency and outcome per endpoint.
type recorder struct {
	mu    sync.Mutex
	lat   map[string][]time.Duration
	codes map[string]map[string]int
	// from: observations of requests that started before it are dropped
	// (the warm-up).
	from time.Time
}

// newRecorder returns a recorder that keeps requests started from from on
// (all when zero).
func newRecorder(from time.Time) *recorder {
	return &recorder{lat: map[string][]time.Duration{}, codes: map[string]map[string]int{}, from: from}
}

// observe records one request: its latency and its outcome ("200", "429",
// "error: …" for a transport failure).
func (r *recorder) observe(endpoint string, d time.Duration, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.from.IsZero() && time.Now().Add(-d).Before(r.from) {
		return
	}
	r.lat[endpoint] = append(r.lat[endpoint], d)
	m := r.codes[endpoint]
	if m == nil {
		m = map[string]int{}
		r.codes[endpoint] = m
	}
	m[outcome]++
}

// endpointStats is one row of the report.
type endpointStats struct {
	Endpoint      string
	Count         int
	Rate          float64 // requests per second over the window
	P50, P99, Max time.Duration
	Outcomes      map[string]int
}

// ok counts the 2xx outcomes.
func (e endpointStats) ok() int {
	n := 0
	for k, v := range e.Outcomes {
		if len(k) == 3 && k[0] == '2' {
			n += v
		}
	}
	return n
}

// failures renders the non-2xx outcomes, "" when none.
func (e endpointStats) failures() string {
	var keys []string
	for k := range e.Outcomes {
		if !(len(k) == 3 && k[0] == '2') {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s ×%d", k, e.Outcomes[k])
	}
	return s
}

// snapshot computes the stats of every endpoint over a window of length window.
func (r *recorder) snapshot(window time.Duration) []endpointStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []endpointStats
	for ep, ls := range r.lat {
		s := slices.Clone(ls)
		slices.Sort(s)
		st := endpointStats{Endpoint: ep, Count: len(s), P50: quantile(s, 0.50), P99: quantile(s, 0.99), Outcomes: map[string]int{}}
		if len(s) > 0 {
			st.Max = s[len(s)-1]
		}
		if window > 0 {
			st.Rate = float64(len(s)) / window.Seconds()
		}
		for k, v := range r.codes[ep] {
			st.Outcomes[k] = v
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Endpoint < out[j].Endpoint })
	return out
}

// quantile of sorted durations, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
