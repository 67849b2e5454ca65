package gateway

import "sync"

// Quarantine ends a client's egress after a blocked credential leak, when
// credentials.quarantineOnLeak is set: an agent caught exfiltrating once
// gets no second try through another channel. It is kept per client (the
// whole moat run, or one daemon token), so one tenant's leak does not stop
// the others. A nil *Quarantine never quarantines.
type Quarantine struct {
	enabled bool
	mu      sync.Mutex
	hit     map[string]bool
	// watchers are told each client that becomes quarantined (a gateway
	// closes the client's open tunnels).
	watchers []func(client string)
}

// NewQuarantine returns a Quarantine that acts only when enabled.
func NewQuarantine(enabled bool) *Quarantine {
	return &Quarantine{enabled: enabled, hit: make(map[string]bool)}
}

// Leak records a blocked leak by client.
func (q *Quarantine) Leak(client, credential string) {
	if q == nil || !q.enabled {
		return
	}
	q.mu.Lock()
	first := !q.hit[client]
	q.hit[client] = true
	watchers := q.watchers
	q.mu.Unlock()
	if first {
		for _, w := range watchers {
			w(client)
		}
	}
}

// watch registers f to be told each client that becomes quarantined.
func (q *Quarantine) watch(f func(client string)) {
	if q == nil || !q.enabled {
		return
	}
	q.mu.Lock()
	q.watchers = append(q.watchers, f)
	q.mu.Unlock()
}

// Active reports whether client is quarantined.
func (q *Quarantine) Active(client string) bool {
	if q == nil || !q.enabled {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hit[client]
}
